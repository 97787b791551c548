//! One map of one partition replica: its records, an index to find them by key, the order in
//! which they expire, and the count of the memory they take.
//!
//! The records live in a vector, in insertion order; a hash table holds only each record's
//! position in it (4 bytes). Removing a record moves the last one into its place (as
//! `IndexMap::swap_remove` does), so the order is the insertion order changed by removals, and it
//! depends only on the calls made, never on the hash seed: the same calls give the same order.
//!
//! The memory count ([`MapTable::memory_bytes`]) is a function of the records held alone: the
//! same records give the same count on every replica, whatever the history that built them
//! (writes in another order, a table grown and shrunk). It counts, per record, its slot in the
//! vector ([`RECORD_BYTES`]: metadata and the pointer to its bytes), its share of the hash table
//! ([`INDEX_BYTES`]), the heap block holding its key and value ([`heap_block_bytes`]), and for an
//! entry that expires, its place in the expiry order ([`EXPIRY_BYTES`]). The vector's and the
//! table's spare capacity after a growth is not counted: it is history, not data, and at most
//! doubles the slots.

use std::collections::BTreeSet;
use std::hash::BuildHasher;

use foldhash::quality::FixedState;
use hashbrown::HashTable;

use crate::columns::{NUMBER_BYTES, Packed};

/// One entry: its key and value in one heap block (key first), and its metadata. Times are the
/// core's `now_ms` at the call; `expire_at_ms` 0 means never.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    data: Box<[u8]>,
    key_len: u32,
    /// Reads that found the entry (saturates at u32::MAX).
    pub hits: u32,
    /// 1 when the key was first written while no record of it was held; one more at every
    /// write since, so it changes on every write (compare-and-set compares it).
    pub version: u64,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub accessed_ms: u64,
    pub expire_at_ms: u64,
}

impl Record {
    fn new(key: &[u8], value: &[u8], version: u64, now_ms: u64, expire_at_ms: u64) -> Self {
        Record {
            data: joined(key, value),
            key_len: u32::try_from(key.len()).expect("a key is at most MAX_KEY_BYTES"),
            hits: 0,
            version,
            created_ms: now_ms,
            updated_ms: now_ms,
            accessed_ms: now_ms,
            expire_at_ms,
        }
    }

    pub fn key(&self) -> &[u8] {
        &self.data[..self.key_len as usize]
    }

    pub fn value(&self) -> &[u8] {
        &self.data[self.key_len as usize..]
    }

    /// Whether the entry has not expired at `now_ms`: it expires at `expire_at_ms` itself.
    pub fn is_live(&self, now_ms: u64) -> bool {
        self.expire_at_ms == 0 || now_ms < self.expire_at_ms
    }

    /// The metadata, in [`METADATA_FIELDS`] order.
    pub fn metadata(&self) -> [u64; METADATA_FIELDS.len()] {
        [
            self.created_ms,
            self.updated_ms,
            self.accessed_ms,
            self.expire_at_ms,
            u64::from(self.hits),
            self.version,
        ]
    }
}

/// The names of an entry's metadata numbers, in the order `metadata` packs them.
pub const METADATA_FIELDS: [&str; 6] = [
    "created_ms",
    "updated_ms",
    "accessed_ms",
    "expire_at_ms",
    "hits",
    "version",
];

/// Bytes of one packed entry's metadata.
pub const METADATA_BYTES: usize = METADATA_FIELDS.len() * NUMBER_BYTES;

fn joined(key: &[u8], value: &[u8]) -> Box<[u8]> {
    let mut data = Vec::with_capacity(key.len() + value.len());
    data.extend_from_slice(key);
    data.extend_from_slice(value);
    data.into_boxed_slice()
}

/// A record's slot in the vector: its metadata and the pointer to its bytes.
pub const RECORD_BYTES: u64 = std::mem::size_of::<Record>() as u64;
/// A record's share of the hash table: a 4-byte position and a control byte per bucket, with the
/// buckets 5/8 full (between the 7/16 just after the table doubles and the 7/8 that makes it).
pub const INDEX_BYTES: u64 = 8;
/// An expiring entry's place in the expiry order: a 16-byte (time, position) pair in a B-tree
/// whose nodes of 11 pairs are about two thirds full, with the nodes' own fields.
pub const EXPIRY_BYTES: u64 = 32;

/// The heap block `malloc` hands out for `bytes` bytes, as glibc's allocator sizes it: the bytes
/// and an 8-byte header, rounded up to 16, at least 32; nothing for no bytes (an empty key and
/// value allocate nothing).
pub fn heap_block_bytes(bytes: usize) -> u64 {
    if bytes == 0 {
        return 0;
    }
    (((bytes as u64) + 8 + 15) & !15).max(32)
}

/// What a write did to the entry of its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// No live entry was there (none held, or one that had expired, now replaced).
    Created,
    /// A live entry was there and its value was replaced.
    Replaced,
}

/// One map's records.
#[derive(Debug, Clone)]
pub struct MapTable {
    records: Vec<Record>,
    index: HashTable<u32>,
    /// (expire_at_ms, position) of every entry that expires, earliest first.
    expiry: BTreeSet<(u64, u32)>,
    hasher: FixedState,
    /// The sum of `heap_block_bytes` over the records' bytes.
    heap_bytes: u64,
    /// An entry not read or written for this long is expired too (0: never): the map's
    /// max_idle, judged on this replica's access times.
    max_idle_ms: u64,
}

impl MapTable {
    pub fn new(hash_seed: u64) -> Self {
        Self::with_max_idle(hash_seed, 0)
    }

    /// A table whose entries also expire once not read or written for `max_idle_ms` (0: never).
    pub fn with_max_idle(hash_seed: u64, max_idle_ms: u64) -> Self {
        MapTable {
            records: Vec::new(),
            index: HashTable::new(),
            expiry: BTreeSet::new(),
            hasher: FixedState::with_seed(hash_seed),
            heap_bytes: 0,
            max_idle_ms,
        }
    }

    /// Whether `record` is live at `now_ms`: not past its expiry time, and read or written within
    /// the last `max_idle_ms` (it goes idle at `accessed_ms + max_idle_ms` itself).
    pub fn is_live(&self, record: &Record, now_ms: u64) -> bool {
        record.is_live(now_ms)
            && (self.max_idle_ms == 0 || now_ms < record.accessed_ms.saturating_add(self.max_idle_ms))
    }

    /// Count every record as accessed at `now_ms` (never earlier than it was): a copy that becomes
    /// its partition's owner's knows only each entry's last write, not the reads its old owner
    /// served, so it gives every entry a whole max idle from now rather than drop those reads kept.
    pub fn touch_all(&mut self, now_ms: u64) {
        for record in &mut self.records {
            record.accessed_ms = record.accessed_ms.max(now_ms);
        }
    }

    /// Keys of records among positions `offset..offset + max_scanned` that are no longer live
    /// at `now_ms` because they went idle or expired (at most `max_entries`), and the position
    /// after the last one looked at. Nothing when the table has no max idle: its expired
    /// entries are listed by `expired`. The work is bounded by `max_scanned`.
    pub fn idle(&self, now_ms: u64, offset: usize, max_scanned: usize, max_entries: usize) -> (Vec<&Record>, usize) {
        if self.max_idle_ms == 0 {
            return (Vec::new(), self.records.len());
        }
        let start = offset.min(self.records.len());
        let end = start.saturating_add(max_scanned).min(self.records.len());
        let mut found = Vec::new();
        let mut at = start;
        while at < end && found.len() < max_entries {
            if !self.is_live(&self.records[at], now_ms) {
                found.push(&self.records[at]);
            }
            at += 1;
        }
        (found, at)
    }

    /// Make room for `additional` more records at once, so that taking them grows neither the
    /// vector nor the index again: a table that doubles its way up rehashes every key it holds
    /// each time, reading each record's key from its heap block, which cost a migration's
    /// destination about a third of the time it spent loading (see `RecordStore::reserve`). The room
    /// not yet filled is not counted (see the module's documentation): [`MapTable::fit`] gives
    /// back what was not filled. False, and no room kept, when the allocator cannot give it.
    pub fn reserve(&mut self, additional: usize) -> bool {
        let capacity = self.records.capacity();
        if self.records.try_reserve_exact(additional).is_err() {
            return false;
        }
        let (records, hasher) = (&self.records, &self.hasher);
        if self
            .index
            .try_reserve(additional, |&at| hasher.hash_one(records[at as usize].key()))
            .is_err()
        {
            self.records.shrink_to(capacity);
            return false;
        }
        true
    }

    /// Give back room the vector and the index hold beyond what the records need (room made
    /// ahead by `reserve` and not filled).
    pub fn fit(&mut self) {
        self.records.shrink_to_fit();
        let (records, hasher) = (&self.records, &self.hasher);
        self.index
            .shrink_to_fit(|&at| hasher.hash_one(records[at as usize].key()));
    }

    /// Records held, expired ones not yet removed included (they take memory until removed).
    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The bytes the records take (the module's documentation says how they are counted).
    pub fn memory_bytes(&self) -> u64 {
        self.records.len() as u64 * (RECORD_BYTES + INDEX_BYTES)
            + self.heap_bytes
            + self.expiry.len() as u64 * EXPIRY_BYTES
    }

    /// What one record adds to [`MapTable::memory_bytes`].
    pub fn record_memory_bytes(&self, record: &Record) -> u64 {
        let expiry = if record.expire_at_ms != 0 { EXPIRY_BYTES } else { 0 };
        RECORD_BYTES + INDEX_BYTES + heap_block_bytes(record.data.len()) + expiry
    }

    /// The records in iteration order.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The position of `key`'s record, expired or not.
    pub fn position(&self, key: &[u8]) -> Option<usize> {
        self.find(self.hash(key), key)
    }

    fn find(&self, hash: u64, key: &[u8]) -> Option<usize> {
        let records = &self.records;
        self.index
            .find(hash, |&at| records[at as usize].key() == key)
            .map(|&at| at as usize)
    }

    /// `key`'s record if it is held and live at `now_ms`.
    pub fn live(&self, key: &[u8], now_ms: u64) -> Option<&Record> {
        let record = &self.records[self.position(key)?];
        self.is_live(record, now_ms).then_some(record)
    }

    /// Read `key` at `now_ms`: a live entry counts a hit, is marked accessed at `now_ms`, and its
    /// value is appended to `out`. Whether it was found.
    pub fn read(&mut self, key: &[u8], now_ms: u64, out: &mut Packed) -> bool {
        self.read_within(key, now_ms, out, u64::MAX).unwrap_or(false)
    }

    /// `read`, unless the value would take `out`'s bytes past `max_bytes`: then nothing is read
    /// (no hit) and the answer is None. One lookup of the key for both.
    pub fn read_within(&mut self, key: &[u8], now_ms: u64, out: &mut Packed, max_bytes: u64) -> Option<bool> {
        let Some(at) = self.position(key) else {
            return Some(false);
        };
        if !self.is_live(&self.records[at], now_ms) {
            return Some(false);
        }
        let record = &mut self.records[at];
        if (out.data.len() + record.value().len()) as u64 > max_bytes {
            return None;
        }
        record.hits = record.hits.saturating_add(1);
        record.accessed_ms = now_ms;
        out.push(record.value());
        Some(true)
    }

    /// Set `key` to `value` at `now_ms`, expiring at `expire_at_ms` (0: never). Replacing a live
    /// entry keeps its creation time and hits; replacing an expired one starts a new entry (it
    /// was not there for any reader). Either way the version is one more than the held record's,
    /// so it changes on every write.
    pub fn write(&mut self, key: &[u8], value: &[u8], now_ms: u64, expire_at_ms: u64) -> Written {
        self.write_seeing(key, value, now_ms, expire_at_ms, |_| ())
    }

    /// `write`, first showing `previous` the live value it replaces (None: none), with one
    /// lookup of the key for both.
    pub fn write_seeing(
        &mut self,
        key: &[u8],
        value: &[u8],
        now_ms: u64,
        expire_at_ms: u64,
        previous: impl FnOnce(Option<&[u8]>),
    ) -> Written {
        let hash = self.hash(key);
        let Some(at) = self.find(hash, key) else {
            previous(None);
            self.insert(hash, Record::new(key, value, 1, now_ms, expire_at_ms));
            return Written::Created;
        };
        let live = self.is_live(&self.records[at], now_ms);
        let record = &mut self.records[at];
        previous(live.then(|| record.value()));
        let old_blocks = heap_block_bytes(record.data.len());
        let old_expiry = record.expire_at_ms;
        let key_len = record.key_len as usize;
        if record.data.len() == key_len + value.len() {
            record.data[key_len..].copy_from_slice(value); // the same size: the block is reused
        } else {
            record.data = joined(key, value);
        }
        if !live {
            record.created_ms = now_ms;
            record.hits = 0;
        }
        // Never 0 (a version is from 1), and different from the last, even past u64::MAX.
        record.version = record.version.wrapping_add(1).max(1);
        // Members' clocks differ: a write by an owner whose clock is behind the one that created
        // the entry is taken as made when it was created, never before (a record is updated no
        // earlier than created, what every transfer checks).
        record.updated_ms = now_ms.max(record.created_ms);
        record.accessed_ms = now_ms;
        record.expire_at_ms = expire_at_ms;
        self.heap_bytes = self.heap_bytes - old_blocks + heap_block_bytes(record.data.len());
        if old_expiry != expire_at_ms {
            let position = at as u32;
            if old_expiry != 0 {
                self.expiry.remove(&(old_expiry, position));
            }
            if expire_at_ms != 0 {
                self.expiry.insert((expire_at_ms, position));
            }
        }
        if live { Written::Replaced } else { Written::Created }
    }

    /// Set `key`'s record to exactly `value` and `metadata` (in [`METADATA_FIELDS`] order), as a
    /// copy of another replica's record: a transfer or a snapshot restores records this way, so
    /// the copy's times, hits and version are the source's, not this call's.
    pub fn restore(&mut self, key: &[u8], value: &[u8], metadata: [u64; METADATA_FIELDS.len()]) {
        let [created_ms, updated_ms, accessed_ms, expire_at_ms, hits, version] = metadata;
        let mut record = Record::new(key, value, version, created_ms, expire_at_ms);
        record.updated_ms = updated_ms;
        record.accessed_ms = accessed_ms;
        record.hits = u32::try_from(hits).unwrap_or(u32::MAX);
        let hash = self.hash(key);
        if let Some(at) = self.find(hash, key) {
            // Replaced in place: its position (and so the order) stays.
            let held = &mut self.records[at];
            let (old_blocks, old_expiry) = (heap_block_bytes(held.data.len()), held.expire_at_ms);
            *held = record;
            self.heap_bytes = self.heap_bytes - old_blocks + heap_block_bytes(self.records[at].data.len());
            let position = at as u32;
            if old_expiry != 0 {
                self.expiry.remove(&(old_expiry, position));
            }
            if expire_at_ms != 0 {
                self.expiry.insert((expire_at_ms, position));
            }
            return;
        }
        self.insert(hash, record);
    }

    fn insert(&mut self, hash: u64, record: Record) {
        let position = u32::try_from(self.records.len()).expect("a map holds fewer than 2**32 records");
        self.heap_bytes += heap_block_bytes(record.data.len());
        if record.expire_at_ms != 0 {
            self.expiry.insert((record.expire_at_ms, position));
        }
        self.records.push(record);
        let (records, hasher) = (&self.records, &self.hasher);
        self.index
            .insert_unique(hash, position, |&at| hasher.hash_one(records[at as usize].key()));
    }

    /// Remove `key`'s record, expired or not; the removed record.
    pub fn remove(&mut self, key: &[u8]) -> Option<Record> {
        let at = self.position(key)?;
        Some(self.remove_at(at))
    }

    fn remove_at(&mut self, at: usize) -> Record {
        let hash = self.hash(self.records[at].key());
        let position = at as u32;
        self.index
            .find_entry(hash, |&p| p == position)
            .expect("a held record is in the index")
            .remove();
        let last = self.records.len() - 1;
        let removed = self.records.swap_remove(at);
        self.heap_bytes -= heap_block_bytes(removed.data.len());
        if removed.expire_at_ms != 0 {
            self.expiry.remove(&(removed.expire_at_ms, position));
        }
        if at != last {
            // The last record moved into the hole: its index entry and expiry place follow it.
            let moved = &self.records[at];
            let moved_hash = self.hash(moved.key());
            let from = last as u32;
            *self
                .index
                .find_mut(moved_hash, |&p| p == from)
                .expect("the moved record is in the index") = position;
            if moved.expire_at_ms != 0 {
                self.expiry.remove(&(moved.expire_at_ms, from));
                self.expiry.insert((moved.expire_at_ms, position));
            }
        }
        self.shrink_when_sparse();
        removed
    }

    /// Give memory back once a quarter or less of the vector is used, keeping room to grow back
    /// to half (so a map that shrinks and grows around one size does not reallocate each time).
    fn shrink_when_sparse(&mut self) {
        const MIN_CAPACITY: usize = 64;
        let len = self.records.len();
        if self.records.capacity() > MIN_CAPACITY && len <= self.records.capacity() / 4 {
            let keep = (len * 2).max(MIN_CAPACITY);
            self.records.shrink_to(keep);
            let (records, hasher) = (&self.records, &self.hasher);
            self.index
                .shrink_to(keep, |&at| hasher.hash_one(records[at as usize].key()));
        }
    }

    /// Up to `max_entries` records that have expired at `now_ms`, earliest expiry first (ties in
    /// position order); the work is bounded by `max_entries`, whatever the map's size.
    pub fn expired(&self, now_ms: u64, max_entries: usize) -> impl Iterator<Item = &Record> {
        self.expiry
            .range(..=(now_ms, u32::MAX))
            .take(max_entries)
            .map(|&(_, at)| &self.records[at as usize])
    }

    /// Check the table's own bookkeeping against its records (for tests): every record found by
    /// its key at its position, the expiry order exactly the expiring records, the byte count
    /// the sum of their blocks.
    pub fn check(&self) {
        assert_eq!(
            self.index.len(),
            self.records.len(),
            "index and records differ in count"
        );
        let mut expiring = BTreeSet::new();
        let mut heap_bytes = 0;
        for (at, record) in self.records.iter().enumerate() {
            assert_eq!(
                self.position(record.key()),
                Some(at),
                "record {at} not found at its position"
            );
            if record.expire_at_ms != 0 {
                expiring.insert((record.expire_at_ms, at as u32));
            }
            heap_bytes += heap_block_bytes(record.data.len());
        }
        assert_eq!(expiring, self.expiry, "the expiry order differs from the records");
        assert_eq!(heap_bytes, self.heap_bytes, "the byte count differs from the records");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys_of(table: &MapTable) -> Vec<Vec<u8>> {
        table.records().iter().map(|r| r.key().to_vec()).collect()
    }

    #[test]
    fn room_made_ahead_and_not_filled_is_given_back_and_a_read_within_a_bound_reads_nothing_past_it() {
        let mut table = MapTable::new(3);
        for key in [b"a", b"b", b"c"] {
            table.write(key, b"vv", 1, 0);
        }
        let memory = table.memory_bytes();
        assert!(table.reserve(100_000));
        assert!(table.records.capacity() >= 100_003 && table.index.capacity() >= 100_003);
        assert_eq!(table.memory_bytes(), memory, "room not filled is not counted");
        table.fit();
        assert!(table.records.capacity() < 64 && table.index.capacity() < 64);
        assert_eq!(keys_of(&table), [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
        table.check();
        let mut out = Packed::default();
        assert_eq!(table.read_within(b"a", 2, &mut out, 3), Some(true));
        assert_eq!(table.read_within(b"b", 2, &mut out, 3), None); // 2 + 2 bytes: past 3
        assert_eq!(table.read_within(b"x", 2, &mut out, 3), Some(false));
        assert_eq!(
            (table.live(b"a", 2).unwrap().hits, table.live(b"b", 2).unwrap().hits),
            (1, 0)
        );
    }

    #[test]
    fn records_iterate_in_insertion_order_and_a_removal_moves_the_last_into_its_place() {
        let mut table = MapTable::new(7);
        for key in [b"a", b"b", b"c", b"d"] {
            table.write(key, b"v", 1, 0);
        }
        assert_eq!(keys_of(&table), [b"a", b"b", b"c", b"d"]);
        table.remove(b"b").unwrap();
        assert_eq!(keys_of(&table), [b"a", b"d", b"c"]);
        table.remove(b"c").unwrap();
        assert_eq!(keys_of(&table), [b"a", b"d"]);
        table.check();
    }

    #[test]
    fn the_order_does_not_depend_on_the_hash_seed() {
        let mut one = MapTable::new(1);
        let mut other = MapTable::new(u64::MAX);
        for table in [&mut one, &mut other] {
            for n in 0..500u32 {
                table.write(&n.to_le_bytes(), b"v", 1, 0);
            }
            for n in (0..500u32).step_by(3) {
                table.remove(&n.to_le_bytes());
            }
        }
        assert_eq!(keys_of(&one), keys_of(&other));
        assert_eq!(one.memory_bytes(), other.memory_bytes());
    }

    #[test]
    fn a_write_counts_versions_and_keeps_creation_and_hits_of_a_live_entry() {
        let mut table = MapTable::new(0);
        assert_eq!(table.write(b"k", b"one", 10, 0), Written::Created);
        let mut out = Packed::default();
        assert!(table.read(b"k", 11, &mut out));
        assert_eq!(table.write(b"k", b"two", 12, 0), Written::Replaced);
        let record = table.live(b"k", 12).unwrap();
        assert_eq!(record.value(), b"two");
        assert_eq!(record.metadata(), [10, 12, 12, 0, 1, 2]);
    }

    #[test]
    fn an_entry_expires_at_its_time_and_a_write_over_it_starts_a_new_entry() {
        let mut table = MapTable::new(0);
        table.write(b"k", b"v", 100, 150);
        assert!(table.live(b"k", 149).is_some());
        assert!(table.live(b"k", 150).is_none());
        let mut out = Packed::default();
        assert!(!table.read(b"k", 150, &mut out));
        assert!(out.is_empty());
        assert_eq!(table.len(), 1, "expired entries are hidden, not removed");
        assert_eq!(table.write(b"k", b"w", 200, 0), Written::Created);
        let record = table.live(b"k", 200).unwrap();
        assert_eq!(record.metadata(), [200, 200, 200, 0, 0, 2]);
        table.check();
    }

    #[test]
    fn expired_lists_earliest_first_within_its_bound() {
        let mut table = MapTable::new(0);
        table.write(b"late", b"v", 0, 300);
        table.write(b"never", b"v", 0, 0);
        table.write(b"early", b"v", 0, 100);
        table.write(b"mid", b"v", 0, 200);
        let keys = |now, max| -> Vec<Vec<u8>> { table.expired(now, max).map(|r| r.key().to_vec()).collect() };
        assert_eq!(keys(99, 10), Vec::<Vec<u8>>::new());
        assert_eq!(keys(200, 10), [b"early".to_vec(), b"mid".to_vec()]);
        assert_eq!(keys(1_000, 2), [b"early".to_vec(), b"mid".to_vec()]);
        assert_eq!(keys(1_000, 10).len(), 3);
    }

    #[test]
    fn the_expiry_order_follows_records_moved_by_removals_and_rewrites() {
        let mut table = MapTable::new(3);
        for n in 0..100u64 {
            table.write(&n.to_le_bytes(), b"v", 0, if n % 2 == 0 { 1_000 + n } else { 0 });
        }
        for n in (0..100u64).step_by(7) {
            table.remove(&n.to_le_bytes());
            table.check();
        }
        for n in (0..100u64).step_by(5) {
            table.write(&n.to_le_bytes(), b"longer value", 1, if n % 3 == 0 { 0 } else { 5 });
            table.check();
        }
    }

    #[test]
    fn an_entry_not_read_or_written_for_max_idle_is_expired_and_a_write_over_it_starts_anew() {
        let mut table = MapTable::with_max_idle(0, 100);
        table.write(b"read", b"v", 0, 0);
        table.write(b"left", b"v", 0, 0);
        let mut out = Packed::default();
        assert!(table.read(b"read", 90, &mut out)); // a read keeps it live 100 ms more
        assert!(table.live(b"read", 150).is_some());
        assert!(table.live(b"left", 99).is_some());
        assert!(table.live(b"left", 100).is_none(), "idle at accessed + max_idle itself");
        assert!(!table.read(b"left", 100, &mut out));
        let (idle, next) = table.idle(150, 0, 10, 10);
        assert_eq!(idle.iter().map(|r| r.key()).collect::<Vec<_>>(), [b"left"]);
        assert_eq!(next, 2);
        assert_eq!(table.write(b"left", b"w", 150, 0), Written::Created);
        assert_eq!(table.live(b"left", 150).unwrap().metadata()[0], 150);
        assert!(MapTable::new(0).idle(1_000, 0, 10, 10).0.is_empty());
        table.touch_all(1_000);
        assert!(table.live(b"read", 1_099).is_some(), "a touch counts as an access");
        table.touch_all(10);
        assert!(table.live(b"read", 1_099).is_some(), "and never moves one back");
    }

    #[test]
    fn memory_is_counted_per_record_and_returns_to_zero() {
        let mut table = MapTable::new(0);
        assert_eq!(table.memory_bytes(), 0);
        table.write(&[1u8; 10], &[2u8; 100], 0, 0);
        // 10 + 100 bytes + 8 of header, rounded up to 16: 128.
        assert_eq!(heap_block_bytes(110), 128);
        assert_eq!(table.memory_bytes(), RECORD_BYTES + INDEX_BYTES + 128);
        table.write(&[1u8; 10], &[2u8; 100], 0, 5);
        assert_eq!(table.memory_bytes(), RECORD_BYTES + INDEX_BYTES + 128 + EXPIRY_BYTES);
        table.write(b"", b"", 0, 0);
        assert_eq!(
            table.memory_bytes(),
            2 * (RECORD_BYTES + INDEX_BYTES) + 128 + EXPIRY_BYTES
        );
        table.remove(&[1u8; 10]);
        table.remove(b"");
        assert_eq!(table.memory_bytes(), 0);
    }

    #[test]
    fn a_record_slot_is_64_bytes() {
        assert_eq!(RECORD_BYTES, 64);
        assert_eq!(heap_block_bytes(1), 32);
        assert_eq!(heap_block_bytes(24), 32);
        assert_eq!(heap_block_bytes(25), 48);
    }

    #[test]
    fn a_table_shrinks_after_most_of_it_is_removed_and_stays_whole() {
        let mut table = MapTable::new(9);
        for n in 0..10_000u32 {
            table.write(&n.to_le_bytes(), b"v", 0, u64::from(n % 4));
        }
        let grown = table.records.capacity();
        for n in 0..9_990u32 {
            table.remove(&n.to_le_bytes()).unwrap();
        }
        assert!(table.records.capacity() < grown / 8);
        table.check();
        for n in 9_990..10_000u32 {
            assert!(table.live(&n.to_le_bytes(), 0).is_some());
        }
    }
}
