"""A load on a standalone Spark cluster (a master and a worker started on 127.0.0.1 from the
installed pyspark), so the data source runs in separate executor processes as on a real Spark
cluster. Both are ended by their PIDs, the worker first (it ends its executors)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shardgrid.client import Client

from ..runtime.local_cluster import free_ports
from .conftest import SECRET

ROWS = 50_000


def _spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def _end(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[str]:
    master_port, master_ui, worker_ui = free_ports(3)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    url = f"spark://127.0.0.1:{master_port}"
    spark_class = str(_spark_class())
    with (tmp_path / "master.log").open("wb") as master_log, (tmp_path / "worker.log").open("wb") as worker_log:
        master = subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(master_port), "--webui-port", str(master_ui)],
            stdout=master_log, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
        worker = subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", "2",
             "--memory", "1g", "--webui-port", str(worker_ui), "--work-dir", str(tmp_path / "work")],
            stdout=worker_log, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 90
            while b"Successfully registered with master" not in (tmp_path / "worker.log").read_bytes():
                assert worker.poll() is None, (tmp_path / "worker.log").read_text(errors="replace")[-3000:]
                assert time.monotonic() < deadline, "the worker did not register with the master"
                time.sleep(0.2)
            yield url
        finally:
            _end(worker)
            _end(master)


def test_a_load_on_a_standalone_spark_cluster(spark, cluster, standalone, tmp_path):
    spark.range(ROWS).selectExpr("id", "concat('s-', id) as label").write.parquet(str(tmp_path / "in.parquet"))
    env = {**os.environ, "SHARDGRID_CLUSTER_SECRET": SECRET, "SHARDGRID_MEMBERS": ",".join(cluster.addresses)}
    done = subprocess.run(
        [sys.executable, "-m", "shardgrid", "pipeline", "load", "--input", str(tmp_path / "in.parquet"),
         "--map", "standalone", "--key", "id", "--spark-master", standalone],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"loaded into map 'standalone': {ROWS:,} rows" in done.stdout
    with Client(cluster.addresses, cluster_secret=SECRET) as client:
        data = client.get_map("standalone", key_type=int)
        assert data.size() == ROWS
        assert data.get(123) == {"label": "s-123"}
