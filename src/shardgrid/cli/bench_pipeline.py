"""``shardgrid bench pipeline``: load and export through the data source against Parquet.

One run, one Spark session (local[2]), one 3-member cluster of member processes on 127.0.0.1
(backup count 1): ROWS rows of a 100-byte payload are written to Parquet first (the input of every
write below, so generating them is not timed), then timed, each on its own:
- Parquet write and the grid load (put_all through the data source), and a data source that
  discards what it is given (the Python worker's ceiling for a write);
- Parquet read and the grid export (the data source's read, as ``pipeline export`` reads), and
  a data source that yields one ready batch again and again with as many tasks as the export
  (the Python worker's ceiling for a read), each into Spark's no-op sink.
Targets: the load reaches half the Parquet write's rows/s and the export half the Parquet read's.

Each path first runs once on WARM_UP_ROWS rows, timed apart as ``first_job_seconds``. The first job
of a Python data source in a session starts a Python daemon for each of Spark's steps (planning the
write, the tasks, the commit; planning the read): 5-6 s on this machine for each data source and
direction, whatever the row count. That is a cost per command, not per row: the rates compare the
runs after it, as the Parquet paths run on a JVM already warm.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from shardgrid.cli.bench_cluster import Cluster
from shardgrid.cli.local_cluster import loopback_addresses, wait_until_formed

SHARE_TARGET = 0.5
PIPELINE_FIRST_PORT = 5901  # apart from bench cluster's 5801 on: two benches may run at once
SCHEMA = "id long, payload string"
WARM_UP_ROWS = 1_000


def _timed(rows: int, action: Any) -> dict[str, Any]:
    """``action(WARM_UP_ROWS)`` once (its time apart), then ``action(rows)`` timed."""
    started = time.monotonic()
    action(WARM_UP_ROWS)
    first_job_seconds = time.monotonic() - started
    started = time.monotonic()
    action(rows)
    seconds = time.monotonic() - started
    return {
        "seconds": round(seconds, 2),
        "rows_per_s": round(rows / seconds),
        "first_job_seconds": round(first_job_seconds, 2),
    }


def run_pipeline_bench(rows: int) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="shardgrid-bench-pipeline-"))
    cluster = Cluster(workdir)
    report: dict[str, Any] = {"rows": rows, "payload_bytes": 100, "logs": str(workdir)}
    from shardgrid.spark.ceilings import DiscardDataSource, RepeatDataSource
    from shardgrid.spark.jobs import read_map
    from shardgrid.spark.session import start_session_or_end_jvm

    spark = start_session_or_end_jvm(app_name="shardgrid bench pipeline")
    try:
        spark.dataSource.register(DiscardDataSource)
        spark.dataSource.register(RepeatDataSource)
        addresses = loopback_addresses(PIPELINE_FIRST_PORT, 3)
        for address in addresses:
            cluster.start(address, addresses, 3, 1)
        wait_until_formed(cluster.members, 60, workdir)
        source_path = str(workdir / "source.parquet")
        spark.range(rows).selectExpr(
            "id", "substr(concat(sha2(cast(id as string), 512), sha2(cast(id as string), 256)), 1, 100) as payload"
        ).write.parquet(source_path)
        source = spark.read.parquet(source_path)
        grid = {"cluster.members": ",".join(addresses), "key.column": "id"}
        copy = str(workdir / "copy")

        def rows_of(count: int) -> Any:
            return source if count == rows else source.limit(count)

        report["parquet_write"] = _timed(
            rows, lambda count: rows_of(count).write.mode("overwrite").parquet(f"{copy}-{count}")
        )
        # The warm-up goes to a map of its own, so the export below reads the timed load's rows only.
        report["grid_load"] = _timed(
            rows,
            lambda count: (
                rows_of(count).write.format("shardgrid").options(**grid, map=f"bench-{count}").mode("append").save()
            ),
        )
        report["discard_write"] = _timed(
            rows, lambda count: rows_of(count).write.format("shardgrid-discard").mode("append").save()
        )
        report["parquet_read"] = _timed(
            rows, lambda count: spark.read.parquet(f"{copy}-{count}").write.format("noop").mode("overwrite").save()
        )

        def exported(count: int) -> Any:
            # As ``pipeline export`` reads it: one task per core Spark has.
            return read_map(spark, grid, f"bench-{count}", "id", "long", SCHEMA)

        report["grid_export"] = _timed(
            rows, lambda count: exported(count).write.format("noop").mode("overwrite").save()
        )
        report["repeat_read"] = _timed(
            rows,
            lambda count: (
                spark.read.format("shardgrid-repeat")
                .option("rows", str(count))
                .option("tasks", str(spark.sparkContext.defaultParallelism))  # as the export reads
                .load()
                .write.format("noop")
                .mode("overwrite")
                .save()
            ),
        )
        report["grid_rows_read_back"] = exported(rows).count()
    finally:
        spark.stop()
        cluster.end_all()
        for copied in workdir.glob("copy-*"):
            shutil.rmtree(copied, ignore_errors=True)
        shutil.rmtree(workdir / "source.parquet", ignore_errors=True)
    load_share = report["grid_load"]["rows_per_s"] / report["parquet_write"]["rows_per_s"]
    export_share = report["grid_export"]["rows_per_s"] / report["parquet_read"]["rows_per_s"]
    report["targets"] = {
        "load_share_of_parquet_write": {
            "value": round(load_share, 2),
            "target": SHARE_TARGET,
            "met": load_share >= SHARE_TARGET,
        },
        "export_share_of_parquet_read": {
            "value": round(export_share, 2),
            "target": SHARE_TARGET,
            "met": export_share >= SHARE_TARGET,
        },
        "every_row_read_back": {
            "value": report["grid_rows_read_back"],
            "target": rows,
            "met": report["grid_rows_read_back"] == rows,
        },
    }
    report["targets"]["all_met"] = all(check["met"] for check in report["targets"].values() if isinstance(check, dict))
    return report
