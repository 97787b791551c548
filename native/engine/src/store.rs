//! A partition replica's maps, and the batch calls the core makes on them: one call per batch of
//! entries, never one per entry, with keys and values as packed columns.
//!
//! Every call checks all of its input first (the map's name, `now_ms`, every column, every TTL)
//! and only then changes anything, so a call that fails changed nothing, and one that passed its
//! checks cannot fail half way. Within a batch the entries apply in order, as that many single
//! calls would: a key written twice holds its second value, and the second write's previous
//! value is the first's.

use foldhash::quality::FixedState;
use indexmap::IndexMap;

use crate::columns::{Checked, Column, LENGTH_BYTES, Packed, invalid, parse_numbers};
use crate::eviction::{self, Policy};
use crate::limits::{
    MAX_COUNTER, MAX_ENTRIES_PER_CHUNK, MAX_EVICTION_SAMPLES, MAX_KEY_BYTES, MAX_MAP_NAME_CHARS,
    MAX_OPERATIONS_PER_REQUEST, MAX_VALUE_BYTES,
};
use crate::table::{METADATA_BYTES, METADATA_FIELDS, MapTable, Record, heap_block_bytes};

/// What a map costs beyond its records: its table's fixed fields and its slot among the maps
/// (the name's own heap block is added to it).
pub const MAP_BYTES: u64 = std::mem::size_of::<MapTable>() as u64 + 64;

/// The answer of a call that reads or replaces values: per key of the call, in order, whether a
/// live entry was there (`present`, one byte each, 1 or 0) and, when asked for, its value
/// (`values`: an absent entry's place is an empty item).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Found {
    pub values: Packed,
    pub present: Vec<u8>,
}

/// A page of a scan: the live entries among the positions `offset..next_offset`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Page {
    pub keys: Packed,
    pub values: Packed,
    pub next_offset: u64,
}

/// A page of a dump: records with their metadata (`METADATA_FIELDS` numbers per record).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Dump {
    pub keys: Packed,
    pub values: Packed,
    pub metadata: Vec<u8>,
    pub next_offset: u64,
}

/// What [`RecordStore::dump`] counts per record beyond its key and value: their two lengths and
/// its metadata numbers.
pub const DUMP_RECORD_BYTES: u64 = (2 * LENGTH_BYTES + METADATA_BYTES) as u64;

/// How long the entries of a write live.
#[derive(Debug, Clone, Copy)]
pub enum Ttl<'a> {
    /// Every entry the same number of milliseconds (0: they never expire).
    Each(u64),
    /// One number per entry, packed as unsigned 64-bit little-endian numbers (0: never).
    PerEntry(&'a [u8]),
}

/// One partition replica's maps, by name.
#[derive(Debug, Clone)]
pub struct RecordStore {
    /// Maps holding at least one record, in the order they were first written; a map emptied is
    /// dropped (so its name's memory goes too).
    maps: IndexMap<Box<str>, MapTable, FixedState>,
    hash_seed: u64,
    /// Every map's max idle (0: none): see [`MapTable::with_max_idle`].
    max_idle_ms: u64,
}

impl RecordStore {
    /// An empty store whose hash tables are keyed by `hash_seed`. The seed comes from the
    /// caller (the core's seeded generator): a client that does not know it cannot choose keys
    /// that collide, and nothing observable depends on it (order and memory count do not).
    pub fn new(hash_seed: u64) -> Self {
        Self::with_max_idle(hash_seed, 0)
    }

    /// An empty store whose entries also expire once not read or written for `max_idle_ms` (0:
    /// never), judged on this replica's access times: reads reach only the owner, so it alone
    /// knows them (a backup knows each entry's last write).
    pub fn with_max_idle(hash_seed: u64, max_idle_ms: u64) -> Self {
        RecordStore {
            maps: IndexMap::with_hasher(FixedState::with_seed(hash_seed)),
            hash_seed,
            max_idle_ms,
        }
    }

    /// Count every record of the map as accessed at `now_ms` (see [`MapTable::touch_all`]).
    pub fn touch(&mut self, map_name: &str, now_ms: u64) -> Checked<()> {
        check_map_name(map_name)?;
        check_time("now_ms", now_ms)?;
        if let Some(table) = self.maps.get_mut(map_name) {
            table.touch_all(now_ms);
        }
        Ok(())
    }

    /// Keys of records from position `offset` on that went idle (or expired) at `now_ms`, looking
    /// at `max_scanned` records at most and listing `max_entries` at most, and the position to
    /// look on from (past the end: the pass is over). As with `expired`, nothing is removed.
    pub fn idle(
        &self,
        map_name: &str,
        now_ms: u64,
        offset: u64,
        max_scanned: u64,
        max_entries: u64,
    ) -> Checked<(Packed, u64)> {
        check_map_name(map_name)?;
        check_time("now_ms", now_ms)?;
        check_bounded("offset", offset, MAX_COUNTER)?;
        check_bounded("max_scanned", max_scanned, MAX_ENTRIES_PER_CHUNK as u64)?;
        check_bounded("max_entries", max_entries, MAX_OPERATIONS_PER_REQUEST as u64)?;
        let mut keys = Packed::default();
        let Some(table) = self.maps.get(map_name) else {
            return Ok((keys, offset));
        };
        let (found, next) = table.idle(now_ms, offset as usize, max_scanned as usize, max_entries as usize);
        for record in found {
            keys.push(record.key());
        }
        Ok((keys, next as u64))
    }

    /// Set each key to its value at `now_ms`, each entry living `ttl`. The answer says which keys
    /// held a live entry, with its value when `return_previous`.
    #[allow(clippy::too_many_arguments)]
    pub fn put(
        &mut self,
        map_name: &str,
        keys: &[u8],
        key_lengths: &[u8],
        values: &[u8],
        value_lengths: &[u8],
        now_ms: u64,
        ttl: Ttl<'_>,
        return_previous: bool,
    ) -> Checked<Found> {
        let (keys, values, expire_at) = check_write(map_name, keys, key_lengths, values, value_lengths, now_ms, ttl)?;
        let mut found = Found::with_capacity(keys.len(), return_previous);
        if keys.is_empty() {
            return Ok(found);
        }
        let table = self.table_for_writing(map_name);
        for ((key, value), expire_at_ms) in keys.iter().zip(values.iter()).zip(expire_at) {
            table.write_seeing(key, value, now_ms, expire_at_ms, |previous| {
                found.record(previous, return_previous)
            });
        }
        Ok(found)
    }

    /// Set each key that holds no live entry at `now_ms` to its value; leave the others as they
    /// are (no hit, no access). The answer's `present` says which keys were left, with their
    /// value when `return_previous`.
    #[allow(clippy::too_many_arguments)]
    pub fn put_if_absent(
        &mut self,
        map_name: &str,
        keys: &[u8],
        key_lengths: &[u8],
        values: &[u8],
        value_lengths: &[u8],
        now_ms: u64,
        ttl: Ttl<'_>,
        return_previous: bool,
    ) -> Checked<Found> {
        let (keys, values, expire_at) = check_write(map_name, keys, key_lengths, values, value_lengths, now_ms, ttl)?;
        let mut found = Found::with_capacity(keys.len(), return_previous);
        if keys.is_empty() {
            return Ok(found);
        }
        let table = self.table_for_writing(map_name);
        for ((key, value), expire_at_ms) in keys.iter().zip(values.iter()).zip(expire_at) {
            let live = table.live(key, now_ms);
            let present = live.is_some();
            found.record(live.map(|r| r.value()), return_previous);
            if !present {
                table.write(key, value, now_ms, expire_at_ms);
            }
        }
        Ok(found)
    }

    /// The live values of the keys at `now_ms`. A read counts a hit and marks the entry accessed
    /// at `now_ms`; an expired entry is never returned. With `max_bytes`, the answer stops before
    /// the first value that would take its values past it: it then covers only the first keys
    /// (fewer presence bytes than keys), and the others are not read (no hit).
    pub fn get(
        &mut self,
        map_name: &str,
        keys: &[u8],
        key_lengths: &[u8],
        now_ms: u64,
        max_bytes: Option<u64>,
    ) -> Checked<Found> {
        check_map_name(map_name)?;
        check_time("now_ms", now_ms)?;
        if let Some(bound) = max_bytes {
            check_bounded("max_bytes", bound, MAX_COUNTER)?;
        }
        let keys = Column::parse("keys", keys, key_lengths, MAX_OPERATIONS_PER_REQUEST, MAX_KEY_BYTES)?;
        let mut found = Found::with_capacity(keys.len(), true);
        self.read_keys(map_name, keys.iter(), now_ms, max_bytes, &mut found);
        Ok(found)
    }

    /// `get` of keys given one by one (each at most `MAX_KEY_BYTES`: from a checked column; the
    /// caller checked the map's name, `now_ms` and `max_bytes`), appended to `found`, whose
    /// values count against `max_bytes` (so one bound can cover the reads of several stores).
    /// Whether every key was answered (false: the bound stopped it).
    pub fn read_keys<'k>(
        &mut self,
        map_name: &str,
        keys: impl ExactSizeIterator<Item = &'k [u8]>,
        now_ms: u64,
        max_bytes: Option<u64>,
        found: &mut Found,
    ) -> bool {
        let Some(table) = self.maps.get_mut(map_name) else {
            found.absent(keys.len(), true);
            return true;
        };
        let bound = max_bytes.unwrap_or(u64::MAX);
        for key in keys {
            let Some(present) = table.read_within(key, now_ms, &mut found.values, bound) else {
                return false;
            };
            if !present {
                found.values.push_empty();
            }
            found.present.push(u8::from(present));
        }
        true
    }

    /// The live values of the keys at `now_ms`, as `get` finds them, without counting a read (a
    /// conditional write compares the value it would replace; that is not a read).
    pub fn peek(&self, map_name: &str, keys: &[u8], key_lengths: &[u8], now_ms: u64) -> Checked<Found> {
        check_map_name(map_name)?;
        check_time("now_ms", now_ms)?;
        let keys = Column::parse("keys", keys, key_lengths, MAX_OPERATIONS_PER_REQUEST, MAX_KEY_BYTES)?;
        let mut found = Found::with_capacity(keys.len(), true);
        let table = self.maps.get(map_name);
        for key in keys.iter() {
            found.record(table.and_then(|t| t.live(key, now_ms)).map(Record::value), true);
        }
        Ok(found)
    }

    /// Remove the keys' entries, expired or not (an expired entry is removed too, and reported
    /// absent: no reader could see it). The answer says which keys held a live entry, with its
    /// value when `return_previous`.
    pub fn remove(
        &mut self,
        map_name: &str,
        keys: &[u8],
        key_lengths: &[u8],
        now_ms: u64,
        return_previous: bool,
    ) -> Checked<Found> {
        check_map_name(map_name)?;
        check_time("now_ms", now_ms)?;
        let keys = Column::parse("keys", keys, key_lengths, MAX_OPERATIONS_PER_REQUEST, MAX_KEY_BYTES)?;
        let mut found = Found::with_capacity(keys.len(), return_previous);
        let Some(table) = self.maps.get_mut(map_name) else {
            found.absent(keys.len(), return_previous);
            return Ok(found);
        };
        for key in keys.iter() {
            let was_live = table.live(key, now_ms).is_some();
            let removed = table.remove(key);
            let live = removed.as_ref().filter(|_| was_live);
            found.record(live.map(|r| r.value()), return_previous);
        }
        self.drop_if_empty(map_name);
        Ok(found)
    }

    /// The metadata of the keys' live entries at `now_ms`, without counting a read: per key,
    /// `METADATA_FIELDS` as unsigned 64-bit little-endian numbers (zeros for an absent key), and
    /// the presence mask.
    pub fn metadata(
        &self,
        map_name: &str,
        keys: &[u8],
        key_lengths: &[u8],
        now_ms: u64,
    ) -> Checked<(Vec<u8>, Vec<u8>)> {
        check_map_name(map_name)?;
        check_time("now_ms", now_ms)?;
        let keys = Column::parse("keys", keys, key_lengths, MAX_OPERATIONS_PER_REQUEST, MAX_KEY_BYTES)?;
        let mut numbers = Vec::with_capacity(keys.len() * METADATA_BYTES);
        let mut present = Vec::with_capacity(keys.len());
        let table = self.maps.get(map_name);
        for key in keys.iter() {
            match table.and_then(|t| t.live(key, now_ms)) {
                Some(record) => {
                    numbers.extend(record.metadata().iter().flat_map(|n| n.to_le_bytes()));
                    present.push(1);
                }
                None => {
                    numbers.extend_from_slice(&[0; METADATA_BYTES]);
                    present.push(0);
                }
            }
        }
        Ok((numbers, present))
    }

    /// The live entries at `now_ms` among the map's records at positions `offset` to
    /// `offset + max_entries`, in iteration order, and the position after them. An expired entry
    /// is left out, so a page may hold fewer than `max_entries` with more to come: the scan is
    /// done when `next_offset` reaches `entry_count`. Pages fit together while the map takes no
    /// write between them (the core's map version says when it did). The live entries' bytes
    /// (keys, and values unless `keys_only`) stay within `max_bytes`, except a first entry alone.
    #[allow(clippy::too_many_arguments)]
    pub fn scan(
        &self,
        map_name: &str,
        offset: u64,
        max_entries: u64,
        now_ms: u64,
        keys_only: bool,
        max_bytes: u64,
    ) -> Checked<Page> {
        check_map_name(map_name)?;
        check_time("now_ms", now_ms)?;
        check_bounded("offset", offset, MAX_COUNTER)?;
        check_bounded("max_entries", max_entries, MAX_OPERATIONS_PER_REQUEST as u64)?;
        check_bounded("max_bytes", max_bytes, MAX_COUNTER)?;
        let Some(table) = self.maps.get(map_name) else {
            return Ok(Page::default());
        };
        let records = table.records();
        let start = (offset as usize).min(records.len());
        let end = start.saturating_add(max_entries as usize).min(records.len());
        let size = |r: &Record| r.key().len() as u64 + if keys_only { 0 } else { r.value().len() as u64 };
        // The positions the page covers: up to `end`, and no further than the bytes allow (the
        // first live entry always goes, however large).
        let (mut stop, mut used, mut count, mut key_bytes, mut value_bytes) = (start, 0u64, 0usize, 0usize, 0usize);
        for record in &records[start..end] {
            if table.is_live(record, now_ms) {
                if count > 0 && used + size(record) > max_bytes {
                    break;
                }
                used += size(record);
                count += 1;
                key_bytes += record.key().len();
                value_bytes += record.value().len();
            }
            stop += 1;
        }
        let mut page = Page {
            keys: Packed::with_capacity(count, key_bytes),
            values: Packed::with_capacity(
                if keys_only { 0 } else { count },
                if keys_only { 0 } else { value_bytes },
            ),
            next_offset: stop as u64,
        };
        for record in records[start..stop].iter().filter(|r| table.is_live(r, now_ms)) {
            page.keys.push(record.key());
            if !keys_only {
                page.values.push(record.value());
            }
        }
        Ok(page)
    }

    /// The keys of up to `max_entries` entries of the map that have expired at `now_ms`, earliest
    /// expiry first. The engine removes nothing here: the owner decides, and replicates the
    /// removal as any other (a `remove` of these keys). The work is bounded by `max_entries`.
    pub fn expired(&self, map_name: &str, now_ms: u64, max_entries: u64) -> Checked<Packed> {
        check_map_name(map_name)?;
        check_time("now_ms", now_ms)?;
        check_bounded("max_entries", max_entries, MAX_OPERATIONS_PER_REQUEST as u64)?;
        let mut keys = Packed::default();
        if let Some(table) = self.maps.get(map_name) {
            for record in table.expired(now_ms, max_entries as usize) {
                keys.push(record.key());
            }
        }
        Ok(keys)
    }

    /// The keys of entries the map should lose to get back under its size, by `policy` (see
    /// [`eviction`]): at least `min_entries` and at least `min_bytes` of its memory count (all of
    /// them, when it holds less), at most `MAX_OPERATIONS_PER_REQUEST`, each chosen among
    /// `samples` records drawn from `seed`. As with `expired`, the engine removes nothing: the
    /// owner replicates the removal.
    #[allow(clippy::too_many_arguments)]
    pub fn evictable(
        &self,
        map_name: &str,
        policy: &str,
        seed: u64,
        samples: u64,
        min_entries: u64,
        min_bytes: u64,
        now_ms: u64,
    ) -> Checked<Packed> {
        check_map_name(map_name)?;
        let policy = Policy::parse(policy)?;
        check_bounded("samples", samples, MAX_EVICTION_SAMPLES as u64)?;
        check_bounded("min_entries", min_entries, MAX_OPERATIONS_PER_REQUEST as u64)?;
        check_bounded("min_bytes", min_bytes, MAX_COUNTER)?;
        check_time("now_ms", now_ms)?;
        let mut keys = Packed::default();
        if let Some(table) = self.maps.get(map_name) {
            let chosen = eviction::candidates(
                table,
                policy,
                seed,
                samples as usize,
                min_entries as usize,
                min_bytes,
                MAX_OPERATIONS_PER_REQUEST,
                now_ms,
            );
            for at in chosen {
                keys.push(table.records()[at].key());
            }
        }
        Ok(keys)
    }

    /// The map's records at positions `offset` onwards, expired ones included, with their
    /// metadata, as another replica or a snapshot takes them ([`RecordStore::load`]): at most
    /// `max_entries`, and no more than `max_bytes` counted as [`DUMP_RECORD_BYTES`] per record
    /// plus its key and value (at least one record, however large). Pages fit together while
    /// the map takes no write between them.
    pub fn dump(&self, map_name: &str, offset: u64, max_entries: u64, max_bytes: u64) -> Checked<Dump> {
        check_map_name(map_name)?;
        check_bounded("offset", offset, MAX_COUNTER)?;
        check_bounded("max_entries", max_entries, MAX_ENTRIES_PER_CHUNK as u64)?;
        check_bounded("max_bytes", max_bytes, MAX_COUNTER)?;
        let Some(table) = self.maps.get(map_name) else {
            return Ok(Dump::default());
        };
        let records = table.records();
        let start = (offset as usize).min(records.len());
        let mut dump = Dump::default();
        let mut used: u64 = 0;
        let mut end = start;
        for record in records[start..].iter().take(max_entries as usize) {
            let size = DUMP_RECORD_BYTES + record.key().len() as u64 + record.value().len() as u64;
            if end > start && used + size > max_bytes {
                break;
            }
            used += size;
            end += 1;
            dump.keys.push(record.key());
            dump.values.push(record.value());
            dump.metadata
                .extend(record.metadata().iter().flat_map(|n| n.to_le_bytes()));
        }
        dump.next_offset = end as u64;
        Ok(dump)
    }

    /// Take records as [`RecordStore::dump`] gave them: each key set to its value and exactly
    /// its metadata (a held record of the key is replaced). Checked whole first
    /// ([`check_records`]).
    pub fn load(
        &mut self,
        map_name: &str,
        keys: &[u8],
        key_lengths: &[u8],
        values: &[u8],
        value_lengths: &[u8],
        metadata: &[u8],
    ) -> Checked<()> {
        check_map_name(map_name)?;
        let (keys, values, rows) = check_records(keys, key_lengths, values, value_lengths, metadata)?;
        if keys.is_empty() {
            return Ok(());
        }
        let table = self.table_for_writing(map_name);
        for ((key, value), row) in keys.iter().zip(values.iter()).zip(rows) {
            table.restore(key, value, row);
        }
        Ok(())
    }

    /// Make room in the map for `entries` more records, taken next (a transfer's destination is
    /// told how many its source sends): see [`MapTable::reserve`]. The caller bounds `entries` by
    /// the memory it may take; here it is bounded by what a map can hold (positions are 32-bit).
    /// A map that holds nothing is left as it is (a store keeps no empty map): load the first
    /// page, then make room for the rest.
    pub fn reserve(&mut self, map_name: &str, entries: u64) -> Checked<()> {
        check_map_name(map_name)?;
        let held = self.entry_count(map_name) as u64;
        check_bounded("entries", entries, u64::from(u32::MAX) - held)?;
        let Some(table) = self.maps.get_mut(map_name) else {
            return Ok(());
        };
        if entries > 0 && !table.reserve(entries as usize) {
            return invalid(format!("no memory for {entries} more records"));
        }
        Ok(())
    }

    /// Give back the room the map's table holds beyond what its records need (see
    /// [`MapTable::fit`]); nothing for a map that holds nothing.
    pub fn fit(&mut self, map_name: &str) -> Checked<()> {
        check_map_name(map_name)?;
        if let Some(table) = self.maps.get_mut(map_name) {
            table.fit();
        }
        Ok(())
    }

    /// Records the map holds, expired ones not yet removed included (they hold memory).
    pub fn entry_count(&self, map_name: &str) -> usize {
        self.maps.get(map_name).map_or(0, MapTable::len)
    }

    /// Bytes the map takes: its records (see `table`) and the map itself ([`MAP_BYTES`] and its
    /// name's heap block); 0 for a map that holds nothing.
    pub fn memory_bytes(&self, map_name: &str) -> u64 {
        self.maps
            .get_key_value(map_name)
            .map_or(0, |(name, table)| map_memory_bytes(name, table))
    }

    /// Records of every map.
    pub fn total_entry_count(&self) -> usize {
        self.maps.values().map(MapTable::len).sum()
    }

    /// Bytes of every map.
    pub fn total_memory_bytes(&self) -> u64 {
        self.maps
            .iter()
            .map(|(name, table)| map_memory_bytes(name, table))
            .sum()
    }

    /// The maps that hold records, in the order they were first written.
    pub fn map_names(&self) -> impl Iterator<Item = &str> {
        self.maps.keys().map(|name| &**name)
    }

    /// A map's table, for reading (tests, and the checks of later callers).
    pub fn table(&self, map_name: &str) -> Option<&MapTable> {
        self.maps.get(map_name)
    }

    fn table_for_writing(&mut self, map_name: &str) -> &mut MapTable {
        if !self.maps.contains_key(map_name) {
            self.maps.insert(
                map_name.into(),
                MapTable::with_max_idle(self.hash_seed, self.max_idle_ms),
            );
        }
        self.maps.get_mut(map_name).expect("inserted above")
    }

    fn drop_if_empty(&mut self, map_name: &str) {
        if self.maps.get(map_name).is_some_and(MapTable::is_empty) {
            // Shifting keeps the other maps in the order they were first written.
            self.maps.shift_remove(map_name);
        }
    }
}

fn map_memory_bytes(name: &str, table: &MapTable) -> u64 {
    MAP_BYTES + heap_block_bytes(name.len()) + table.memory_bytes()
}

impl Found {
    pub fn with_capacity(items: usize, with_values: bool) -> Self {
        Found {
            values: if with_values {
                Packed::with_capacity(items, 0)
            } else {
                Packed::default()
            },
            present: Vec::with_capacity(items),
        }
    }

    fn record(&mut self, value: Option<&[u8]>, with_values: bool) {
        self.present.push(u8::from(value.is_some()));
        if with_values {
            match value {
                Some(value) => self.values.push(value),
                None => self.values.push_empty(),
            }
        }
    }

    pub fn absent(&mut self, count: usize, with_values: bool) {
        for _ in 0..count {
            self.record(None, with_values);
        }
    }

    /// `count` keys left unread (an answer's byte bound stopped their partition's reads): an
    /// empty value each, presence [`UNREAD`].
    pub fn unread(&mut self, count: usize) {
        for _ in 0..count {
            self.values.push_empty();
            self.present.push(UNREAD);
        }
    }
}

/// The presence byte of a key a multi-store read left unread (past the answer's byte bound), beside
/// 1 (found) and 0 (absent).
pub const UNREAD: u8 = 2;

/// The checked columns of a write, and each entry's expiry time.
type CheckedWrite<'a> = (Column<'a>, Column<'a>, Vec<u64>);

fn check_write<'a>(
    map_name: &str,
    keys: &'a [u8],
    key_lengths: &'a [u8],
    values: &'a [u8],
    value_lengths: &'a [u8],
    now_ms: u64,
    ttl: Ttl<'_>,
) -> Checked<CheckedWrite<'a>> {
    check_map_name(map_name)?;
    check_time("now_ms", now_ms)?;
    let keys = Column::parse("keys", keys, key_lengths, MAX_OPERATIONS_PER_REQUEST, MAX_KEY_BYTES)?;
    let values = Column::parse(
        "values",
        values,
        value_lengths,
        MAX_OPERATIONS_PER_REQUEST,
        MAX_VALUE_BYTES,
    )?;
    if keys.len() != values.len() {
        return invalid(format!("{} keys and {} values", keys.len(), values.len()));
    }
    let ttls = match ttl {
        Ttl::Each(ttl_ms) => {
            check_bounded("ttl_ms", ttl_ms, MAX_COUNTER)?;
            vec![ttl_ms; keys.len()]
        }
        Ttl::PerEntry(packed) => parse_numbers("ttls_ms", packed, keys.len(), MAX_COUNTER)?,
    };
    // now_ms and every TTL are at most 2**53, so the sum cannot overflow.
    let expire_at = ttls
        .into_iter()
        // Past MAX_COUNTER an expiry means the same as at it (about 285,000 years from 1970),
        // and every time a record holds stays within what a transfer takes.
        .map(|ttl_ms| {
            if ttl_ms == 0 {
                0
            } else {
                (now_ms + ttl_ms).min(MAX_COUNTER)
            }
        })
        .collect();
    Ok((keys, values, expire_at))
}

/// The checked columns of records to load, and each record's metadata row.
pub type CheckedRecords<'a> = (Column<'a>, Column<'a>, Vec<[u64; METADATA_FIELDS.len()]>);

/// Check records as [`RecordStore::load`] takes them, whole: the columns (at most
/// [`MAX_ENTRIES_PER_CHUNK`], keys and values within their limits), one metadata row per record,
/// times and versions within [`MAX_COUNTER`], a version from 1, updated no earlier than created,
/// hits within 32 bits. What a transfer's receiver checks before it takes a chunk.
pub fn check_records<'a>(
    keys: &'a [u8],
    key_lengths: &'a [u8],
    values: &'a [u8],
    value_lengths: &'a [u8],
    metadata: &[u8],
) -> Checked<CheckedRecords<'a>> {
    let keys = Column::parse("keys", keys, key_lengths, MAX_ENTRIES_PER_CHUNK, MAX_KEY_BYTES)?;
    let values = Column::parse("values", values, value_lengths, MAX_ENTRIES_PER_CHUNK, MAX_VALUE_BYTES)?;
    if keys.len() != values.len() {
        return invalid(format!("{} keys and {} values", keys.len(), values.len()));
    }
    // Versions take every u64 (they wrap past u64::MAX to 1); times are within MAX_COUNTER.
    let numbers = parse_numbers("metadata", metadata, keys.len() * METADATA_FIELDS.len(), u64::MAX)?;
    let rows: Vec<[u64; METADATA_FIELDS.len()]> = numbers
        .chunks_exact(METADATA_FIELDS.len())
        .map(|row| row.try_into().expect("chunks_exact gives whole rows"))
        .collect();
    for (record, row) in rows.iter().enumerate() {
        let [created_ms, updated_ms, accessed_ms, expire_at_ms, hits, version] = *row;
        if let Some(time) = [created_ms, updated_ms, accessed_ms, expire_at_ms]
            .into_iter()
            .find(|&t| t > MAX_COUNTER)
        {
            return invalid(format!(
                "metadata: record {record} has a time of {time}, more than the {MAX_COUNTER} allowed"
            ));
        }
        if hits > u64::from(u32::MAX) {
            return invalid(format!(
                "metadata: record {record} has {hits} hits, more than 2**32 - 1"
            ));
        }
        if version == 0 || updated_ms < created_ms {
            return invalid(format!(
                "metadata: record {record} has version {version}, created {created_ms} and updated {updated_ms}: \
                 a record has a version from 1 and is updated no earlier than created"
            ));
        }
    }
    Ok((keys, values, rows))
}

pub(crate) fn check_map_name(map_name: &str) -> Checked<()> {
    let chars = map_name.chars().count();
    if chars == 0 || chars > MAX_MAP_NAME_CHARS {
        return invalid(format!(
            "a map name has 1 to {MAX_MAP_NAME_CHARS} characters, not {chars}"
        ));
    }
    Ok(())
}

pub(crate) fn check_time(what: &str, ms: u64) -> Checked<()> {
    check_bounded(what, ms, MAX_COUNTER)
}

pub(crate) fn check_bounded(what: &str, value: u64, max: u64) -> Checked<()> {
    if value > max {
        return invalid(format!("{what} is {value}, more than the {max} allowed"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::columns::{Column, pack, pack_numbers};

    const MAP: &str = "m";

    fn packed(items: &[&[u8]]) -> Packed {
        pack(items.iter().copied())
    }

    fn put(store: &mut RecordStore, keys: &[&[u8]], values: &[&[u8]], now_ms: u64, ttl_ms: u64) -> Found {
        let (k, v) = (packed(keys), packed(values));
        store
            .put(
                MAP,
                &k.data,
                &k.lengths,
                &v.data,
                &v.lengths,
                now_ms,
                Ttl::Each(ttl_ms),
                true,
            )
            .unwrap()
    }

    fn get(store: &mut RecordStore, keys: &[&[u8]], now_ms: u64) -> Vec<Option<Vec<u8>>> {
        let k = packed(keys);
        let found = store.get(MAP, &k.data, &k.lengths, now_ms, None).unwrap();
        unpack(&found)
    }

    fn unpack(found: &Found) -> Vec<Option<Vec<u8>>> {
        let values = Column::parse(
            "values",
            &found.values.data,
            &found.values.lengths,
            usize::MAX,
            usize::MAX,
        )
        .unwrap();
        values
            .iter()
            .zip(&found.present)
            .map(|(value, &present)| (present == 1).then(|| value.to_vec()))
            .collect()
    }

    #[test]
    fn put_get_remove_round_trip_with_previous_values() {
        let mut store = RecordStore::new(5);
        let first = put(&mut store, &[b"a", b"b"], &[b"1", b"2"], 10, 0);
        assert_eq!(unpack(&first), [None, None]);
        let second = put(&mut store, &[b"b", b"c"], &[b"22", b"3"], 11, 0);
        assert_eq!(unpack(&second), [Some(b"2".to_vec()), None]);
        assert_eq!(
            get(&mut store, &[b"a", b"b", b"x", b"c"], 12),
            [Some(b"1".to_vec()), Some(b"22".to_vec()), None, Some(b"3".to_vec())]
        );
        let k = packed(&[b"a", b"x"]);
        let removed = store.remove(MAP, &k.data, &k.lengths, 13, true).unwrap();
        assert_eq!(unpack(&removed), [Some(b"1".to_vec()), None]);
        assert_eq!(store.entry_count(MAP), 2);
    }

    #[test]
    fn a_key_twice_in_one_batch_applies_in_order() {
        let mut store = RecordStore::new(0);
        let found = put(&mut store, &[b"k", b"k"], &[b"1", b"2"], 1, 0);
        assert_eq!(unpack(&found), [None, Some(b"1".to_vec())]);
        assert_eq!(get(&mut store, &[b"k"], 1), [Some(b"2".to_vec())]);
        assert_eq!(store.table(MAP).unwrap().live(b"k", 1).unwrap().version, 2);
    }

    #[test]
    fn put_if_absent_writes_only_absent_or_expired_keys() {
        let mut store = RecordStore::new(0);
        put(&mut store, &[b"held"], &[b"old"], 0, 0);
        put(&mut store, &[b"gone"], &[b"old"], 0, 50);
        let (k, v) = (packed(&[b"held", b"gone", b"new"]), packed(&[b"x", b"y", b"z"]));
        let found = store
            .put_if_absent(MAP, &k.data, &k.lengths, &v.data, &v.lengths, 49, Ttl::Each(0), true)
            .unwrap();
        assert_eq!(unpack(&found), [Some(b"old".to_vec()), Some(b"old".to_vec()), None]);
        let found = store
            .put_if_absent(MAP, &k.data, &k.lengths, &v.data, &v.lengths, 50, Ttl::Each(0), false)
            .unwrap();
        assert_eq!(
            found.present,
            [1, 0, 1],
            "at 50 'gone' expired; 'new' was written at 49"
        );
        assert!(found.values.is_empty());
        assert_eq!(
            get(&mut store, &[b"held", b"gone", b"new"], 50),
            [Some(b"old".to_vec()), Some(b"y".to_vec()), Some(b"z".to_vec())]
        );
    }

    #[test]
    fn an_expired_entry_is_never_returned_by_any_read() {
        let mut store = RecordStore::new(0);
        put(&mut store, &[b"k"], &[b"v"], 100, 1);
        assert_eq!(get(&mut store, &[b"k"], 100), [Some(b"v".to_vec())]);
        assert_eq!(get(&mut store, &[b"k"], 101), [None]);
        let page = store.scan(MAP, 0, 10, 101, false, u64::MAX >> 11).unwrap();
        assert!(page.keys.is_empty() && page.values.is_empty());
        assert_eq!(page.next_offset, 1);
        let k = packed(&[b"k"]);
        let (numbers, present) = store.metadata(MAP, &k.data, &k.lengths, 101).unwrap();
        assert_eq!((numbers, present), (vec![0; METADATA_BYTES], vec![0]));
        let found = put(&mut store, &[b"k"], &[b"w"], 101, 0);
        assert_eq!(
            unpack(&found),
            [None],
            "a put over an expired entry has no previous value"
        );
        put(&mut store, &[b"j"], &[b"v"], 101, 1);
        let removed = store.remove(MAP, &k.data, &k.lengths, 200, true).unwrap();
        assert_eq!(unpack(&removed), [Some(b"w".to_vec())]);
        let j = packed(&[b"j"]);
        let removed = store.remove(MAP, &j.data, &j.lengths, 200, true).unwrap();
        assert_eq!(
            unpack(&removed),
            [None],
            "an expired entry is removed and reported absent"
        );
        assert_eq!(store.entry_count(MAP), 0);
    }

    #[test]
    fn ttl_edges_zero_means_never_and_the_largest_does_not_overflow() {
        let mut store = RecordStore::new(0);
        put(&mut store, &[b"never"], &[b"v"], MAX_COUNTER, 0);
        put(&mut store, &[b"far"], &[b"v"], MAX_COUNTER - 10, MAX_COUNTER);
        assert_eq!(get(&mut store, &[b"never", b"far"], MAX_COUNTER - 1).len(), 2);
        let far = store.table(MAP).unwrap().live(b"far", MAX_COUNTER - 1).unwrap();
        assert_eq!(
            far.expire_at_ms, MAX_COUNTER,
            "clamped: every time a record holds is one a transfer takes"
        );
        let (k, v) = (packed(&[b"k"]), packed(&[b"v"]));
        let past = store.put(
            MAP,
            &k.data,
            &k.lengths,
            &v.data,
            &v.lengths,
            0,
            Ttl::Each(MAX_COUNTER + 1),
            false,
        );
        assert_eq!(
            past.unwrap_err().0,
            format!("ttl_ms is {}, more than the {MAX_COUNTER} allowed", MAX_COUNTER + 1)
        );
        let late = store.put(
            MAP,
            &k.data,
            &k.lengths,
            &v.data,
            &v.lengths,
            MAX_COUNTER + 1,
            Ttl::Each(0),
            false,
        );
        assert!(late.is_err());
    }

    #[test]
    fn a_ttl_per_entry() {
        let mut store = RecordStore::new(0);
        let (k, v) = (packed(&[b"a", b"b", b"c"]), packed(&[b"1", b"2", b"3"]));
        let ttls = pack_numbers(&[10, 0, 20]);
        store
            .put(
                MAP,
                &k.data,
                &k.lengths,
                &v.data,
                &v.lengths,
                100,
                Ttl::PerEntry(&ttls),
                false,
            )
            .unwrap();
        assert_eq!(
            get(&mut store, &[b"a", b"b", b"c"], 115),
            [None, Some(b"2".to_vec()), Some(b"3".to_vec())]
        );
        let bad = pack_numbers(&[10, 0]);
        let error = store
            .put(
                MAP,
                &k.data,
                &k.lengths,
                &v.data,
                &v.lengths,
                100,
                Ttl::PerEntry(&bad),
                false,
            )
            .unwrap_err();
        assert_eq!(error.0, "ttls_ms: 2 numbers for 3 entries");
    }

    #[test]
    fn a_bad_batch_changes_nothing() {
        let mut store = RecordStore::new(0);
        put(&mut store, &[b"k"], &[b"v"], 0, 0);
        let before = store.clone();
        let big_key = vec![0u8; MAX_KEY_BYTES + 1];
        let keys = packed(&[b"k", b"fine", &big_key]);
        let values = packed(&[b"new", b"x", b"y"]);
        let error = store
            .put(
                MAP,
                &keys.data,
                &keys.lengths,
                &values.data,
                &values.lengths,
                1,
                Ttl::Each(0),
                false,
            )
            .unwrap_err();
        assert_eq!(
            error.0,
            format!(
                "keys: entry 2 is {} bytes, more than the {MAX_KEY_BYTES} allowed",
                MAX_KEY_BYTES + 1
            )
        );
        let two = packed(&[b"k", b"fine"]);
        let one = packed(&[b"x"]);
        let error = store
            .put(
                MAP,
                &two.data,
                &two.lengths,
                &one.data,
                &one.lengths,
                1,
                Ttl::Each(0),
                false,
            )
            .unwrap_err();
        assert_eq!(error.0, "2 keys and 1 values");
        let error = store
            .put(
                MAP,
                &two.data,
                &two.lengths[..7],
                &one.data,
                &one.lengths,
                1,
                Ttl::Each(0),
                false,
            )
            .unwrap_err();
        assert!(error.0.starts_with("keys: 7 bytes of lengths"));
        let error = store.remove(MAP, &two.data[..1], &two.lengths, 1, false).unwrap_err();
        assert_eq!(error.0, "keys: the lengths add up to 5 bytes and the buffer holds 1");
        assert!(store.get("", b"", b"", 0, None).is_err());
        assert!(
            store
                .get(&"x".repeat(MAX_MAP_NAME_CHARS + 1), b"", b"", 0, None)
                .is_err()
        );
        assert!(
            store.get(&"é".repeat(MAX_MAP_NAME_CHARS), b"", b"", 0, None).is_ok(),
            "characters, not bytes"
        );
        assert_eq!(
            store.table(MAP).unwrap().records(),
            before.table(MAP).unwrap().records()
        );
        assert_eq!(store.total_memory_bytes(), before.total_memory_bytes());
    }

    #[test]
    fn the_largest_key_and_value_are_taken_and_empty_ones_too() {
        let mut store = RecordStore::new(0);
        let key = vec![1u8; MAX_KEY_BYTES];
        let value = vec![2u8; MAX_VALUE_BYTES];
        put(&mut store, &[&key, b""], &[&value, b""], 0, 0);
        assert_eq!(
            get(&mut store, &[&key, b""], 0),
            [Some(value.clone()), Some(Vec::new())]
        );
        let too_big = vec![2u8; MAX_VALUE_BYTES + 1];
        let (k, v) = (packed(&[b"k"]), packed(&[&too_big]));
        assert!(
            store
                .put(MAP, &k.data, &k.lengths, &v.data, &v.lengths, 0, Ttl::Each(0), false)
                .is_err()
        );
    }

    #[test]
    fn more_entries_than_a_request_carries_are_refused() {
        let mut store = RecordStore::new(0);
        let keys: Vec<Vec<u8>> = (0..=MAX_OPERATIONS_PER_REQUEST as u32)
            .map(|n| n.to_le_bytes().to_vec())
            .collect();
        let k = pack(keys.iter().map(Vec::as_slice));
        assert!(store.get(MAP, &k.data, &k.lengths, 0, None).is_err());
        let k = pack(keys[1..].iter().map(Vec::as_slice));
        assert_eq!(
            store.get(MAP, &k.data, &k.lengths, 0, None).unwrap().present.len(),
            MAX_OPERATIONS_PER_REQUEST
        );
    }

    #[test]
    fn get_counts_hits_and_access_and_metadata_reads_them_without_counting() {
        let mut store = RecordStore::new(0);
        put(&mut store, &[b"k"], &[b"v"], 10, 100);
        get(&mut store, &[b"k", b"k"], 20);
        let k = packed(&[b"k"]);
        let (numbers, present) = store.metadata(MAP, &k.data, &k.lengths, 30).unwrap();
        assert_eq!(present, [1]);
        assert_eq!(numbers, pack_numbers(&[10, 10, 20, 110, 2, 1]));
        let (again, _) = store.metadata(MAP, &k.data, &k.lengths, 30).unwrap();
        assert_eq!(again, numbers);
    }

    #[test]
    fn scan_pages_cover_the_map_in_order() {
        let mut store = RecordStore::new(0);
        let keys: Vec<Vec<u8>> = (0..25u8).map(|n| vec![n]).collect();
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        put(&mut store, &refs, &refs, 0, 0);
        let mut offset = 0;
        let mut seen = Vec::new();
        while offset < store.entry_count(MAP) as u64 {
            let page = store.scan(MAP, offset, 10, 0, false, u64::MAX >> 11).unwrap();
            assert_eq!(page.keys, page.values);
            seen.extend(page.keys.data);
            offset = page.next_offset;
        }
        assert_eq!(seen, (0..25u8).collect::<Vec<_>>());
        let past = store.scan(MAP, 1_000, 10, 0, true, u64::MAX >> 11).unwrap();
        assert_eq!(
            past,
            Page {
                next_offset: 25,
                ..Page::default()
            }
        );
        assert!(
            store
                .scan(MAP, 0, MAX_OPERATIONS_PER_REQUEST as u64 + 1, 0, false, 0)
                .is_err()
        );
    }

    #[test]
    fn expired_names_keys_for_the_owner_and_removes_nothing() {
        let mut store = RecordStore::new(0);
        put(&mut store, &[b"a", b"b", b"c"], &[b"1", b"2", b"3"], 0, 10);
        let keys = store.expired(MAP, 10, 2).unwrap();
        assert_eq!(keys, packed(&[b"a", b"b"]));
        assert_eq!(store.entry_count(MAP), 3);
        assert!(store.expired(MAP, 9, 10).unwrap().is_empty());
        assert!(store.expired("other", 10, 10).unwrap().is_empty());
    }

    #[test]
    fn memory_is_counted_per_map_and_in_total_and_an_emptied_map_is_dropped() {
        let mut store = RecordStore::new(0);
        assert_eq!(store.total_memory_bytes(), 0);
        put(&mut store, &[b"k"], &[b"v"], 0, 0);
        let one = store.memory_bytes(MAP);
        assert_eq!(
            one,
            MAP_BYTES + heap_block_bytes(1) + store.table(MAP).unwrap().memory_bytes()
        );
        let (k, v) = (packed(&[b"k"]), packed(&[b"v"]));
        store
            .put(
                "other",
                &k.data,
                &k.lengths,
                &v.data,
                &v.lengths,
                0,
                Ttl::Each(0),
                false,
            )
            .unwrap();
        assert_eq!(store.total_memory_bytes(), one + store.memory_bytes("other"));
        assert_eq!(store.map_names().collect::<Vec<_>>(), [MAP, "other"]);
        store.remove(MAP, &k.data, &k.lengths, 0, false).unwrap();
        assert_eq!(store.map_names().collect::<Vec<_>>(), ["other"]);
        assert_eq!(store.memory_bytes(MAP), 0);
        assert_eq!(store.total_entry_count(), 1);
    }

    #[test]
    fn a_read_of_a_missing_map_creates_nothing() {
        let mut store = RecordStore::new(0);
        let k = packed(&[b"k"]);
        store.get(MAP, &k.data, &k.lengths, 0, None).unwrap();
        store.remove(MAP, &k.data, &k.lengths, 0, true).unwrap();
        store.put(MAP, b"", b"", b"", b"", 0, Ttl::Each(0), false).unwrap();
        assert_eq!(store.map_names().count(), 0);
    }

    #[test]
    fn a_dump_loaded_into_another_store_gives_the_same_records_order_and_memory() {
        let mut source = RecordStore::new(1);
        put(&mut source, &[b"a", b"b", b"c"], &[b"1", b"22", b""], 10, 0);
        put(&mut source, &[b"d"], &[b"4"], 20, 5);
        get(&mut source, &[b"a"], 30);
        let mut copy = RecordStore::new(2);
        let mut offset = 0;
        while offset < source.entry_count(MAP) as u64 {
            // Pages of one record each (the byte bound), expired records (d at 30) included.
            let page = source.dump(MAP, offset, 10, 1).unwrap();
            assert_eq!(page.keys.len(), 1);
            copy.load(
                MAP,
                &page.keys.data,
                &page.keys.lengths,
                &page.values.data,
                &page.values.lengths,
                &page.metadata,
            )
            .unwrap();
            offset = page.next_offset;
        }
        assert_eq!(copy.table(MAP).unwrap().records(), source.table(MAP).unwrap().records());
        assert_eq!(copy.memory_bytes(MAP), source.memory_bytes(MAP));
        copy.table(MAP).unwrap().check();
        let whole = source.dump(MAP, 0, 10, u64::MAX >> 11).unwrap();
        assert_eq!((whole.keys.len(), whole.next_offset), (4, 4));
        assert_eq!(source.dump(MAP, 9, 10, 100).unwrap().keys.len(), 0);
        assert_eq!(source.dump("none", 0, 10, 100).unwrap(), Dump::default());
    }

    #[test]
    fn room_made_ahead_changes_no_record_order_or_count_and_is_bounded() {
        let mut source = RecordStore::new(1);
        let keys: Vec<Vec<u8>> = (0..300u32).map(|i| i.to_le_bytes().to_vec()).collect();
        let key_refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        put(&mut source, &key_refs, &key_refs, 10, 7);
        let mut sized = RecordStore::new(2);
        // Nothing held: nothing made (a store keeps no empty map).
        sized.reserve(MAP, 300).unwrap();
        assert_eq!((sized.map_names().count(), sized.total_memory_bytes()), (0, 0));
        let mut offset = 0;
        while offset < source.entry_count(MAP) as u64 {
            let page = source.dump(MAP, offset, 100, u64::MAX >> 11).unwrap();
            let loaded = &page;
            sized
                .load(
                    MAP,
                    &loaded.keys.data,
                    &loaded.keys.lengths,
                    &loaded.values.data,
                    &loaded.values.lengths,
                    &loaded.metadata,
                )
                .unwrap();
            if offset == 0 {
                let held = sized.memory_bytes(MAP);
                sized.reserve(MAP, 200).unwrap();
                assert_eq!(sized.memory_bytes(MAP), held, "room not yet filled is not counted");
            }
            offset = page.next_offset;
        }
        let table = sized.table(MAP).unwrap();
        assert_eq!(table.records(), source.table(MAP).unwrap().records());
        assert_eq!(sized.memory_bytes(MAP), source.memory_bytes(MAP));
        table.check();
        // A map holds fewer than 2**32 records: no more room than that is made.
        let past = u64::from(u32::MAX) - 300 + 1;
        assert!(sized.reserve(MAP, past).is_err());
        assert!(sized.reserve(&"x".repeat(MAX_MAP_NAME_CHARS + 1), 1).is_err());
        assert_eq!(sized.entry_count(MAP), 300);
    }

    #[test]
    fn a_load_replaces_a_held_record_in_place_and_refuses_bad_metadata_whole() {
        let mut store = RecordStore::new(0);
        put(&mut store, &[b"a", b"b"], &[b"1", b"2"], 10, 100);
        let (k, v) = (packed(&[b"a"]), packed(&[b"xyz"]));
        let row = pack_numbers(&[1, 2, 3, 0, 4, 9]);
        store.load(MAP, &k.data, &k.lengths, &v.data, &v.lengths, &row).unwrap();
        let records = store.table(MAP).unwrap().records();
        assert_eq!(records[0].key(), b"a");
        assert_eq!(records[0].value(), b"xyz");
        assert_eq!(records[0].metadata(), [1, 2, 3, 0, 4, 9]);
        store.table(MAP).unwrap().check();
        for bad in [
            pack_numbers(&[1, 2, 3, 0, 4]),
            pack_numbers(&[1, 2, 3, 0, 1 << 32, 9]),
            pack_numbers(&[1, 2, 3, 0, 4, 0]),
            pack_numbers(&[5, 2, 3, 0, 4, 1]),
            pack_numbers(&[1, 2, 3, MAX_COUNTER + 1, 4, 1]),
        ] {
            let before = store.table(MAP).unwrap().records().to_vec();
            assert!(store.load(MAP, &k.data, &k.lengths, &v.data, &v.lengths, &bad).is_err());
            assert_eq!(store.table(MAP).unwrap().records(), before.as_slice());
        }
    }

    #[test]
    fn peek_reads_live_values_without_counting_a_read() {
        let mut store = RecordStore::new(0);
        put(&mut store, &[b"a", b"b"], &[b"1", b"2"], 10, 5);
        let k = packed(&[b"a", b"z", b"b"]);
        let found = store.peek(MAP, &k.data, &k.lengths, 12).unwrap();
        assert_eq!(found.present, [1, 0, 1]);
        assert_eq!(found.values, packed(&[b"1", b"", b"2"]));
        assert_eq!(store.peek(MAP, &k.data, &k.lengths, 15).unwrap().present, [0, 0, 0]);
        assert_eq!(store.table(MAP).unwrap().records()[0].hits, 0);
    }

    #[test]
    fn a_scan_page_stops_at_its_byte_bound_with_at_least_one_entry() {
        let mut store = RecordStore::new(0);
        put(
            &mut store,
            &[b"a", b"b", b"c", b"d"],
            &[b"1234", b"5678", b"9", b"0"],
            0,
            0,
        );
        put(&mut store, &[b"b"], &[b"x"], 0, 1); // expires at 1: hidden at 5, still covered
        let page = store.scan(MAP, 0, 10, 5, false, 6).unwrap();
        assert_eq!((page.keys.len(), page.next_offset), (1, 2)); // b, hidden, is covered
        let page = store.scan(MAP, 1, 10, 5, false, 4).unwrap();
        assert_eq!(page.keys, packed(&[b"c", b"d"]));
        assert_eq!(page.next_offset, 4);
        let page = store.scan(MAP, 0, 10, 5, true, 2).unwrap();
        assert_eq!(page.keys, packed(&[b"a", b"c"]));
        assert_eq!(page.next_offset, 3);
        let alone = store.scan(MAP, 0, 10, 5, false, 0).unwrap();
        assert_eq!((alone.keys.len(), alone.next_offset), (1, 2));
    }

    #[test]
    fn a_get_with_a_byte_bound_answers_the_first_keys_that_fit_and_reads_no_other() {
        let mut store = RecordStore::new(0);
        put(&mut store, &[b"a", b"b"], &[b"1234", b"56"], 0, 0);
        let k = packed(&[b"a", b"zz", b"b", b"a"]);
        let found = store.get(MAP, &k.data, &k.lengths, 1, Some(6)).unwrap();
        assert_eq!(found.present, [1, 0, 1]);
        assert_eq!(found.values, packed(&[b"1234", b"", b"56"]));
        assert_eq!(store.table(MAP).unwrap().records()[0].hits, 1);
        assert_eq!(
            store.get(MAP, &k.data, &k.lengths, 1, Some(3)).unwrap().present,
            Vec::<u8>::new()
        );
        assert_eq!(store.get(MAP, &k.data, &k.lengths, 1, None).unwrap().present.len(), 4);
    }

    fn check_dump(page: &Dump) {
        check_records(
            &page.keys.data,
            &page.keys.lengths,
            &page.values.data,
            &page.values.lengths,
            &page.metadata,
        )
        .unwrap();
    }

    #[test]
    fn a_write_by_a_clock_behind_the_creators_and_the_largest_ttl_still_dump_what_a_transfer_takes() {
        let mut store = RecordStore::new(0);
        put(&mut store, &[b"k"], &[b"1"], 1_000, 0);
        put(&mut store, &[b"k"], &[b"2"], 400, MAX_COUNTER); // an owner whose clock is behind
        let record = &store.table(MAP).unwrap().records()[0];
        assert_eq!(
            (record.created_ms, record.updated_ms, record.expire_at_ms),
            (1_000, 1_000, MAX_COUNTER)
        );
        let page = store.dump(MAP, 0, 10, u64::MAX >> 11).unwrap();
        check_dump(&page);
        let (k, v) = (packed(&[b"v"]), packed(&[b"x"]));
        let last = pack_numbers(&[1, 2, 3, 0, 4, u64::MAX]);
        store
            .load(MAP, &k.data, &k.lengths, &v.data, &v.lengths, &last)
            .unwrap();
        put(&mut store, &[b"v"], &[b"y"], 5, 0);
        assert_eq!(store.table(MAP).unwrap().records()[1].version, 1); // wrapped past u64::MAX, never 0
        let page = store.dump(MAP, 0, 10, u64::MAX >> 11).unwrap();
        check_dump(&page);
        let error = check_records(
            &k.data,
            &k.lengths,
            &v.data,
            &v.lengths,
            &pack_numbers(&[1, 2, 3, 0, 4, 0]),
        )
        .unwrap_err();
        assert!(error.0.starts_with("metadata: record 0 has version 0"), "{}", error.0);
    }
}
