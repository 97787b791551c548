//! The bounds the engine enforces, with their units: the same numbers as
//! `src/shardgrid/core/limits.py` (`tests/engine/test_limits.py` checks that they agree, so one
//! changed without the other fails the suite).

/// The largest key, in bytes (`MAX_KEY_BYTES`).
pub const MAX_KEY_BYTES: usize = 64 * 1024;
/// The largest value, in bytes (`MAX_VALUE_BYTES`).
pub const MAX_VALUE_BYTES: usize = 4 * 1024 * 1024;
/// The most entries one call takes or returns (`MAX_OPERATIONS_PER_REQUEST`).
pub const MAX_OPERATIONS_PER_REQUEST: usize = 10_000;
/// The longest map name, in characters (`MAX_MAP_NAME_CHARS`).
pub const MAX_MAP_NAME_CHARS: usize = 256;
/// The largest counter a peer or client may send (`MAX_COUNTER`, 2**53): it bounds `now_ms` and
/// every TTL, so that `now_ms + ttl_ms` never overflows and a double holds every time exactly.
pub const MAX_COUNTER: u64 = 1 << 53;
/// Records in one transfer chunk (`MAX_ENTRIES_PER_CHUNK`): the most one `dump` page or one
/// `load` holds.
pub const MAX_ENTRIES_PER_CHUNK: usize = 100_000;
/// Records drawn to choose each entry to evict (`MAX_EVICTION_SAMPLES`).
pub const MAX_EVICTION_SAMPLES: usize = 64;
/// The most partitions a cluster may have (`MAX_PARTITION_COUNT`).
pub const MAX_PARTITION_COUNT: usize = 100_000;
