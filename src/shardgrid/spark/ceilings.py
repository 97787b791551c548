"""Data sources that do no work of their own: the Python worker's ceilings, measured beside the
grid's paths in ``shardgrid bench pipeline``. A write can go no faster than Spark hands Arrow
batches to a Python task (``DiscardDataSource``), a read no faster than Spark takes them back
(``RepeatDataSource``), whatever the task does with the rows."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

REPEAT_BATCH_ROWS = 10_000  # as many rows a batch as the grid's read tasks yield


@dataclass
class Discarded(WriterCommitMessage):
    rows: int


class DiscardWriter(DataSourceArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> Discarded:
        return Discarded(sum(batch.num_rows for batch in iterator))


class DiscardDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "shardgrid-discard"

    def writer(self, schema: StructType, overwrite: bool) -> DiscardWriter:
        return DiscardWriter()


@dataclass(frozen=True)
class RepeatShare(InputPartition):
    rows: int


class RepeatReader(DataSourceReader):
    """``rows`` rows of the schema ``id long, payload string`` (a 100-character payload), split
    over ``tasks`` tasks (as many as the read it is the ceiling of), each yielding one batch built
    once, again and again."""

    def __init__(self, rows: int, tasks: int) -> None:
        self.rows = rows
        self.tasks = tasks

    def partitions(self) -> list[RepeatShare]:
        share, extra = divmod(self.rows, self.tasks)
        return [RepeatShare(share + (1 if task < extra else 0)) for task in range(self.tasks)]

    def read(self, partition: RepeatShare) -> Iterator[pa.RecordBatch]:
        size = min(REPEAT_BATCH_ROWS, partition.rows)
        batch = pa.RecordBatch.from_arrays(
            [pa.array(range(size), pa.int64()), pa.array([f"{i:0100d}" for i in range(size)], pa.string())],
            schema=pa.schema([pa.field("id", pa.int64(), False), pa.field("payload", pa.string())]),
        )
        left = partition.rows
        while left > 0:
            yield batch if left >= size else batch.slice(0, left)
            left -= size


class RepeatDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "shardgrid-repeat"

    def schema(self) -> str:
        return "id long not null, payload string"

    def reader(self, schema: StructType) -> RepeatReader:
        return RepeatReader(int(self.options.get("rows", "0")), max(1, int(self.options.get("tasks", "1"))))
