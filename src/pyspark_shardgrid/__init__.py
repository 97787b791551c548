"""Found by Spark's lookup of Python data sources (a ``pyspark_*`` module with a ``DefaultSource``):
with shardgrid installed, ``format("shardgrid")`` works without registering it first."""

from shardgrid.spark.source import ShardgridDataSource as DefaultSource

__all__ = ["DefaultSource"]
