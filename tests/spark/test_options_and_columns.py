"""The data source's option checks and row conversions, without a Spark session."""

from __future__ import annotations

import datetime
import decimal
import re

import msgspec
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardgrid.core.hashing import serialize_key
from shardgrid.spark.columns import EntryDecoder, Layout, RowEncoder, RowError, layout_of
from shardgrid.spark.options import KeyType, SparkOptionError, WriteMode, parse


def test_defaults_and_spellings() -> None:
    parsed = parse({"MAP": "users", "Key.Column": "id", "checkpointLocation": "/tmp/x"}, writing=True)
    assert parsed.map_name == "users"
    assert parsed.key_column == "id"
    assert parsed.connection.members == ("127.0.0.1:5701",)
    assert (parsed.write_batch_size, parsed.write_concurrency, parsed.write_mode) == (1_000, 8, WriteMode.PUT)
    assert parsed.key_type is KeyType.STRING
    assert parse({"map": "m"}, writing=False).key_column is None  # a read names it "key" unless told
    assert parsed.write_ttl_ms == -1  # the map's own time_to_live_seconds
    assert parse({"map": "m", "key.column": "id", "write.ttl.seconds": "90"}, writing=True).write_ttl_ms == 90_000
    assert parse({"map": "m", "key.column": "id", "write.ttl.seconds": "0"}, writing=True).write_ttl_ms == 0


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
        ({"map": "m", "key.column": "id", "write.ttl.seconds": "-1"}, "'write.ttl.seconds': expected an integer"),
        ({"map": "m", "key.column": "id", "write.ttl.seconds": "1.5"}, "'write.ttl.seconds': expected an integer"),
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
    keys, values = _encoded(layout, batch)
    back = EntryDecoder(layout, SCHEMA).decode(keys, values)
    assert back.schema == SCHEMA
    assert back.to_pydict() == rows


@given(st.lists(st.tuples(st.text(max_size=20), st.binary(max_size=50)), max_size=30, unique_by=lambda r: r[0]))
def test_a_value_column_is_stored_as_it_is_and_read_back(entries: list[tuple[str, bytes]]) -> None:
    schema = pa.schema([("k", pa.string()), ("blob", pa.binary())])
    batch = pa.RecordBatch.from_pylist([{"k": k, "blob": b} for k, b in entries], schema=schema)
    layout = layout_of(schema, "k", "blob")
    keys, values = _encoded(layout, batch)
    assert values == [b for _, b in entries]
    assert EntryDecoder(layout, schema).decode(keys, values).to_pylist() == batch.to_pylist()


def _encoded(layout: Layout, batch: pa.RecordBatch) -> tuple[list[bytes], list[bytes]]:
    keys, values = RowEncoder(layout).encode_batch(batch)
    return keys.to_pylist(), values.to_pylist()


def test_bad_rows_and_layouts_are_named() -> None:
    layout = layout_of(SCHEMA, "id", None)
    with pytest.raises(RowError, match="null key"):
        RowEncoder(layout).encode_batch(pa.RecordBatch.from_pydict({"id": [None]} | _nulls(1), schema=SCHEMA))
    with pytest.raises(SparkOptionError, match="key column 'score' is double"):
        layout_of(SCHEMA, "score", None)
    with pytest.raises(SparkOptionError, match="no column 'missing'"):
        layout_of(SCHEMA, "missing", None)
    # Found by an outside tester: the second of two columns named alike overwrote the first.
    with pytest.raises(SparkOptionError, match=r"column names repeat \(v\)"):
        layout_of(pa.schema([("id", pa.int64()), ("v", pa.string()), ("v", pa.int64())]), "id", None)
    with pytest.raises(SparkOptionError, match="must be binary or string"):
        layout_of(SCHEMA, "id", "score")
    keys, values = _encoded(
        layout, pa.RecordBatch.from_pydict({"id": [7]} | _nulls(1) | {"score": [2.5]}, schema=SCHEMA)
    )
    wrong = pa.schema([("id", pa.int64()), ("score", pa.int64())])
    with pytest.raises(RowError, match="column 'score' \\(int64\\)"):
        EntryDecoder(layout_of(wrong, "id", None), wrong).decode(keys, values)


def _nulls(count: int) -> dict[str, list[None]]:
    return {name: [None] * count for name in SCHEMA.names if name != "id"}


def test_map_columns_are_refused_anywhere_in_the_schema() -> None:
    for column in (pa.map_(pa.string(), pa.int32()), pa.struct([("m", pa.map_(pa.string(), pa.int32()))])):
        schema = pa.schema([("id", pa.int64()), ("m", column)])
        with pytest.raises(SparkOptionError, match="map columns are not supported"):
            layout_of(schema, "id", None)


def test_the_stream_writer_stores_structs_as_the_batch_writer_does() -> None:
    """Found by an outside tester: a struct came in a stream's Row as a tuple and was stored as a
    list, which no read could take back."""
    from pyspark.sql import Row

    schema = pa.schema([("id", pa.int64()), ("st", pa.struct([("a", pa.int32()), ("b", pa.string())]))])
    layout = layout_of(schema, "id", None)
    rows = [Row(id=1, st=Row(a=7, b="x")), Row(id=2, st=None)]
    from_rows = RowEncoder(layout).encode_rows(rows)
    batch = pa.RecordBatch.from_pylist([{"id": 1, "st": {"a": 7, "b": "x"}}, {"id": 2, "st": None}], schema=schema)
    assert from_rows == _encoded(layout, batch)
    assert EntryDecoder(layout, schema).decode(*from_rows).to_pylist() == batch.to_pylist()


def test_a_failed_job_is_told_by_the_line_that_says_why() -> None:
    """Found by an outside tester: the first "shardgrid:" in Spark's error could be a source line
    quoted in a traceback, printed as the reason."""
    from shardgrid.spark.jobs import failure_reason

    spark_error = "\n".join(
        [
            "An exception was thrown from the Python worker. Please see the stack trace below.",
            "Traceback (most recent call last):",
            '  File "columns.py", line 90, in encode_batch',
            "    raise RowError(f\"shardgrid: a row has a null key (column '{layout.key_column}')\")",
            "shardgrid.spark.columns.RowError: shardgrid: a row has a null key (column 'id'); every row needs a key",
            "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(...)",
        ]
    )
    assert (
        failure_reason(RuntimeError(spark_error))
        == "shardgrid: a row has a null key (column 'id'); every row needs a key"
    )
    assert failure_reason(RuntimeError("Traceback:\nValueError: bad schema")) == "bad schema"


def test_a_failed_read_names_the_file_and_what_its_header_lacked() -> None:
    """Found by an outside tester: the reason kept "CSV header does not conform to the schema." and
    dropped the file and the column Spark named; and an error whose text needs the JVM, asked after
    the JVM ended, raised again instead of giving a reason."""
    from shardgrid.spark.jobs import failure_reason

    spark_error = "\n".join(
        [
            "An error occurred while calling o35.save.",
            ": org.apache.spark.SparkException: [FAILED_READ_FILE.NO_HINT] Encountered error while reading file "
            "file:///data/in/b.csv.  SQLSTATE: KD001",
            "Caused by: java.lang.IllegalArgumentException: CSV header does not conform to the schema.",
            " Header: id, w, v",
            " Schema: id, v, w",
            "Expected: v but found: w",
            "CSV file: file:///data/in/b.csv",
        ]
    )
    assert failure_reason(RuntimeError(spark_error)) == (
        "CSV header does not conform to the schema. (file file:///data/in/b.csv; Expected: v but found: w)"
    )

    class JvmGone(Exception):
        def __str__(self) -> str:
            raise ConnectionRefusedError("the gateway is closed")

    assert failure_reason(JvmGone()) == "JvmGone (the JVM ended before it said why)"


def test_a_stream_writers_local_timestamps_are_stored_as_the_instant_they_name(monkeypatch):
    """Found by an outside tester: Spark hands a stream writer naive local datetimes; stored as they
    came, a machine at UTC+5:30 read 12:00Z back as 17:30Z."""
    import datetime
    import time

    from pyspark.sql import Row
    from pyspark.sql.types import ArrayType, LongType, StructField, StructType, TimestampType

    from shardgrid.spark.source import _local_times_to_utc

    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        inner = StructType([StructField("at", TimestampType())])
        schema = StructType(
            [
                StructField("id", LongType()),
                StructField("when", TimestampType()),
                StructField("nested", inner),
                StructField("many", ArrayType(TimestampType())),
            ]
        )
        local_noon = datetime.datetime(2024, 1, 1, 17, 30)  # 12:00 UTC, as Spark shows it at UTC+5:30
        row = Row(id=1, when=local_noon, nested=Row(at=local_noon), many=[local_noon, None])
        converted = _local_times_to_utc(schema)(row)
        noon_utc = datetime.datetime(2024, 1, 1, 12, 0, tzinfo=datetime.UTC)
        assert converted["when"] == noon_utc
        assert converted["nested"]["at"] == noon_utc
        assert converted["many"] == [noon_utc, None]
        assert converted.asDict()["id"] == 1
        assert _local_times_to_utc(StructType([StructField("id", LongType())])) is None
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


_LONGS = st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1))
_CELLS = st.one_of(
    st.none(),
    st.booleans(),
    _LONGS,
    st.integers(2**53 - 2, 2**64 - 1),  # integers a double cannot hold exactly, in a float column too
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.binary(max_size=8),
)


@settings(max_examples=200)
@given(
    keys=st.one_of(
        st.lists(_LONGS, max_size=20, unique=True),
        st.lists(st.text(max_size=12), max_size=20, unique=True),
    ),
    stored=st.lists(st.dictionaries(st.sampled_from(["n", "s", "f", "x"]), _CELLS, max_size=4), max_size=20),
)
def test_the_fast_column_passes_agree_with_the_clients_forms(keys: list, stored: list[dict]) -> None:
    """Keys take one pass for a whole column and values a decoder typed by the schema: the
    keys' bytes must be the client's (``serialize_key``) whatever their width, and entries of other
    types than the columns' must read as the general decode reads them (or fail naming the column)."""
    key_type = pa.int64() if keys and isinstance(keys[0], int) else pa.string()
    schema = pa.schema([("k", key_type), ("n", pa.int64()), ("s", pa.string()), ("f", pa.float64())])
    layout = layout_of(schema, "k", None)
    batch = pa.RecordBatch.from_pydict(
        {"k": keys, "n": [None] * len(keys), "s": [None] * len(keys), "f": [None] * len(keys)}, schema=schema
    )
    encoded_keys, _ = _encoded(layout, batch)
    assert encoded_keys == [serialize_key(key) for key in keys]
    count = min(len(keys), len(stored))
    values = [msgspec.msgpack.encode(entry) for entry in stored[:count]]
    decoder = EntryDecoder(layout, schema)
    general = EntryDecoder(layout, schema)
    general._rows = None  # the general decode alone, as the fast one falls back to
    try:
        expected: object = general.decode(encoded_keys[:count], values).to_pylist()
    except RowError as error:
        expected = error
    if isinstance(expected, RowError):
        with pytest.raises(RowError, match=re.escape(str(expected))):
            decoder.decode(encoded_keys[:count], values)
    else:
        assert decoder.decode(encoded_keys[:count], values).to_pylist() == expected


def test_an_integer_a_double_cannot_hold_is_refused_in_a_float_column_not_rounded() -> None:
    """Found by an outside tester: the typed decode turned 2**53 + 1 into 2**53 in a double column."""
    schema = pa.schema([("k", pa.int64()), ("f", pa.float64())])
    decoder = EntryDecoder(layout_of(schema, "k", None), schema)
    with pytest.raises(RowError, match="column 'f' \\(double\\)"):
        decoder.decode([serialize_key(1)], [msgspec.msgpack.encode({"f": 2**53 + 1})])
    exact = decoder.decode([serialize_key(1)], [msgspec.msgpack.encode({"f": 2**53})])
    assert exact.to_pylist() == [{"k": 1, "f": float(2**53)}]


def test_an_entry_without_a_value_for_a_not_null_column_is_named() -> None:
    """Arrow takes a null into a column declared not null without a word; Spark then failed with
    an error that named neither the column nor the entry."""
    schema = pa.schema([pa.field("k", pa.int64(), False), pa.field("v", pa.string(), False)])
    decoder = EntryDecoder(layout_of(schema, "k", None), schema)
    with pytest.raises(RowError, match="column 'v' is declared not null, but an entry has no value for it"):
        decoder.decode([serialize_key(1), serialize_key(2)], [msgspec.msgpack.encode({"v": "a"}), b"\x80"])
    full = decoder.decode([serialize_key(1)], [msgspec.msgpack.encode({"v": "a"})])
    assert full.to_pylist() == [{"k": 1, "v": "a"}]


def test_a_read_by_value_column_with_other_columns_in_the_schema_is_refused_before_any_task():
    """Found by an outside tester: nothing fills the other columns, and the decode failed with a
    KeyError in the task."""
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType

    from shardgrid.spark.source import ShardgridReader

    read = {"cluster.members": "127.0.0.1:1", "map": "m", "key.column": "k", "value.column": "v"}
    schema = StructType(
        [StructField("k", LongType(), False), StructField("v", BinaryType()), StructField("x", LongType())]
    )
    with pytest.raises(SparkOptionError, match="also has x"):
        ShardgridReader(parse(read, writing=False), schema)
    ShardgridReader(parse(read, writing=False), StructType(schema.fields[:2]))  # key and value: fine


def test_a_ttl_column_is_read_to_the_millisecond_and_a_positive_one_never_to_zero() -> None:
    """Found by an outside tester: 0.0004 s was rounded to 0 ms, which means 'until removed'."""
    import numpy as np

    from shardgrid.spark.columns import RowError, ttls_ms_of

    seconds = pa.array([0.0, 0.0004, 0.0015, 3600.25, 1e-9], pa.float64())
    assert ttls_ms_of(seconds, "ttl").tolist() == [0, 1, 2, 3_600_250, 1]
    assert ttls_ms_of(pa.array([0, 7, 9_000_000_000], pa.int64()), "ttl").tolist() == [0, 7_000, 9_000_000_000_000]
    assert ttls_ms_of([5, 0], "ttl").dtype == np.dtype("<u8")
    for bad in ([None], [-1.0], [float("nan")], [9_000_000_001]):
        with pytest.raises(RowError):
            ttls_ms_of(bad, "ttl")
