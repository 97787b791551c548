//! Which entries to evict from a map that is over its size: the candidates, never the removal
//! (the owner removes them by a replicated write, as it does expired entries).
//!
//! Sampled, as Redis approximates LRU: for each entry to evict, a few records drawn at random
//! positions compete, and the best candidate of the policy goes (the least recently accessed for
//! LRU, the least read for LFU, the first drawn for RANDOM). An entry that has expired beats any
//! live one. The draws come from the caller's seed (the core's seeded generator) through
//! splitmix64, so the same records and seed give the same candidates on every run.

use foldhash::quality::FixedState;
use hashbrown::HashSet;

use crate::columns::{Checked, invalid};
use crate::table::{MapTable, Record};

/// How a map chooses what to evict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// The least recently accessed (read or written) of the sample.
    Lru,
    /// The least read of the sample (hits), the least recently accessed among equals.
    Lfu,
    /// Any: the first of the sample.
    Random,
}

impl Policy {
    /// The policy a map's setting names ("LRU", "LFU" or "RANDOM"; "NONE" evicts nothing, so it
    /// is never asked here).
    pub fn parse(name: &str) -> Checked<Self> {
        match name {
            "LRU" => Ok(Policy::Lru),
            "LFU" => Ok(Policy::Lfu),
            "RANDOM" => Ok(Policy::Random),
            other => {
                // A name from a peer is bounded on the wire; from Python it may be any length.
                let shown: String = other.chars().take(40).collect();
                let cut = if shown.len() < other.len() { "..." } else { "" };
                invalid(format!("an eviction policy is LRU, LFU or RANDOM, not {shown:?}{cut}"))
            }
        }
    }

    /// Whether `candidate` should go rather than `best`, at `now_ms`.
    fn prefers(self, table: &MapTable, candidate: &Record, best: &Record, now_ms: u64) -> bool {
        let (candidate_live, best_live) = (table.is_live(candidate, now_ms), table.is_live(best, now_ms));
        if candidate_live != best_live {
            return !candidate_live; // an expired entry goes first
        }
        match self {
            Policy::Lru => candidate.accessed_ms < best.accessed_ms,
            Policy::Lfu => (candidate.hits, candidate.accessed_ms) < (best.hits, best.accessed_ms),
            Policy::Random => false,
        }
    }
}

/// splitmix64 (Steele, Lea and Flood): a full-period generator of 64-bit numbers from one seed.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A position below `len` (the modulo's bias is below 2**-32 for any table that fits).
    fn below(&mut self, len: usize) -> usize {
        (self.next() % len as u64) as usize
    }
}

/// What to evict: at least `min_entries` records and at least `min_bytes` of the table's memory
/// count (or every record, when the table holds less), never more than `max_entries`, each
/// chosen among `samples` draws; the positions, in the order chosen. The work is bounded by
/// `max_entries` times `samples`.
#[allow(clippy::too_many_arguments)]
pub fn candidates(
    table: &MapTable,
    policy: Policy,
    seed: u64,
    samples: usize,
    min_entries: usize,
    min_bytes: u64,
    max_entries: usize,
    now_ms: u64,
) -> Vec<usize> {
    let records = table.records();
    let len = records.len();
    let most = len.min(max_entries);
    let mut rng = SplitMix64(seed);
    let mut chosen: Vec<usize> = Vec::new();
    // Only asked whether it holds a position, never iterated: its hash is not observable.
    let mut taken: HashSet<usize, FixedState> = HashSet::with_hasher(FixedState::with_seed(0));
    let mut freed: u64 = 0;
    while chosen.len() < most && (chosen.len() < min_entries || freed < min_bytes) {
        let mut best: Option<usize> = None;
        for _ in 0..samples.max(1) {
            let at = rng.below(len);
            if taken.contains(&at) {
                continue;
            }
            if best.is_none_or(|b| policy.prefers(table, &records[at], &records[b], now_ms)) {
                best = Some(at);
            }
        }
        // Every draw hit a record already chosen (most of the table is going): the next one
        // from a random position on.
        let at = best.unwrap_or_else(|| {
            let start = rng.below(len);
            (0..len)
                .map(|step| (start + step) % len)
                .find(|at| !taken.contains(at))
                .expect("fewer records are chosen than held")
        });
        taken.insert(at);
        chosen.push(at);
        freed += table.record_memory_bytes(&records[at]);
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::columns::Packed;

    fn table_of(count: u32) -> MapTable {
        let mut table = MapTable::new(5);
        for n in 0..count {
            table.write(&n.to_le_bytes(), b"value", u64::from(n), 0);
        }
        table
    }

    fn key_numbers(table: &MapTable, positions: &[usize]) -> Vec<u32> {
        positions
            .iter()
            .map(|&at| u32::from_le_bytes(table.records()[at].key().try_into().unwrap()))
            .collect()
    }

    #[test]
    fn lru_evicts_among_the_least_recently_accessed() {
        let mut table = table_of(1_000);
        // The first hundred are read late: they are the most recently accessed.
        let mut out = Packed::default();
        for n in 0..100u32 {
            table.read(&n.to_le_bytes(), 5_000, &mut out);
        }
        let chosen = candidates(&table, Policy::Lru, 42, 16, 50, 0, 100_000, 5_000);
        assert_eq!(chosen.len(), 50);
        let numbers = key_numbers(&table, &chosen);
        assert!(numbers.iter().all(|&n| n >= 100), "a recently read entry was chosen");
        let mean = numbers.iter().map(|&n| f64::from(n)).sum::<f64>() / 50.0;
        assert!(mean < 400.0, "16 samples lean to the oldest, mean {mean}");
    }

    #[test]
    fn lfu_evicts_the_least_read() {
        let mut table = table_of(200);
        let mut out = Packed::default();
        for n in 0..190u32 {
            table.read(&n.to_le_bytes(), 1_000, &mut out);
        }
        let chosen = candidates(&table, Policy::Lfu, 7, 200, 10, 0, 100_000, 1_000);
        let mut numbers = key_numbers(&table, &chosen);
        numbers.sort_unstable();
        assert_eq!(numbers, (190..200).collect::<Vec<u32>>(), "the ten never read");
    }

    #[test]
    fn an_expired_entry_goes_before_any_live_one() {
        let mut table = table_of(100);
        table.write(b"old", b"v", 0, 10);
        let chosen = candidates(&table, Policy::Random, 3, 200, 1, 0, 100_000, 50);
        assert_eq!(table.records()[chosen[0]].key(), b"old");
    }

    #[test]
    fn candidates_are_distinct_deterministic_and_stop_at_the_table() {
        let table = table_of(300);
        for policy in [Policy::Lru, Policy::Lfu, Policy::Random] {
            let one = candidates(&table, policy, 99, 5, 250, 0, 100_000, 0);
            assert_eq!(one, candidates(&table, policy, 99, 5, 250, 0, 100_000, 0));
            let distinct: std::collections::HashSet<usize> = one.iter().copied().collect();
            assert_eq!(distinct.len(), 250);
            assert_eq!(candidates(&table, policy, 1, 5, 10_000, 0, 100_000, 0).len(), 300);
        }
        assert!(candidates(&MapTable::new(0), Policy::Lru, 1, 5, 10, 10, 100_000, 0).is_empty());
        assert_eq!(candidates(&table, Policy::Lru, 1, 5, 300, u64::MAX, 20, 0).len(), 20);
    }

    #[test]
    fn enough_entries_are_chosen_to_free_the_bytes_asked() {
        let table = table_of(100);
        let each = table.memory_bytes() / 100;
        let chosen = candidates(&table, Policy::Random, 11, 4, 0, each * 10 + 1, 100_000, 0);
        assert_eq!(chosen.len(), 11);
    }

    #[test]
    fn a_policy_is_named_as_the_settings_name_it() {
        assert_eq!(Policy::parse("LFU").unwrap(), Policy::Lfu);
        assert!(Policy::parse("NONE").is_err());
        assert!(Policy::parse("lru").is_err());
    }
}
