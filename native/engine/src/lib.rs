//! shardgrid's storage engine: the records of one partition replica, their memory and expiry, and
//! the packed column codecs that carry them across the Python boundary.
//!
//! The engine belongs to the pure core's world. It performs no I/O, reads no clock, starts no
//! thread and holds no random state of its own: every call that needs the time takes the core's
//! `now_ms`, and the hash function is keyed by a seed the caller gives. Iteration follows a vector
//! of records, never a hash table, so the same calls in the same order give the same order on
//! every run and every machine (the simulator replays a seed bit for bit). The engine decides
//! nothing: it never removes an entry by itself (an expired one is only hidden until the owner's
//! replicated remove takes it away), and it tells the core what it holds and what has expired.
//!
//! Every column that comes in is checked whole before anything is applied
//! ([`columns::Column::parse`]): a bad one is an [`InvalidInput`] and changes nothing.
//!
//! Layout: [`limits`] (the bounds, the same as `shardgrid/core/limits.py`), [`columns`] (the
//! packed format), [`table`] (one map: records, index, expiry order, memory count), [`eviction`]
//! (which entries a map over its size should lose), [`partitions`] (keys to partitions, and a
//! batch grouped by partition), [`store`]
//! (a replica's maps, and the batch calls the core makes); `python` (behind the `python` feature)
//! turns them into the `shardgrid._engine` module.

// No unsafe code of our own (the compiler refuses any): the bindings' unsafe is pyo3's.
#![forbid(unsafe_code)]

pub mod columns;
pub mod eviction;
pub mod limits;
pub mod partitions;
pub mod store;
pub mod table;

#[cfg(feature = "python")]
mod python;

pub use columns::InvalidInput;
pub use store::RecordStore;
