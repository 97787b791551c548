"""Keys, values and partition ids built a column at a time are exactly what the row-by-row forms
give: msgspec's encoding of each row's dict, ``serialize_key``, ``partition_ids_of_serialized``."""

from __future__ import annotations

import datetime
import math

import msgspec
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from shardgrid.core.hashing import partition_ids_of_serialized, serialize_key
from shardgrid.spark.column_encoding import BYTES, map_values, serialized_keys
from shardgrid.spark.column_hashing import partition_ids_of_column
from shardgrid.spark.columns import RowEncoder, layout_of
from shardgrid.spark.options import KeyType

# Lengths around every msgpack boundary (fixstr 31/32, 8-bit 255/256, 16-bit 65535/65536).
_LENGTHS = st.sampled_from([0, 1, 31, 32, 33, 255, 256, 65_535, 65_536])
_INT64 = st.integers(-(2**63), 2**63 - 1)
_EDGE_INTS = st.sampled_from(
    [
        0,
        127,
        128,
        255,
        256,
        65_535,
        65_536,
        2**32 - 1,
        2**32,
        -1,
        -32,
        -33,
        -128,
        -129,
        -32_768,
        -32_769,
        -(2**31),
        -(2**31) - 1,
        2**63 - 1,
        -(2**63),
    ]
)
_COLUMNS = {
    "i64": (pa.int64(), st.one_of(_INT64, _EDGE_INTS)),
    "i8": (pa.int8(), st.integers(-128, 127)),
    "i32": (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    "f64": (pa.float64(), st.floats(allow_nan=False) | st.sampled_from([math.inf, -math.inf, -0.0])),
    "f32": (pa.float32(), st.floats(width=32, allow_nan=False)),
    "flag": (pa.bool_(), st.booleans()),
    "text": (pa.string(), st.one_of(st.text(max_size=40), _LENGTHS.map(lambda n: "é" * (n // 2) + "x" * (n % 2)))),
    "blob": (pa.binary(), st.one_of(st.binary(max_size=40), _LENGTHS.map(bytes))),
}


@st.composite
def _batches(draw: st.DrawFn) -> tuple[pa.RecordBatch, tuple[str, ...]]:
    names = draw(st.lists(st.sampled_from(sorted(_COLUMNS)), unique=True, max_size=len(_COLUMNS)))
    count = draw(st.integers(0, 12))
    columns = {"key": pa.array(range(count), pa.int64())}
    for name in names:
        kind, values = _COLUMNS[name]
        columns[name] = pa.array(draw(st.lists(st.none() | values, min_size=count, max_size=count)), kind)
    batch = pa.RecordBatch.from_pydict(columns)
    start = draw(st.integers(0, count))
    return batch.slice(start), tuple(names)  # a slice: Arrow columns need not start at 0


@settings(max_examples=150, deadline=None)
@given(_batches())
def test_map_values_are_msgspecs_encoding_of_each_row(given_batch):
    batch, fields = given_batch
    values = map_values(batch, fields)
    assert values is not None
    assert values.type == BYTES
    encoder = msgspec.msgpack.Encoder()
    assert values.to_pylist() == [encoder.encode(row) for row in batch.select(list(fields)).to_pylist()]


def test_types_left_to_the_row_encoder_are_told():
    when = pa.array([datetime.datetime(2026, 1, 1)], pa.timestamp("us"))
    batch = pa.RecordBatch.from_pydict({"key": [1], "when": when})
    assert map_values(batch, ("when",)) is None
    assert serialized_keys(pa.array([1], pa.uint64()), KeyType.LONG) is None
    # The encoder then goes row by row, to the same bytes msgspec gives.
    layout = layout_of(batch.schema, "key", None)
    keys, values = RowEncoder(layout).encode_batch(batch)
    assert values.to_pylist() == [msgspec.msgpack.encode({"when": datetime.datetime(2026, 1, 1)})]
    assert keys.to_pylist() == [serialize_key(1)]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(_INT64, _EDGE_INTS), max_size=30), st.lists(st.text(max_size=30), max_size=30))
def test_serialized_keys_are_serialize_keys(numbers, texts):
    longs = serialized_keys(pa.array(numbers, pa.int64()), KeyType.LONG)
    assert longs is not None
    assert longs.to_pylist() == [serialize_key(n) for n in numbers]
    strings = serialized_keys(pa.array(texts, pa.string()), KeyType.STRING)
    assert strings is not None
    assert strings.to_pylist() == [serialize_key(t) for t in texts]
    blobs = [t.encode() for t in texts]
    assert serialized_keys(pa.array(blobs, pa.binary()), KeyType.BINARY).to_pylist() == blobs


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.binary(max_size=300) | st.binary(min_size=4, max_size=4), max_size=60),
    st.integers(0, 60),
    st.integers(1, 1_000),
    st.booleans(),
)
def test_column_partition_ids_are_the_key_by_key_ones(keys, start, partition_count, large):
    column = pa.array(keys, pa.large_binary() if large else pa.binary()).slice(min(start, len(keys)))
    expected = partition_ids_of_serialized(keys[min(start, len(keys)) :], partition_count)
    assert partition_ids_of_column(column, partition_count).tolist() == expected


def test_keys_of_one_length_many_lengths_and_too_many_lengths_hash_alike():
    one_length = [b"%08d" % i for i in range(500)]
    many = [b"x" * (i % 40) for i in range(500)]
    too_many = [b"y" * i for i in range(100)]
    for keys in (one_length, many, too_many):
        got = partition_ids_of_column(pa.array(keys, pa.binary()), 271).tolist()
        assert got == partition_ids_of_serialized(keys, 271)
