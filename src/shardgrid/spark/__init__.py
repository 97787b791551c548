"""shardgrid's data source for Spark (``format("shardgrid")``) and the session it runs in.

``register(spark)`` registers it on a session; Spark also finds it by itself through the
``pyspark_shardgrid`` module installed with shardgrid (Spark looks for ``pyspark_*`` modules with
a ``DefaultSource``). Importing this package needs neither Spark nor pyarrow: the source is
imported when it is registered.
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Make ``format("shardgrid")`` available on ``spark`` (a SparkSession)."""
    from shardgrid.spark.source import ShardgridDataSource

    spark.dataSource.register(ShardgridDataSource)
