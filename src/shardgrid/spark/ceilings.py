"""A data source that takes every row and keeps none: the Python worker's own ceiling for a write
(Arrow batches in, nothing out), measured beside the grid's in ``shardgrid bench pipeline``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType


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
