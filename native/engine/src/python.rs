//! The `shardgrid._engine` module: [`RecordStore`](crate::RecordStore) for Python, and the
//! bounds it enforces. Its typed interface is `src/shardgrid/_engine.pyi`.
//!
//! Every method takes its entries as packed columns (`bytes` objects, read in place, never
//! copied) and answers with packed columns, so one call costs the same few Python objects
//! whatever the number of entries. A bad argument raises `ColumnError` (a `ValueError`) and
//! changes nothing; an argument of the wrong type raises `TypeError`, also before any change.

use pyo3::create_exception;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyInt, PyList, PySequence, PyTuple};

use crate::columns::{Column, InvalidInput, LENGTH_BYTES, NUMBER_BYTES, Packed};
use crate::limits::{
    MAX_COUNTER, MAX_ENTRIES_PER_CHUNK, MAX_EVICTION_SAMPLES, MAX_KEY_BYTES, MAX_MAP_NAME_CHARS,
    MAX_OPERATIONS_PER_REQUEST, MAX_PARTITION_COUNT, MAX_VALUE_BYTES,
};
use crate::partitions;
use crate::store::{self, DUMP_RECORD_BYTES, Dump, Found, MAP_BYTES, Page, RecordStore, Ttl, UNREAD};
use crate::table::{EXPIRY_BYTES, INDEX_BYTES, METADATA_FIELDS, RECORD_BYTES};

create_exception!(
    shardgrid._engine,
    ColumnError,
    PyValueError,
    "A column or argument that breaks the engine's rules (lengths that do not add up to the buffer, \
     a key or value too long, too many entries, a time or TTL out of range). The call changed nothing."
);

impl From<InvalidInput> for PyErr {
    fn from(error: InvalidInput) -> PyErr {
        ColumnError::new_err(error.0)
    }
}

/// An int argument from 0 to `max`: a negative or huge one is a `ColumnError` (a bad value), a
/// bool or another type a `TypeError` (a bad call).
fn int_arg(value: &Bound<'_, PyAny>, what: &str, max: u64) -> PyResult<u64> {
    if value.is_instance_of::<PyBool>() || !value.is_instance_of::<PyInt>() {
        let kind = value.get_type().name()?;
        return Err(PyTypeError::new_err(format!("{what} must be an int, not {kind}")));
    }
    match value.extract::<u64>() {
        Ok(number) if number <= max => Ok(number),
        _ => Err(ColumnError::new_err(format!(
            "{what} is {value}, not an int from 0 to {max}"
        ))),
    }
}

/// An optional byte bound on an answer (None: no bound), as `int_arg` takes ints.
fn optional_max_bytes(max_bytes: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
    max_bytes
        .map(|bound| int_arg(bound, "max_bytes", MAX_COUNTER))
        .transpose()
}

type Column3<'py> = (Bound<'py, PyBytes>, Bound<'py, PyBytes>, Bound<'py, PyBytes>);
/// A write's answer, and how much the map's memory count grew (negative: shrank).
type Written<'py> = (Bound<'py, PyBytes>, Bound<'py, PyBytes>, Bound<'py, PyBytes>, i64);

fn found<'py>(py: Python<'py>, found: &Found) -> Column3<'py> {
    (
        PyBytes::new(py, &found.values.data),
        PyBytes::new(py, &found.values.lengths),
        PyBytes::new(py, &found.present),
    )
}

fn written<'py>(py: Python<'py>, answer: &Found, before: u64, after: u64) -> Written<'py> {
    let (values, lengths, present) = found(py, answer);
    // Both counts are far below 2**63 (a map holds at most what the process can hold).
    (values, lengths, present, after as i64 - before as i64)
}

/// One partition replica's maps: per map name, key bytes to a record (value bytes, created,
/// updated and accessed times, expiry time, hits, version). Deterministic: the same calls in the
/// same order give the same answers, whatever the hash seed.
#[pyclass(module = "shardgrid._engine", name = "RecordStore")]
pub struct PyRecordStore {
    store: RecordStore,
}

#[pymethods]
impl PyRecordStore {
    #[new]
    #[pyo3(signature = (hash_seed = None, *, max_idle_ms = None))]
    fn new(hash_seed: Option<&Bound<'_, PyAny>>, max_idle_ms: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let seed = match hash_seed {
            Some(seed) => int_arg(seed, "hash_seed", u64::MAX)?,
            None => 0,
        };
        let max_idle_ms = match max_idle_ms {
            Some(idle) => int_arg(idle, "max_idle_ms", MAX_COUNTER)?,
            None => 0,
        };
        Ok(PyRecordStore {
            store: RecordStore::with_max_idle(seed, max_idle_ms),
        })
    }

    fn touch(&mut self, map_name: &str, now_ms: &Bound<'_, PyAny>) -> PyResult<()> {
        let now_ms = int_arg(now_ms, "now_ms", MAX_COUNTER)?;
        Ok(self.store.touch(map_name, now_ms)?)
    }

    fn idle<'py>(
        &self,
        py: Python<'py>,
        map_name: &str,
        now_ms: &Bound<'py, PyAny>,
        offset: &Bound<'py, PyAny>,
        max_scanned: &Bound<'py, PyAny>,
        max_entries: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>, u64)> {
        let now_ms = int_arg(now_ms, "now_ms", MAX_COUNTER)?;
        let offset = int_arg(offset, "offset", MAX_COUNTER)?;
        let max_scanned = int_arg(max_scanned, "max_scanned", MAX_ENTRIES_PER_CHUNK as u64)?;
        let max_entries = int_arg(max_entries, "max_entries", MAX_OPERATIONS_PER_REQUEST as u64)?;
        let (keys, next_offset) = self.store.idle(map_name, now_ms, offset, max_scanned, max_entries)?;
        Ok((
            PyBytes::new(py, &keys.data),
            PyBytes::new(py, &keys.lengths),
            next_offset,
        ))
    }

    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (map_name, keys, key_lengths, values, value_lengths, now_ms, *, ttl_ms = None, ttls_ms = None, return_previous = false))]
    fn put<'py>(
        &mut self,
        py: Python<'py>,
        map_name: &str,
        keys: &[u8],
        key_lengths: &[u8],
        values: &[u8],
        value_lengths: &[u8],
        now_ms: &Bound<'py, PyAny>,
        ttl_ms: Option<&Bound<'py, PyAny>>,
        ttls_ms: Option<&[u8]>,
        return_previous: bool,
    ) -> PyResult<Written<'py>> {
        let now_ms = int_arg(now_ms, "now_ms", MAX_COUNTER)?;
        let ttl = ttl_of(ttl_ms, ttls_ms)?;
        let before = self.store.memory_bytes(map_name);
        let answer = self.store.put(
            map_name,
            keys,
            key_lengths,
            values,
            value_lengths,
            now_ms,
            ttl,
            return_previous,
        )?;
        Ok(written(py, &answer, before, self.store.memory_bytes(map_name)))
    }

    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (map_name, keys, key_lengths, values, value_lengths, now_ms, *, ttl_ms = None, ttls_ms = None, return_previous = false))]
    fn put_if_absent<'py>(
        &mut self,
        py: Python<'py>,
        map_name: &str,
        keys: &[u8],
        key_lengths: &[u8],
        values: &[u8],
        value_lengths: &[u8],
        now_ms: &Bound<'py, PyAny>,
        ttl_ms: Option<&Bound<'py, PyAny>>,
        ttls_ms: Option<&[u8]>,
        return_previous: bool,
    ) -> PyResult<Written<'py>> {
        let now_ms = int_arg(now_ms, "now_ms", MAX_COUNTER)?;
        let ttl = ttl_of(ttl_ms, ttls_ms)?;
        let before = self.store.memory_bytes(map_name);
        let answer = self.store.put_if_absent(
            map_name,
            keys,
            key_lengths,
            values,
            value_lengths,
            now_ms,
            ttl,
            return_previous,
        )?;
        Ok(written(py, &answer, before, self.store.memory_bytes(map_name)))
    }

    #[pyo3(signature = (map_name, keys, key_lengths, now_ms, *, max_bytes = None))]
    fn get<'py>(
        &mut self,
        py: Python<'py>,
        map_name: &str,
        keys: &[u8],
        key_lengths: &[u8],
        now_ms: &Bound<'py, PyAny>,
        max_bytes: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Column3<'py>> {
        let now_ms = int_arg(now_ms, "now_ms", MAX_COUNTER)?;
        let max_bytes = optional_max_bytes(max_bytes)?;
        Ok(found(
            py,
            &self.store.get(map_name, keys, key_lengths, now_ms, max_bytes)?,
        ))
    }

    fn peek<'py>(
        &self,
        py: Python<'py>,
        map_name: &str,
        keys: &[u8],
        key_lengths: &[u8],
        now_ms: &Bound<'py, PyAny>,
    ) -> PyResult<Column3<'py>> {
        let now_ms = int_arg(now_ms, "now_ms", MAX_COUNTER)?;
        Ok(found(py, &self.store.peek(map_name, keys, key_lengths, now_ms)?))
    }

    #[pyo3(signature = (map_name, keys, key_lengths, now_ms, *, return_previous = false))]
    fn remove<'py>(
        &mut self,
        py: Python<'py>,
        map_name: &str,
        keys: &[u8],
        key_lengths: &[u8],
        now_ms: &Bound<'py, PyAny>,
        return_previous: bool,
    ) -> PyResult<Written<'py>> {
        let now_ms = int_arg(now_ms, "now_ms", MAX_COUNTER)?;
        let before = self.store.memory_bytes(map_name);
        let answer = self
            .store
            .remove(map_name, keys, key_lengths, now_ms, return_previous)?;
        Ok(written(py, &answer, before, self.store.memory_bytes(map_name)))
    }

    fn metadata<'py>(
        &self,
        py: Python<'py>,
        map_name: &str,
        keys: &[u8],
        key_lengths: &[u8],
        now_ms: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
        let now_ms = int_arg(now_ms, "now_ms", MAX_COUNTER)?;
        let (numbers, present) = self.store.metadata(map_name, keys, key_lengths, now_ms)?;
        Ok((PyBytes::new(py, &numbers), PyBytes::new(py, &present)))
    }

    #[allow(clippy::type_complexity, clippy::too_many_arguments)]
    #[pyo3(signature = (map_name, offset, max_entries, now_ms, *, keys_only = false, max_bytes = None))]
    fn scan<'py>(
        &self,
        py: Python<'py>,
        map_name: &str,
        offset: &Bound<'py, PyAny>,
        max_entries: &Bound<'py, PyAny>,
        now_ms: &Bound<'py, PyAny>,
        keys_only: bool,
        max_bytes: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<(
        Bound<'py, PyBytes>,
        Bound<'py, PyBytes>,
        Bound<'py, PyBytes>,
        Bound<'py, PyBytes>,
        u64,
    )> {
        let offset = int_arg(offset, "offset", MAX_COUNTER)?;
        let max_entries = int_arg(max_entries, "max_entries", MAX_OPERATIONS_PER_REQUEST as u64)?;
        let now_ms = int_arg(now_ms, "now_ms", MAX_COUNTER)?;
        let max_bytes = match max_bytes {
            Some(bound) => int_arg(bound, "max_bytes", MAX_COUNTER)?,
            None => MAX_COUNTER,
        };
        let Page {
            keys,
            values,
            next_offset,
        } = self
            .store
            .scan(map_name, offset, max_entries, now_ms, keys_only, max_bytes)?;
        Ok((
            PyBytes::new(py, &keys.data),
            PyBytes::new(py, &keys.lengths),
            PyBytes::new(py, &values.data),
            PyBytes::new(py, &values.lengths),
            next_offset,
        ))
    }

    fn expired<'py>(
        &self,
        py: Python<'py>,
        map_name: &str,
        now_ms: &Bound<'py, PyAny>,
        max_entries: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
        let now_ms = int_arg(now_ms, "now_ms", MAX_COUNTER)?;
        let max_entries = int_arg(max_entries, "max_entries", MAX_OPERATIONS_PER_REQUEST as u64)?;
        let keys = self.store.expired(map_name, now_ms, max_entries)?;
        Ok((PyBytes::new(py, &keys.data), PyBytes::new(py, &keys.lengths)))
    }

    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (map_name, policy, seed, samples, min_entries, min_bytes, now_ms))]
    fn evictable<'py>(
        &self,
        py: Python<'py>,
        map_name: &str,
        policy: &str,
        seed: &Bound<'py, PyAny>,
        samples: &Bound<'py, PyAny>,
        min_entries: &Bound<'py, PyAny>,
        min_bytes: &Bound<'py, PyAny>,
        now_ms: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
        let seed = int_arg(seed, "seed", u64::MAX)?;
        let samples = int_arg(samples, "samples", MAX_EVICTION_SAMPLES as u64)?;
        let min_entries = int_arg(min_entries, "min_entries", MAX_OPERATIONS_PER_REQUEST as u64)?;
        let min_bytes = int_arg(min_bytes, "min_bytes", MAX_COUNTER)?;
        let now_ms = int_arg(now_ms, "now_ms", MAX_COUNTER)?;
        let keys = self
            .store
            .evictable(map_name, policy, seed, samples, min_entries, min_bytes, now_ms)?;
        Ok((PyBytes::new(py, &keys.data), PyBytes::new(py, &keys.lengths)))
    }

    #[allow(clippy::type_complexity)]
    fn dump<'py>(
        &self,
        py: Python<'py>,
        map_name: &str,
        offset: &Bound<'py, PyAny>,
        max_entries: &Bound<'py, PyAny>,
        max_bytes: &Bound<'py, PyAny>,
    ) -> PyResult<(
        Bound<'py, PyBytes>,
        Bound<'py, PyBytes>,
        Bound<'py, PyBytes>,
        Bound<'py, PyBytes>,
        Bound<'py, PyBytes>,
        u64,
    )> {
        let offset = int_arg(offset, "offset", MAX_COUNTER)?;
        let max_entries = int_arg(max_entries, "max_entries", MAX_ENTRIES_PER_CHUNK as u64)?;
        let max_bytes = int_arg(max_bytes, "max_bytes", MAX_COUNTER)?;
        let Dump {
            keys,
            values,
            metadata,
            next_offset,
        } = self.store.dump(map_name, offset, max_entries, max_bytes)?;
        Ok((
            PyBytes::new(py, &keys.data),
            PyBytes::new(py, &keys.lengths),
            PyBytes::new(py, &values.data),
            PyBytes::new(py, &values.lengths),
            PyBytes::new(py, &metadata),
            next_offset,
        ))
    }

    fn load(
        &mut self,
        map_name: &str,
        keys: &[u8],
        key_lengths: &[u8],
        values: &[u8],
        value_lengths: &[u8],
        metadata: &[u8],
    ) -> PyResult<()> {
        Ok(self
            .store
            .load(map_name, keys, key_lengths, values, value_lengths, metadata)?)
    }

    fn reserve(&mut self, map_name: &str, entries: &Bound<'_, PyAny>) -> PyResult<()> {
        let entries = int_arg(entries, "entries", u64::from(u32::MAX))?;
        Ok(self.store.reserve(map_name, entries)?)
    }

    fn fit(&mut self, map_name: &str) -> PyResult<()> {
        Ok(self.store.fit(map_name)?)
    }

    fn entry_count(&self, map_name: &str) -> usize {
        self.store.entry_count(map_name)
    }

    fn memory_bytes(&self, map_name: &str) -> u64 {
        self.store.memory_bytes(map_name)
    }

    fn total_entry_count(&self) -> usize {
        self.store.total_entry_count()
    }

    fn total_memory_bytes(&self) -> u64 {
        self.store.total_memory_bytes()
    }

    fn map_names(&self) -> Vec<String> {
        self.store.map_names().map(str::to_owned).collect()
    }

    fn __repr__(&self) -> String {
        format!(
            "RecordStore({} maps, {} entries, {} bytes)",
            self.store.map_names().count(),
            self.store.total_entry_count(),
            self.store.total_memory_bytes()
        )
    }
}

/// A write's TTL: `ttl_ms` for every entry, or `ttls_ms` one per entry, not both.
fn ttl_of<'a>(ttl_ms: Option<&Bound<'_, PyAny>>, ttls_ms: Option<&'a [u8]>) -> PyResult<Ttl<'a>> {
    match (ttl_ms, ttls_ms) {
        (Some(_), Some(_)) => Err(ColumnError::new_err(
            "give ttl_ms (every entry) or ttls_ms (each), not both",
        )),
        (Some(ttl_ms), None) => Ok(Ttl::Each(int_arg(ttl_ms, "ttl_ms", MAX_COUNTER)?)),
        (None, Some(packed)) => Ok(Ttl::PerEntry(packed)),
        (None, None) => Ok(Ttl::Each(0)),
    }
}

/// The largest item a packed column holds: its length is a 32-bit number. (An answer may hold
/// more than a value: an entry view is a value and its metadata.)
const MAX_PACKED_ITEM_BYTES: usize = u32::MAX as usize;

/// `items` (a list or tuple of `bytes`) as a packed column: the items end to end, and their
/// lengths. One call per column: the codec of a caller that holds separate items.
#[pyfunction]
fn pack<'py>(py: Python<'py>, items: &Bound<'py, PyAny>) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
    let sequence = items
        .cast::<PySequence>()
        .map_err(|_| PyTypeError::new_err("pack takes a list or tuple of bytes"))?;
    let count = sequence.len()?;
    let mut items_bytes = Vec::with_capacity(count);
    let mut total = 0usize;
    for position in 0..count {
        let item = sequence.get_item(position)?;
        let Ok(bytes) = item.cast_into::<PyBytes>() else {
            return Err(PyTypeError::new_err(format!("item {position} is not bytes")));
        };
        if bytes.as_bytes().len() > MAX_PACKED_ITEM_BYTES {
            return Err(ColumnError::new_err(format!(
                "item {position} is {} bytes, more than a packed length holds",
                bytes.as_bytes().len()
            )));
        }
        total += bytes.as_bytes().len();
        items_bytes.push(bytes);
    }
    let mut packed = Packed::with_capacity(count, total);
    for bytes in &items_bytes {
        packed.push(bytes.as_bytes());
    }
    Ok((PyBytes::new(py, &packed.data), PyBytes::new(py, &packed.lengths)))
}

/// Check records as `RecordStore.load` takes them, whole, without taking them (a transfer's
/// receiver checks a chunk before it stages it): raises `ColumnError` saying what is wrong.
#[pyfunction]
fn check_records(
    keys: &[u8],
    key_lengths: &[u8],
    values: &[u8],
    value_lengths: &[u8],
    metadata: &[u8],
) -> PyResult<()> {
    store::check_records(keys, key_lengths, values, value_lengths, metadata)?;
    Ok(())
}

/// A packed column's items as a list of `bytes`; with `present` (a byte per item, 1 or 0), an
/// item marked 0 is None (and must be empty, as the engine writes an absent entry's place).
#[pyfunction]
#[pyo3(signature = (data, lengths, present = None))]
fn split<'py>(py: Python<'py>, data: &[u8], lengths: &[u8], present: Option<&[u8]>) -> PyResult<Bound<'py, PyList>> {
    let column = Column::parse("column", data, lengths, usize::MAX, MAX_PACKED_ITEM_BYTES)?;
    if let Some(mask) = present {
        if mask.len() != column.len() {
            return Err(ColumnError::new_err(format!(
                "a presence mask of {} bytes for {} items",
                mask.len(),
                column.len()
            )));
        }
        for (position, (&flag, item)) in mask.iter().zip(column.iter()).enumerate() {
            if flag > 1 || (flag == 0 && !item.is_empty()) {
                return Err(ColumnError::new_err(format!(
                    "item {position}: presence {flag} with {} bytes (1 or 0, and 0 only for an empty item)",
                    item.len()
                )));
            }
        }
    }
    let list = PyList::empty(py);
    for (position, item) in column.iter().enumerate() {
        if present.is_some_and(|mask| mask[position] == 0) {
            list.append(py.None())?;
        } else {
            list.append(PyBytes::new(py, item))?;
        }
    }
    Ok(list)
}

/// The partition of each key of a packed column among `partition_count` (Hazelcast's hash and
/// fold: `shardgrid.core.hashing`), as packed unsigned 32-bit little-endian numbers.
#[pyfunction]
fn partition_ids<'py>(
    py: Python<'py>,
    keys: &[u8],
    key_lengths: &[u8],
    partition_count: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyBytes>> {
    let count = partition_count_arg(partition_count)?;
    let column = Column::parse("keys", keys, key_lengths, usize::MAX, MAX_KEY_BYTES)?;
    let ids: Vec<u8> = partitions::partition_ids(&column, count)
        .iter()
        .flat_map(|id| id.to_le_bytes())
        .collect();
    Ok(PyBytes::new(py, &ids))
}

/// The partitions the keys of a packed column are in, among `partition_count`, each once in the
/// order they first come, as packed unsigned 32-bit little-endian numbers (a request's keys
/// checked as a request carries them: at most `MAX_OPERATIONS_PER_REQUEST`).
#[pyfunction]
fn partitions_of<'py>(
    py: Python<'py>,
    keys: &[u8],
    key_lengths: &[u8],
    partition_count: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyBytes>> {
    let count = partition_count_arg(partition_count)?;
    let column = Column::parse("keys", keys, key_lengths, MAX_OPERATIONS_PER_REQUEST, MAX_KEY_BYTES)?;
    let mut met = vec![false; count as usize];
    let mut ids: Vec<u8> = Vec::new();
    for pid in partitions::partition_ids(&column, count) {
        if !std::mem::replace(&mut met[pid as usize], true) {
            ids.extend_from_slice(&pid.to_le_bytes());
        }
    }
    Ok(PyBytes::new(py, &ids))
}

fn partition_count_arg(value: &Bound<'_, PyAny>) -> PyResult<u32> {
    let count = int_arg(value, "partition_count", MAX_PARTITION_COUNT as u64)?;
    if count == 0 {
        return Err(ColumnError::new_err("partition_count is 0, not an int from 1"));
    }
    Ok(count as u32)
}

/// One partition's keys in a request: its id, their positions `start..end` (in the request's
/// order, or in the returned order when the request had to be reordered), and their keys, values
/// and TTLs as packed columns of their own (values and TTLs empty when the request has none).
type GroupSlice<'py> = (
    u32,
    usize,
    usize,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
);

/// A request's keys cut by partition, after checking its columns whole: at most
/// `MAX_OPERATIONS_PER_REQUEST` keys of at most `MAX_KEY_BYTES` each; no values or one per key
/// of at most `MAX_VALUE_BYTES` each; no TTLs or one 64-bit number per key. Returns a slice per
/// partition, in the order the partitions first come, and None when every partition's keys come
/// side by side; otherwise the packed positions (unsigned 32-bit numbers) of the stable order
/// that brings them together, which the slices' positions refer to. One call per request: the
/// slices are the columns the engine and the backups take, made here rather than a slice at a
/// time in Python.
#[pyfunction]
#[pyo3(signature = (partition_count, keys, key_lengths, values = None, value_lengths = None, ttls_ms = None))]
#[allow(clippy::type_complexity)]
fn split_by_partition<'py>(
    py: Python<'py>,
    partition_count: &Bound<'py, PyAny>,
    keys: &[u8],
    key_lengths: &[u8],
    values: Option<&[u8]>,
    value_lengths: Option<&[u8]>,
    ttls_ms: Option<&[u8]>,
) -> PyResult<(Vec<GroupSlice<'py>>, Option<Bound<'py, PyBytes>>)> {
    let count = partition_count_arg(partition_count)?;
    let keys = Column::parse("keys", keys, key_lengths, MAX_OPERATIONS_PER_REQUEST, MAX_KEY_BYTES)?;
    let values = Column::parse(
        "values",
        values.unwrap_or_default(),
        value_lengths.unwrap_or_default(),
        MAX_OPERATIONS_PER_REQUEST,
        MAX_VALUE_BYTES,
    )?;
    if !values.is_empty() && values.len() != keys.len() {
        return Err(ColumnError::new_err(format!(
            "{} values for {} keys: one per key, or none",
            values.len(),
            keys.len()
        )));
    }
    let ttls = ttls_ms.unwrap_or_default();
    if !ttls.is_empty() && ttls.len() != keys.len() * NUMBER_BYTES {
        return Err(ColumnError::new_err(format!(
            "{} bytes of TTLs for {} keys: one {NUMBER_BYTES}-byte number per key, or none",
            ttls.len(),
            keys.len()
        )));
    }
    let grouping = partitions::group(&partitions::partition_ids(&keys, count));
    let key_items: Vec<&[u8]> = keys.iter().collect();
    let value_items: Vec<&[u8]> = values.iter().collect();
    let position = |at: usize| grouping.order.as_ref().map_or(at, |order| order[at] as usize);
    let mut slices = Vec::with_capacity(grouping.groups.len());
    for group in &grouping.groups {
        let mut key_slice = Packed::default();
        let mut value_slice = Packed::default();
        let mut ttl_slice = Vec::with_capacity(if ttls.is_empty() {
            0
        } else {
            (group.end - group.start) * NUMBER_BYTES
        });
        for at in group.start..group.end {
            let p = position(at);
            key_slice.push(key_items[p]);
            if !value_items.is_empty() {
                value_slice.push(value_items[p]);
            }
            if !ttls.is_empty() {
                ttl_slice.extend_from_slice(&ttls[p * NUMBER_BYTES..(p + 1) * NUMBER_BYTES]);
            }
        }
        slices.push((
            group.partition_id,
            group.start,
            group.end,
            PyBytes::new(py, &key_slice.data),
            PyBytes::new(py, &key_slice.lengths),
            PyBytes::new(py, &value_slice.data),
            PyBytes::new(py, &value_slice.lengths),
            PyBytes::new(py, &ttl_slice),
        ));
    }
    let order = grouping.order.map(|order| {
        let packed: Vec<u8> = order.iter().flat_map(|p| p.to_le_bytes()).collect();
        PyBytes::new(py, &packed)
    });
    Ok((slices, order))
}

/// One partition's part of a `get_parts` call: its store (None: the partition holds nothing here)
/// and its keys as a packed column.
type ReadPart<'py> = (
    Option<Bound<'py, PyRecordStore>>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
);
/// `get_parts`'s answer: values, their lengths, a presence byte per key, and the parts' ends.
type PartsAnswer<'py> = (
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
);

/// Read `keys` from `store` into `found` within `max_bytes` (counted over everything `found`
/// holds), as a partition's reads stop at the bound: its keys past it are left [`UNREAD`] and the
/// next partition's are read with what is left (what serving a get a partition at a time did).
fn read_partition<'k>(
    store: Option<&Bound<'_, PyRecordStore>>,
    map_name: &str,
    keys: impl ExactSizeIterator<Item = &'k [u8]>,
    now_ms: u64,
    max_bytes: Option<u64>,
    found: &mut Found,
) -> PyResult<()> {
    let count = keys.len();
    let Some(store) = store else {
        found.absent(count, true);
        return Ok(());
    };
    let before = found.present.len();
    let whole = store
        .try_borrow_mut()?
        .store
        .read_keys(map_name, keys, now_ms, max_bytes, found);
    if !whole {
        found.unread(count - (found.present.len() - before));
    }
    Ok(())
}

/// `RecordStore.get` over several stores in one call (the partitions of one request), answered
/// in the order of `parts`, one presence byte per key: 1 found, 0 absent, [`UNREAD`] past
/// `max_bytes` (every store's values count against it together; a part's reads stop at the first
/// value that does not fit, and the next part's go on with what is left). Every part is checked
/// before any is read (a read counts a hit and marks the entry accessed). Also answers each
/// part's end in the values (an unsigned 64-bit number per part).
#[pyfunction]
#[pyo3(signature = (map_name, parts, now_ms, max_bytes = None))]
fn get_parts<'py>(
    py: Python<'py>,
    map_name: &str,
    parts: Vec<ReadPart<'py>>,
    now_ms: &Bound<'py, PyAny>,
    max_bytes: Option<&Bound<'py, PyAny>>,
) -> PyResult<PartsAnswer<'py>> {
    store::check_map_name(map_name)?;
    let now_ms = int_arg(now_ms, "now_ms", MAX_COUNTER)?;
    let max_bytes = optional_max_bytes(max_bytes)?;
    if parts.len() > MAX_PARTITION_COUNT {
        return Err(ColumnError::new_err(format!(
            "{} parts, more than the {MAX_PARTITION_COUNT} partitions a cluster may have",
            parts.len()
        )));
    }
    let mut columns = Vec::with_capacity(parts.len());
    let mut count = 0;
    for (_, keys, lengths) in &parts {
        let column = Column::parse(
            "keys",
            keys.as_bytes(),
            lengths.as_bytes(),
            MAX_OPERATIONS_PER_REQUEST,
            MAX_KEY_BYTES,
        )?;
        count += column.len();
        if count > MAX_OPERATIONS_PER_REQUEST {
            return Err(ColumnError::new_err(format!(
                "more than the {MAX_OPERATIONS_PER_REQUEST} keys one call may read"
            )));
        }
        columns.push(column);
    }
    let mut found = Found::with_capacity(count, true);
    let mut ends: Vec<u8> = Vec::with_capacity(parts.len() * NUMBER_BYTES);
    for ((store, _, _), keys) in parts.iter().zip(&columns) {
        read_partition(store.as_ref(), map_name, keys.iter(), now_ms, max_bytes, &mut found)?;
        ends.extend_from_slice(&(found.values.data.len() as u64).to_le_bytes());
    }
    let (values, lengths, present) = self::found(py, &found);
    Ok((values, lengths, present, PyBytes::new(py, &ends)))
}

/// A partition's store in a `get_routed` call: the partition, and its store (None: it holds
/// nothing here).
type RoutedStore<'py> = (Bound<'py, PyAny>, Option<Bound<'py, PyRecordStore>>);

/// `RecordStore.get` of a request's keys, each read from the store of its partition (among
/// `partition_count`, as `partition_ids` finds it), in one call: answered in the keys' order, one
/// presence byte per key as `get_parts` gives them. The partitions are read one after another in
/// the order they first come, each one's keys in request order, with every value counting against
/// one `max_bytes` (exactly as serving the request a partition at a time reads them). The caller
/// names a store (or None) for every partition the keys are in: the keys are checked, and each
/// one's partition found among `stores`, before any is read.
#[pyfunction]
#[pyo3(signature = (map_name, partition_count, keys, key_lengths, stores, now_ms, max_bytes = None))]
#[allow(clippy::too_many_arguments)]
fn get_routed<'py>(
    py: Python<'py>,
    map_name: &str,
    partition_count: &Bound<'py, PyAny>,
    keys: &[u8],
    key_lengths: &[u8],
    stores: Vec<RoutedStore<'py>>,
    now_ms: &Bound<'py, PyAny>,
    max_bytes: Option<&Bound<'py, PyAny>>,
) -> PyResult<Column3<'py>> {
    store::check_map_name(map_name)?;
    let count = partition_count_arg(partition_count)?;
    let now_ms = int_arg(now_ms, "now_ms", MAX_COUNTER)?;
    let max_bytes = optional_max_bytes(max_bytes)?;
    let keys = Column::parse("keys", keys, key_lengths, MAX_OPERATIONS_PER_REQUEST, MAX_KEY_BYTES)?;
    let mut slot_of = vec![u32::MAX; count as usize];
    for (slot, (pid, _)) in stores.iter().enumerate() {
        let pid = int_arg(pid, "partition", MAX_COUNTER)?;
        let Some(held) = slot_of.get_mut(usize::try_from(pid).unwrap_or(usize::MAX)) else {
            return Err(ColumnError::new_err(format!(
                "a store of partition {pid}, not one of the {count} partitions"
            )));
        };
        if *held != u32::MAX {
            return Err(ColumnError::new_err(format!("two stores of partition {pid}")));
        }
        // At most `count` slots (no partition twice), and `count` fits in a u32.
        *held = slot as u32;
    }
    let pids = partitions::partition_ids(&keys, count);
    if let Some(pid) = pids.iter().find(|&&pid| slot_of[pid as usize] == u32::MAX) {
        return Err(ColumnError::new_err(format!(
            "a key of partition {pid}, whose store is not given"
        )));
    }
    let items: Vec<&[u8]> = keys.iter().collect();
    let grouping = partitions::group(&pids);
    // Position `at` of the grouped order is the request's `position(at)`.
    let position = |at: usize| grouping.order.as_ref().map_or(at, |order| order[at] as usize);
    let mut found = Found::with_capacity(items.len(), true);
    for group in &grouping.groups {
        let store = stores[slot_of[group.partition_id as usize] as usize].1.as_ref();
        let run = (group.start..group.end).map(|at| items[position(at)]);
        read_partition(store, map_name, run, now_ms, max_bytes, &mut found)?;
    }
    if grouping.order.is_some() {
        found = in_request_order(&found, &grouping);
    }
    Ok(self::found(py, &found))
}

/// An answer read in a grouping's order, put back in the request's.
fn in_request_order(grouped: &Found, grouping: &partitions::Grouping) -> Found {
    let order = grouping.order.as_deref().unwrap_or_default();
    let values: Vec<&[u8]> = Column::parse(
        "values",
        &grouped.values.data,
        &grouped.values.lengths,
        usize::MAX,
        usize::MAX,
    )
    .expect("the engine's own answer is a well-formed column")
    .iter()
    .collect();
    let mut at_of = vec![0usize; order.len()];
    for (at, &position) in order.iter().enumerate() {
        at_of[position as usize] = at;
    }
    let mut answer = Found::with_capacity(order.len(), true);
    for &at in &at_of {
        answer.values.push(values[at]);
        answer.present.push(grouped.present[at]);
    }
    answer
}

/// Check a packed column whole (its lengths a whole number of 4-byte lengths adding up to the
/// buffer, at most `max_items` of them, each at most `max_item_bytes`): its item count, or a
/// `ColumnError` saying what is wrong (named `what`).
#[pyfunction]
#[pyo3(signature = (data, lengths, *, max_items, max_item_bytes, what = "column"))]
fn check_column(
    data: &[u8],
    lengths: &[u8],
    max_items: &Bound<'_, PyAny>,
    max_item_bytes: &Bound<'_, PyAny>,
    what: &str,
) -> PyResult<usize> {
    let max_items = int_arg(max_items, "max_items", MAX_COUNTER)? as usize;
    let max_item_bytes = int_arg(max_item_bytes, "max_item_bytes", MAX_VALUE_BYTES as u64)? as usize;
    let what: String = what.chars().take(40).collect();
    Ok(Column::parse(&what, data, lengths, max_items, max_item_bytes)?.len())
}

/// shardgrid's storage engine: one partition replica's records, their memory and expiry, and the
/// packed column codecs (see `shardgrid/_engine.pyi`).
#[pymodule(name = "_engine")]
fn engine_module(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    module.add_class::<PyRecordStore>()?;
    module.add_function(wrap_pyfunction!(pack, module)?)?;
    module.add_function(wrap_pyfunction!(split, module)?)?;
    module.add_function(wrap_pyfunction!(check_records, module)?)?;
    module.add_function(wrap_pyfunction!(check_column, module)?)?;
    module.add_function(wrap_pyfunction!(partition_ids, module)?)?;
    module.add_function(wrap_pyfunction!(split_by_partition, module)?)?;
    module.add_function(wrap_pyfunction!(get_parts, module)?)?;
    module.add_function(wrap_pyfunction!(get_routed, module)?)?;
    module.add_function(wrap_pyfunction!(partitions_of, module)?)?;
    module.add("MAX_PARTITION_COUNT", MAX_PARTITION_COUNT)?;
    module.add("UNREAD", UNREAD)?;
    module.add("DUMP_RECORD_BYTES", DUMP_RECORD_BYTES)?;
    module.add("ColumnError", py.get_type::<ColumnError>())?;
    module.add("MAX_KEY_BYTES", MAX_KEY_BYTES)?;
    module.add("MAX_VALUE_BYTES", MAX_VALUE_BYTES)?;
    module.add("MAX_OPERATIONS_PER_REQUEST", MAX_OPERATIONS_PER_REQUEST)?;
    module.add("MAX_MAP_NAME_CHARS", MAX_MAP_NAME_CHARS)?;
    module.add("MAX_COUNTER", MAX_COUNTER)?;
    module.add("MAX_ENTRIES_PER_CHUNK", MAX_ENTRIES_PER_CHUNK)?;
    module.add("MAX_EVICTION_SAMPLES", MAX_EVICTION_SAMPLES)?;
    module.add("LENGTH_BYTES", LENGTH_BYTES)?;
    module.add("NUMBER_BYTES", NUMBER_BYTES)?;
    module.add("METADATA_FIELDS", PyTuple::new(py, METADATA_FIELDS)?)?;
    module.add("RECORD_BYTES", RECORD_BYTES)?;
    module.add("INDEX_BYTES", INDEX_BYTES)?;
    module.add("EXPIRY_BYTES", EXPIRY_BYTES)?;
    module.add("MAP_BYTES", MAP_BYTES)?;
    Ok(())
}
