"""The ``shardgrid`` data source for Spark: batch write (Arrow), batch read, and a stream writer.

Spark runs this code in Python workers: ``DataSource`` methods on the driver's side (checking the
options, the schema and that the cluster answers, so a mistake fails the job before any task
runs), readers and writers pickled to the tasks. A task opens one client of its own and drives it
on a private event loop; routing to owners, retries through migrations and crashes, and batching
per owner are the client's. Spark ignores preferred locations for Python sources, so a read task is
a group of grid partitions (by default those of one member), never one task per grid partition
(each task costs about 30 ms).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql import Row
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamWriter,
    EqualTo,
    Filter,
    In,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from shardgrid.client import AsyncClient
from shardgrid.client.aio import PackedEntries
from shardgrid.client.encoded_columns import EncodedColumns
from shardgrid.client.errors import ShardgridClientError
from shardgrid.core import messages as m
from shardgrid.core.errors import ConfigError
from shardgrid.runtime import event_loops
from shardgrid.runtime.allocator import keep_freed_memory
from shardgrid.spark.columns import (
    PLAIN_VALUE_COLUMN,
    EntryDecoder,
    Layout,
    RowEncoder,
    key_serializer,
    layout_of,
    spark_type_name_of,
)
from shardgrid.spark.held_entries import HeldEntries
from shardgrid.spark.options import KeyType, SourceOptions, SparkOptionError, WriteMode, parse
from shardgrid.spark.owner_batches import OwnerBatches, Rows

SOURCE_NAME = "shardgrid"
SCAN_AHEAD_PARTITIONS = 4  # grid partitions a read task fetches ahead of the one it yields
# Rows per Arrow batch a read task yields: each batch crossing to the JVM has a cost of its own
# (batches of 1,000 rows read about 25% slower here than batches of 10,000), and so does each parse
# of one (``column_decoding``: 130 ns a row at 10,000 rows, 95-105 from 25,000 up). At 32,768 a
# read task's CPU in an export of 1,000,000 rows fell from 0.23-0.25 s to 0.20-0.225; a batch of
# ``id long, payload string`` (100 characters) is then about 4 MB.
ARROW_BATCH_ROWS = 32_768
T = TypeVar("T")
# What a sampled value infers (``columns.spark_type_name_of``), and each key type's column.
SPARK_TYPES: dict[str, DataType] = {
    "boolean": BooleanType(),
    "bigint": LongType(),
    "double": DoubleType(),
    "string": StringType(),
    "binary": BinaryType(),
    "timestamp": TimestampType(),
}
KEY_TYPE_NAMES = {KeyType.STRING: "string", KeyType.LONG: "bigint", KeyType.BINARY: "binary"}


class ClusterError(RuntimeError):
    """The cluster could not be reached or refused this client; the message says how to fix it."""


def _client(options: SourceOptions) -> AsyncClient:
    connection = options.connection
    return AsyncClient(
        list(connection.members),
        connection.cluster_name,
        connection.cluster_secret,
        operation_call_timeout_ms=connection.operation_timeout_ms,
        tls_ca_file=connection.tls_ca_file,
        tls_cert_file=connection.tls_cert_file,
        tls_key_file=connection.tls_key_file,
    )


def _with_client(options: SourceOptions, work: Callable[[AsyncClient], Awaitable[T]]) -> T:
    """``work`` on a connected client, on a loop of its own (Spark's Python workers run none)."""

    async def run() -> T:
        try:
            client = _client(options)
        except (ConfigError, OSError, ValueError) as error:
            raise SparkOptionError(
                f"shardgrid: the connection options (cluster.*, tls.*) cannot be used: {error}"
            ) from None
        try:
            await client.connect()
            await client.refresh_table()
        except ShardgridClientError as error:
            await client.close()
            members = ",".join(options.connection.members)
            raise ClusterError(
                f"shardgrid: cannot use the cluster at {members} (option 'cluster.members'): {error}"
            ) from None
        try:
            return await work(client)
        finally:
            await client.close()

    return event_loops.run(run())


# --- the data source ---------------------------------------------------------------------------


class ShardgridDataSource(DataSource):
    """``spark.read.format("shardgrid")`` / ``df.write.format("shardgrid")``; options in
    ``shardgrid.spark.options``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        """No schema given: one inferred from a sample of the map's entries."""
        options = parse(self.options, writing=False)
        key_column = options.key_column or "key"
        key_type = SPARK_TYPES[KEY_TYPE_NAMES[options.key_type]]
        if options.value_column is not None:
            value = StructField(options.value_column, BinaryType())
            return StructType([StructField(key_column, key_type, False), value])
        sample = _with_client(options, lambda client: _sample(client, options))
        if not sample:
            raise SparkOptionError(
                f"shardgrid: map '{options.map_name}' has no entries to infer a schema from: give one with .schema()"
            )
        fields: dict[str, str | None] = {}
        if all(isinstance(value, dict) for value in sample):
            for entry in sample:
                for name, value in entry.items():
                    if not isinstance(name, str) or name == key_column:
                        continue
                    typed = spark_type_name_of(value)
                    if fields.get(name) is None:
                        fields[name] = typed
        else:
            for value in sample:
                typed = spark_type_name_of(value)
                if fields.get(PLAIN_VALUE_COLUMN) is None:
                    fields[PLAIN_VALUE_COLUMN] = typed
        struct = [StructField(key_column, key_type, False)]
        struct += [StructField(name, SPARK_TYPES[typed or "string"]) for name, typed in fields.items()]
        return StructType(struct)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse(self.options, writing=False)
        # Spark refuses a reader with pushFilters unless its pushdown setting is on: opt in.
        return (ShardgridKeyReader if options.read_pushdown else ShardgridReader)(options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> ShardgridWriter:
        options = parse(self.options, writing=True)
        layout = _write_layout(options, schema)
        _check_report_file(options)
        if overwrite and not options.confirm_truncate:
            raise SparkOptionError(
                f"shardgrid: save mode overwrite clears map '{options.map_name}' first; say so with "
                ".option('confirm.truncate', 'true'), or use mode append"
            )
        cleared = _with_client(options, lambda client: _clear(client, options.map_name) if overwrite else _nothing())
        if overwrite:
            print(f"shardgrid: cleared map '{options.map_name}' ({cleared} entries) before the write", file=sys.stderr)
        return ShardgridWriter(options, layout)

    def streamWriter(self, schema: StructType, overwrite: bool) -> ShardgridStreamWriter:
        options = parse(self.options, writing=True)
        layout = _write_layout(options, schema)
        _with_client(options, lambda client: _nothing())
        return ShardgridStreamWriter(options, layout, schema)


async def _nothing() -> int:
    return 0


async def _clear(client: AsyncClient, map_name: str) -> int:
    return await client.get_map(map_name, key_type=bytes).clear()


async def _sample(client: AsyncClient, options: SourceOptions) -> list[Any]:
    """Up to ``infer.sample.size`` values, decoded, from the first partitions holding any."""
    import msgspec

    decode = msgspec.msgpack.Decoder().decode
    found: list[Any] = []
    for pid in range(await client.partition_count()):
        _, values = await client.scan_partition(options.map_name, pid)
        found += [decode(value) for value in values[: options.infer_sample_size - len(found)]]
        if len(found) >= options.infer_sample_size:
            break
    return found


def _check_report_file(options: SourceOptions) -> None:
    """Before any task writes: a report the commit could not write would fail a finished job."""
    if options.write_report_file is None:
        return
    folder = Path(options.write_report_file).parent
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise SparkOptionError(f"shardgrid: option 'write.report.file': {folder} is not a folder this job can write to")


def _write_layout(options: SourceOptions, schema: StructType) -> Layout:
    if options.key_column is None:  # parse() requires it for a write
        raise SparkOptionError("shardgrid: option 'key.column' is required to write")
    return layout_of(
        to_arrow_schema(schema, timezone="UTC"), options.key_column, options.value_column, options.ttl_column
    )


# --- writing -----------------------------------------------------------------------------------


@dataclass
class WriteReport(WriterCommitMessage):
    """What one task wrote: the driver adds them up at commit (or abort)."""

    rows: int
    key_bytes: int
    value_bytes: int
    seconds: float


async def _write_batches(client: AsyncClient, options: SourceOptions, chunks: Iterator[Rows]) -> WriteReport:
    """The task's rows, grouped per owner into put_all batches of ``write.batch.size`` rows
    (``owner_batches``), up to ``write.concurrency`` batches in flight at once; the first failure
    ends the task (its batches' retries through migrations and crashes are the client's)."""
    started = time.monotonic()
    in_flight: set[asyncio.Task[Any]] = set()
    kind = m.PUT_IF_ABSENT if options.write_mode is WriteMode.PUT_IF_ABSENT else m.PUT
    grouped = OwnerBatches(client.table, options.write_batch_size)

    async def send(batches: list[EncodedColumns]) -> None:
        nonlocal in_flight
        for batch in batches:
            while len(in_flight) >= options.write_concurrency:
                done, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()
            in_flight.add(
                asyncio.ensure_future(client.put_encoded(kind, options.map_name, batch, ttl_ms=options.write_ttl_ms))
            )

    try:
        for keys, values, ttls_ms in chunks:
            await send(grouped.add(keys, values, ttls_ms))
        await send(grouped.rest())
        for task in asyncio.as_completed(in_flight):
            await task
    finally:
        for task in in_flight:
            task.cancel()
    seconds = time.monotonic() - started
    return WriteReport(grouped.rows_taken, grouped.key_bytes_taken, grouped.value_bytes_taken, seconds)


def _report(messages: Sequence[WriterCommitMessage | None], outcome: str, options: SourceOptions) -> None:
    reports = [message for message in messages if isinstance(message, WriteReport)]
    summary = {
        "map": options.map_name,
        "outcome": outcome,
        "tasks": len(reports),
        "rows": sum(r.rows for r in reports),
        "bytes": sum(r.key_bytes + r.value_bytes for r in reports),
    }
    print(f"shardgrid: {json.dumps(summary)}", file=sys.stderr)
    if options.write_report_file is not None:
        Path(options.write_report_file).write_text(json.dumps(summary))


class ShardgridWriter(DataSourceArrowWriter):
    def __init__(self, options: SourceOptions, layout: Layout) -> None:
        self.options = options
        self.layout = layout

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteReport:
        keep_freed_memory()
        encoder = RowEncoder(self.layout)

        def batches() -> Iterator[Rows]:
            for batch in iterator:  # Spark's Arrow batches: spark.sql.execution.arrow.maxRecordsPerBatch rows
                yield (*encoder.encode_batch(batch), encoder.ttls_of_batch(batch))

        return _with_client(self.options, lambda client: _write_batches(client, self.options, batches()))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _report(messages, "committed", self.options)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # Nothing to undo: what was acknowledged is in the map (a retried task rewrites its rows).
        # Only tasks that finished report: rows a failed task had written (they stay) are not counted.
        _report(
            messages, "aborted; the rows written stay in the map (failed tasks' rows are not counted)", self.options
        )


class ShardgridStreamWriter(DataSourceStreamWriter):
    """Each micro-batch's rows put by key: a batch replayed after a failure rewrites the same
    keys with the same values, so the map ends as if every batch were written once."""

    def __init__(self, options: SourceOptions, layout: Layout, schema: StructType) -> None:
        self.options = options
        self.layout = layout
        self.schema = schema

    def write(self, iterator: Iterator[Any]) -> WriteReport:
        keep_freed_memory()
        encoder = RowEncoder(self.layout)
        size = self.options.write_batch_size
        to_utc = _local_times_to_utc(self.schema)

        def batches() -> Iterator[Rows]:
            rows: list[Any] = []
            for row in iterator:
                rows.append(to_utc(row) if to_utc is not None else row)
                if len(rows) >= size:
                    yield (*encoder.encode_rows(rows), encoder.ttls_of_rows(rows))
                    rows = []
            if rows:
                yield (*encoder.encode_rows(rows), encoder.ttls_of_rows(rows))

        return _with_client(self.options, lambda client: _write_batches(client, self.options, batches()))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _report(messages, f"micro-batch {batchId} committed", self.options)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _report(messages, f"micro-batch {batchId} aborted (it is replayed from the checkpoint)", self.options)


def _utc(value: Any, kind: DataType) -> Any:
    if value is None:
        return None
    if isinstance(kind, TimestampType):
        return value.astimezone(datetime.UTC)  # naive: this machine's local time, as Spark made it
    if isinstance(kind, StructType):
        return Row(**{f.name: _utc(value[f.name], f.dataType) for f in kind.fields})
    if isinstance(kind, ArrayType):
        return [_utc(item, kind.elementType) for item in value]
    return value


def _holds_timestamp(kind: DataType) -> bool:
    if isinstance(kind, TimestampType):
        return True
    if isinstance(kind, StructType):
        return any(_holds_timestamp(f.dataType) for f in kind.fields)
    return isinstance(kind, ArrayType) and _holds_timestamp(kind.elementType)


def _local_times_to_utc(schema: StructType) -> Callable[[Any], Any] | None:
    """Spark hands a stream writer its timestamps as naive datetimes in the machine's local time
    (the batch writer gets Arrow's, in UTC). Found by an outside tester: stored as they came, they
    read back shifted by the machine's UTC offset. This makes them aware UTC datetimes, stored as
    the batch writer stores its own; None when the schema holds no timestamp."""
    if not _holds_timestamp(schema):
        return None
    return lambda row: _utc(row, schema)


# --- reading -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class GridPartitions(InputPartition):
    """What one read task reads: whole grid partitions, or (a pushed-down key filter) keys."""

    partition_ids: tuple[int, ...]
    keys: tuple[Any, ...] | None = None


class ShardgridReader(DataSourceReader):
    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        key_column = options.key_column or "key"
        if key_column not in self.arrow_schema.names:
            raise SparkOptionError(
                f"shardgrid: option 'key.column': no column '{key_column}' in the schema "
                f"(columns: {', '.join(self.arrow_schema.names)}); name the key column with it"
            )
        self.layout = layout_of(self.arrow_schema, key_column, options.value_column)
        others = [name for name in self.arrow_schema.names if name not in (key_column, options.value_column)]
        if options.value_column is not None and others:
            # Found by an outside tester: nothing fills them, and the decode failed with a KeyError.
            raise SparkOptionError(
                f"shardgrid: option 'value.column': an entry read this way holds the key and the value only, "
                f"but the schema also has {', '.join(others)}; drop those columns from the schema"
            )
        self.keys: tuple[Any, ...] | None = None

    def partitions(self) -> list[GridPartitions]:
        if self.keys is not None:
            return [GridPartitions((), self.keys)]
        owners = _with_client(self.options, _owners)
        by_member: dict[str, list[int]] = {}
        for pid, owner in enumerate(owners):
            by_member.setdefault(owner or "", []).append(pid)
        groups = [tuple(pids) for _, pids in sorted(by_member.items())]
        tasks = self.options.read_tasks
        if tasks is not None:
            every = [pid for group in groups for pid in group]
            groups = [tuple(every[i::tasks]) for i in range(min(tasks, len(every)))]
        return [GridPartitions(group) for group in groups if group]

    def read(self, partition: GridPartitions) -> Iterator[pa.RecordBatch]:
        keep_freed_memory()
        decoder = EntryDecoder(self.layout, self.arrow_schema)
        options = self.options
        loop = event_loops.new_event_loop()
        client = _client(options)
        try:
            loop.run_until_complete(client.connect())
            if partition.keys is not None:
                yield from self._read_keys(loop, client, decoder, partition.keys)
                return
            pending = list(partition.partition_ids)
            ahead: list[asyncio.Future[PackedEntries]] = []
            page = options.read_batch_size
            held = HeldEntries()
            while pending or ahead:
                while pending and len(ahead) < SCAN_AHEAD_PARTITIONS:
                    scan = client.scan_partition_packed(options.map_name, pending.pop(0), page_entries=page)
                    ahead.append(asyncio.ensure_future(scan, loop=loop))
                held.add(loop.run_until_complete(ahead.pop(0)))
                while ahead and ahead[0].done():  # come in meanwhile: no turn of the loop for them
                    held.add(ahead.pop(0).result())
                while held.rows >= ARROW_BATCH_ROWS:
                    yield decoder.decode(*held.take(ARROW_BATCH_ROWS))
            if held.rows:
                yield decoder.decode(*held.take(held.rows))
        except ShardgridClientError as error:
            raise ClusterError(f"shardgrid: reading map '{options.map_name}': {error}") from None
        finally:
            loop.run_until_complete(client.close())
            loop.close()

    def _read_keys(
        self, loop: asyncio.AbstractEventLoop, client: AsyncClient, decoder: EntryDecoder, wanted: tuple[Any, ...]
    ) -> Iterator[pa.RecordBatch]:
        serializer = key_serializer(self.layout.key_type)
        keys = []
        for key in dict.fromkeys(wanted):
            try:
                keys.append(serializer.dumps(key))
            except (TypeError, ValueError):
                continue  # a key of another type matches no entry
        values = loop.run_until_complete(client.map_call(m.GET, self.options.map_name, keys))
        found = [(key, value) for key, value in zip(keys, values, strict=True) if value is not None]
        if found:
            yield decoder.decode([key for key, _ in found], [value for _, value in found])


class ShardgridKeyReader(ShardgridReader):
    """A reader that takes key filters (``read.pushdown``): they become one get_all.

    Spark 4.3 keeps the plan of the last query it pushed filters into for later queries of the same
    DataFrame that have none: after ``df.where("id = 1")``, ``df.count()`` on that ``df`` counts one
    row. Load the map again for another query (the README says so too)."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """``key = v`` and ``key IN (...)`` become a get_all of those keys; the rest Spark checks."""
        column = (self.layout.key_column,)
        self.keys = None
        for condition in filters:
            if isinstance(condition, EqualTo) and condition.attribute == column:
                wanted = (condition.value,)
            elif isinstance(condition, In) and condition.attribute == column:
                wanted = tuple(condition.value)
            else:
                yield condition
                continue
            if self.keys is None:
                self.keys = wanted
            else:
                allowed = set(wanted)  # built once, not once per key kept
                self.keys = tuple(k for k in self.keys if k in allowed)


async def _owners(client: AsyncClient) -> list[str | None]:
    return list(client.table.owners)
