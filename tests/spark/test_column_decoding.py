"""Batches parsed a column at a time (``column_decoding``) read back exactly as the row-by-row
decoder reads them, and anything that parse does not take goes to the row-by-row decoder whole:
the same batch, or the same error naming the column."""

from __future__ import annotations

import msgspec
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardgrid.core.hashing import serialize_key
from shardgrid.spark.column_decoding import MapColumns, key_column
from shardgrid.spark.column_encoding import BYTES
from shardgrid.spark.columns import EntryDecoder, RowEncoder, RowError, layout_of
from shardgrid.spark.options import KeyType
from tests.spark.test_column_encoding import _EDGE_INTS, _INT64, _batches

_ANY_MSGPACK = st.recursive(
    st.none() | st.booleans() | _INT64 | st.floats() | st.text(max_size=20) | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


def _schema_of(batch: pa.RecordBatch) -> pa.Schema:
    """As Spark declares a read: the key not null, every other column nullable."""
    return pa.schema([pa.field(f.name, f.type, f.name != "key") for f in batch.schema])


def _both(decoder: EntryDecoder, keys: list[bytes], values: list[bytes]) -> tuple[object, object]:
    """The column parse's batch (None: not taken) and the row decoder's (or its error's text)."""
    parsed = decoder._decode_columns(pa.array(keys, BYTES), pa.array(values, BYTES))
    try:
        rows: object = decoder._decode_rows(keys, values)
    except RowError as error:
        rows = str(error)
    return parsed, rows


@settings(max_examples=200, deadline=None)
@given(_batches())
def test_every_type_it_takes_reads_back_as_the_row_decoder_reads_it(given_batch):
    batch, fields = given_batch
    schema = _schema_of(batch)
    layout = layout_of(schema, "key", None)
    keys, values = RowEncoder(layout).encode_batch(batch)
    decoder = EntryDecoder(layout, schema)
    parsed, rows = _both(decoder, keys.to_pylist(), values.to_pylist())
    assert isinstance(rows, pa.RecordBatch)
    assert rows.equals(batch.cast(schema))
    if fields and "f32" not in fields:  # a float32 column is left to the row decoder
        assert parsed is not None
    if parsed is not None:
        assert parsed.equals(rows)
    assert decoder.decode(keys.to_pylist(), values.to_pylist()).equals(rows)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.dictionaries(st.sampled_from(["a", "b", "key", "c"]), _ANY_MSGPACK, max_size=4),
            st.fixed_dictionaries({"a": _INT64 | st.none(), "b": st.text(max_size=20) | st.none()}),
            _ANY_MSGPACK,
        ).map(msgspec.msgpack.encode)
        | st.binary(max_size=30),
        max_size=8,
    ),
    st.binary(max_size=4),
)
def test_hostile_entries_read_back_as_the_row_decoder_reads_them_or_fail_as_it_fails(values, trailer):
    """Entries of any shape (other fields, order, types, truncated or with bytes after the map):
    the column parse returns the row decoder's batch, or leaves the batch to it."""
    schema = pa.schema([pa.field("key", pa.int64(), False), pa.field("a", pa.int64()), pa.field("b", pa.string())])
    decoder = EntryDecoder(layout_of(schema, "key", None), schema)
    values = [value + trailer if i % 2 else value for i, value in enumerate(values)]
    keys = [serialize_key(i) for i in range(len(values))]
    parsed, rows = _both(decoder, keys, values)
    if parsed is not None:
        assert isinstance(rows, pa.RecordBatch)
        assert parsed.equals(rows)
    if isinstance(rows, str):
        with pytest.raises(RowError, match="shardgrid: "):
            decoder.decode(keys, values)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(_INT64, _EDGE_INTS), max_size=30),
    st.lists(st.text(max_size=30), max_size=30),
    st.integers(0, 5),
)
def test_key_columns_are_the_keys_loaded_one_by_one(numbers, texts, start):
    longs = pa.array([serialize_key(n) for n in numbers], BYTES).slice(min(start, len(numbers)))
    got = key_column(longs, KeyType.LONG, pa.int64())
    assert got is not None
    assert got.to_pylist() == numbers[min(start, len(numbers)) :]
    strings = pa.array([serialize_key(t) for t in texts], BYTES)
    got = key_column(strings, KeyType.STRING, pa.string())
    assert got is not None
    assert got.to_pylist() == texts
    blobs = [t.encode() for t in texts]
    assert key_column(pa.array(blobs, BYTES), KeyType.BINARY, pa.binary()).to_pylist() == blobs


def test_keys_of_another_form_are_left_to_the_key_loader():
    assert key_column(pa.array([b"abc"], BYTES), KeyType.LONG, pa.int64()) is None  # 3 bytes: no long
    assert key_column(pa.array([b"\x00\x00\x00\x09abc"], BYTES), KeyType.STRING, pa.string()) is None
    assert key_column(pa.array([b"\x00\x00\x00\x02\xff\xfe"], BYTES), KeyType.STRING, pa.string()) is None
    assert key_column(pa.array([serialize_key(2**40)], BYTES), KeyType.LONG, pa.int32()) is None  # too wide


def test_a_value_column_of_a_type_it_does_not_parse_leaves_every_batch_to_the_row_decoder():
    schema = pa.schema([pa.field("key", pa.int64(), False), pa.field("when", pa.date32())])
    columns = MapColumns(schema, ("when",))
    assert columns.parse(pa.array([msgspec.msgpack.encode({"when": "2026-01-01"})], BYTES)) is None
    decoder = EntryDecoder(layout_of(schema, "key", None), schema)
    batch = decoder.decode([serialize_key(1)], [msgspec.msgpack.encode({"when": "2026-01-01"})])
    assert batch.column(1).to_pylist()[0].isoformat() == "2026-01-01"


def test_strings_at_the_view_boundaries_and_at_the_end_of_the_buffer():
    """Arrow keeps a string of up to 12 bytes inside its view and points at a longer one; the last
    entry's bytes end the buffer, where an 8-byte read would run past it but for the padding."""
    schema = pa.schema([pa.field("key", pa.int64(), False), pa.field("s", pa.string())])
    texts = ["", "a", "x" * 7, "x" * 8, "é" * 6, "y" * 12, "z" * 13, "w" * 31, "v" * 32, "u" * 300, None, "t"]
    values = pa.array([msgspec.msgpack.encode({"s": text}) for text in texts], BYTES)
    for start in range(len(texts)):
        parsed = MapColumns(schema, ("s",)).parse(values.slice(start))
        assert parsed is not None
        assert parsed["s"].to_pylist() == texts[start:]


def test_invalid_utf8_in_a_string_column_is_named_by_the_row_decoder():
    schema = pa.schema([pa.field("key", pa.int64(), False), pa.field("s", pa.string())])
    decoder = EntryDecoder(layout_of(schema, "key", None), schema)
    bad = b"\x81\xa1s\xa2\xff\xfe"  # {"s": <str of 2 bytes that are not UTF-8>}
    assert decoder._decode_columns(pa.array([serialize_key(1)], BYTES), pa.array([bad], BYTES)) is None
    with pytest.raises(RowError):
        decoder.decode([serialize_key(1)], [bad])


@pytest.mark.parametrize(
    ("column", "stored"),
    [(pa.decimal128(10, 2), "abc"), (pa.date32(), "not a date"), (pa.timestamp("us"), "not a time")],
)
def test_stored_text_that_is_no_decimal_date_or_time_is_a_row_error(column, stored):
    """Found by an outside tester: the parser's own error escaped (decimal.InvalidOperation,
    ValueError), naming no column."""
    schema = pa.schema([pa.field("k", pa.int64(), False), pa.field("v", column)])
    decoder = EntryDecoder(layout_of(schema, "k", None), schema)
    with pytest.raises(RowError, match="column 'v'"):
        decoder.decode([serialize_key(1)], [msgspec.msgpack.encode({"v": stored})])


def test_a_value_column_of_text_that_is_not_utf8_is_a_row_error():
    """Found by an outside tester: Python's UnicodeDecodeError escaped, naming nothing."""
    schema = pa.schema([pa.field("k", pa.int64(), False), pa.field("v", pa.string())])
    decoder = EntryDecoder(layout_of(schema, "k", "v"), schema)
    with pytest.raises(RowError, match="value column 'v'"):
        decoder.decode([serialize_key(1)], [b"\xff"])
