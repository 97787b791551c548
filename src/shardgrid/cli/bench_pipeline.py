"""``shardgrid bench pipeline``: load and export through the data source against Parquet.

One run, one Spark session (local[2]), one 3-member cluster of member processes on 127.0.0.1
(backup count 1): ROWS rows of a 100-byte payload are written to Parquet first (the input of every
write below, so generating them is not timed), then timed, each on its own:
- Parquet write and the grid load (put_all through the data source), and a data source that
  discards what it is given (the Python worker's ceiling for a write);
- Parquet read and the grid export (the data source's read), each into Spark's no-op sink.
Targets: the load reaches half the Parquet write's rows/s and the export half the Parquet read's.
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


def _timed(rows: int, action: Any) -> dict[str, Any]:
    started = time.monotonic()
    action()
    seconds = time.monotonic() - started
    return {"seconds": round(seconds, 2), "rows_per_s": round(rows / seconds)}


def run_pipeline_bench(rows: int) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="shardgrid-bench-pipeline-"))
    cluster = Cluster(workdir)
    report: dict[str, Any] = {"rows": rows, "payload_bytes": 100, "logs": str(workdir)}
    from shardgrid.spark.discard import DiscardDataSource
    from shardgrid.spark.session import start_session_or_end_jvm

    spark = start_session_or_end_jvm(app_name="shardgrid bench pipeline")
    try:
        spark.dataSource.register(DiscardDataSource)
        addresses = loopback_addresses(PIPELINE_FIRST_PORT, 3)
        for address in addresses:
            cluster.start(address, addresses, 3, 1)
        wait_until_formed(cluster.members, 60, workdir)
        source_path = str(workdir / "source.parquet")
        spark.range(rows).selectExpr(
            "id", "substr(concat(sha2(cast(id as string), 512), sha2(cast(id as string), 256)), 1, 100) as payload"
        ).write.parquet(source_path)
        source = spark.read.parquet(source_path)
        grid = {"cluster.members": ",".join(addresses), "map": "bench", "key.column": "id"}
        report["parquet_write"] = _timed(rows, lambda: source.write.mode("overwrite").parquet(str(workdir / "copy")))
        report["grid_load"] = _timed(
            rows, lambda: source.write.format("shardgrid").options(**grid).mode("append").save()
        )
        report["discard_write"] = _timed(rows, lambda: source.write.format("shardgrid-discard").mode("append").save())
        copy = str(workdir / "copy")
        report["parquet_read"] = _timed(
            rows, lambda: spark.read.parquet(copy).write.format("noop").mode("overwrite").save()
        )
        exported = spark.read.format("shardgrid").options(**grid).schema(SCHEMA)
        report["grid_export"] = _timed(rows, lambda: exported.load().write.format("noop").mode("overwrite").save())
        report["grid_rows_read_back"] = exported.load().count()
    finally:
        spark.stop()
        cluster.end_all()
        shutil.rmtree(workdir / "copy", ignore_errors=True)
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
