"""The SparkSession the pipeline commands run on: local Spark by default, any master when asked.

Python workers must run this interpreter (they import shardgrid), so ``PYSPARK_PYTHON`` is set to
it; a local master binds to loopback; the UI and the console progress bar are off (the commands
print their own figures).
"""

from __future__ import annotations

import os
import sys
from typing import Any

LOCAL_MASTER = "local[2]"


def start_session(master: str | None = None, app_name: str = "shardgrid") -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    chosen = master or LOCAL_MASTER
    if chosen.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master(chosen)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session
