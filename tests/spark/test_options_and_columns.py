"""The data source's option checks and row conversions, without a Spark session."""

from __future__ import annotations

import datetime
import decimal

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardgrid.spark.columns import EntryDecoder, RowEncoder, RowError, layout_of
from shardgrid.spark.options import KeyType, SparkOptionError, WriteMode, parse


def test_defaults_and_spellings() -> None:
    parsed = parse({"MAP": "users", "Key.Column": "id", "checkpointLocation": "/tmp/x"}, writing=True)
    assert parsed.map_name == "users"
    assert parsed.key_column == "id"
    assert parsed.connection.members == ("127.0.0.1:5701",)
    assert (parsed.write_batch_size, parsed.write_concurrency, parsed.write_mode) == (1_000, 4, WriteMode.PUT)
    assert parsed.key_type is KeyType.STRING
    assert parse({"map": "m"}, writing=False).key_column is None  # a read names it "key" unless told


@pytest.mark.parametrize(
    ("given_options", "message"),
    [
        ({}, "option 'map' is required"),
        ({"map": "m"}, "option 'key.column' is required to write"),
        ({"map": "m", "key.column": "id", "wirte.mode": "put"}, "'wirte.mode'; did you mean 'write.mode'"),
        ({"map": "m", "key.column": "id", "path": "/x"}, "name the map with .option('map', ...)"),
        ({"map": "m", "key.column": "id", "write.mode": "upsert"}, "expected put or put_if_absent, got 'upsert'"),
        ({"map": "m", "key.column": "id", "write.batch.size": "10001"}, "expected an integer from 1 to 10000"),
        ({"map": "m", "key.column": "id", "write.concurrency": "x"}, "'write.concurrency': expected an integer"),
        ({"map": "m", "key.column": "id", "confirm.truncate": "sure"}, "expected true or false, got 'sure'"),
        ({"map": "m", "key.column": "id", "cluster.members": "localhost"}, "expected host:port"),
        ({"map": "m", "key.column": "id", "tls.cert.file": "c.pem"}, "'tls.cert.file' and 'tls.key.file' go together"),
        ({"map": "x" * 300, "key.column": "id"}, "'map': expected a name of at most"),
    ],
)
def test_a_bad_option_names_itself_and_what_it_takes(given_options: dict[str, str], message: str) -> None:
    with pytest.raises(SparkOptionError) as caught:
        parse(given_options, writing=True)
    assert message in str(caught.value)


SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("score", pa.float64()),
        ("amount", pa.decimal128(20, 2)),
        ("day", pa.date32()),
        ("seen", pa.timestamp("us", tz="UTC")),
        ("flag", pa.bool_()),
    ]
)


def test_rows_round_trip_through_entries_with_every_common_type() -> None:
    rows = {
        "id": [1, 2],
        "name": ["ada", None],
        "score": [1.5, None],
        "amount": [decimal.Decimal("12.34"), None],
        "day": [datetime.date(2024, 2, 29), None],
        "seen": [datetime.datetime(2024, 1, 1, 12, tzinfo=datetime.UTC), None],
        "flag": [True, None],
    }
    batch = pa.RecordBatch.from_pydict(rows, schema=SCHEMA)
    layout = layout_of(SCHEMA, "id", None)
    keys, values = RowEncoder(layout).encode_batch(batch)
    back = EntryDecoder(layout, SCHEMA).decode(keys, values)
    assert back.schema == SCHEMA
    assert back.to_pydict() == rows


@given(st.lists(st.tuples(st.text(max_size=20), st.binary(max_size=50)), max_size=30, unique_by=lambda r: r[0]))
def test_a_value_column_is_stored_as_it_is_and_read_back(entries: list[tuple[str, bytes]]) -> None:
    schema = pa.schema([("k", pa.string()), ("blob", pa.binary())])
    batch = pa.RecordBatch.from_pylist([{"k": k, "blob": b} for k, b in entries], schema=schema)
    layout = layout_of(schema, "k", "blob")
    keys, values = RowEncoder(layout).encode_batch(batch)
    assert values == [b for _, b in entries]
    assert EntryDecoder(layout, schema).decode(keys, values).to_pylist() == batch.to_pylist()


def test_bad_rows_and_layouts_are_named() -> None:
    layout = layout_of(SCHEMA, "id", None)
    with pytest.raises(RowError, match="null key"):
        RowEncoder(layout).encode_batch(pa.RecordBatch.from_pydict({"id": [None]} | _nulls(1), schema=SCHEMA))
    with pytest.raises(SparkOptionError, match="key column 'score' is double"):
        layout_of(SCHEMA, "score", None)
    with pytest.raises(SparkOptionError, match="no column 'missing'"):
        layout_of(SCHEMA, "missing", None)
    with pytest.raises(SparkOptionError, match="must be binary or string"):
        layout_of(SCHEMA, "id", "score")
    keys, values = RowEncoder(layout).encode_batch(
        pa.RecordBatch.from_pydict({"id": [7]} | _nulls(1) | {"score": [2.5]}, schema=SCHEMA)
    )
    wrong = pa.schema([("id", pa.int64()), ("score", pa.int64())])
    with pytest.raises(RowError, match="column 'score' \\(int64\\)"):
        EntryDecoder(layout_of(wrong, "id", None), wrong).decode(keys, values)


def _nulls(count: int) -> dict[str, list[None]]:
    return {name: [None] * count for name in SCHEMA.names if name != "id"}
