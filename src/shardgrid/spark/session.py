"""The SparkSession the pipeline commands run on: local Spark by default, any master when asked.

Python workers must run this interpreter (they import shardgrid), so ``PYSPARK_PYTHON`` is set to
it; a local master binds to loopback; the UI and the console progress bar are off (the commands
print their own figures).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import sys
from typing import Any

LOCAL_MASTER = "local[2]"


class SparkUnavailableError(RuntimeError):
    """What this machine lacks to run Spark, said before Spark fails with a JVM trace."""


def check_spark_installed() -> None:
    if importlib.util.find_spec("pyspark") is None or importlib.util.find_spec("pyarrow") is None:
        raise SparkUnavailableError(
            "PySpark and pyarrow are not installed: pip install 'shardgrid[spark]' "
            "(make demo and make test install them)"
        )
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (java_home and os.path.exists(os.path.join(java_home, "bin", "java"))):
        raise SparkUnavailableError(
            "Spark needs Java 17 or newer and there is no java on PATH (nor JAVA_HOME): "
            "install a JRE (Debian: openjdk-17-jre-headless; `make java` does it as root)"
        )


def start_session(master: str | None = None, app_name: str = "shardgrid") -> Any:
    check_spark_installed()
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
    # The commands print the one line that says why a job failed; Spark's own ERROR lines (a JVM
    # trace per failed task, around the Python traceback) buried it.
    session.sparkContext.setLogLevel("FATAL")
    return session


def java_children(parent: int | None = None) -> list[int]:
    """PIDs of the java processes ``parent`` (this process by default) started, from /proc."""
    me = os.getpid() if parent is None else parent
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/comm") as comm:
                name = comm.read().strip()
        except OSError:
            continue  # gone meanwhile
        if int(fields[1]) == me and name == "java":
            found.append(int(entry))
    return found


def start_session_or_end_jvm(master: str | None = None, app_name: str = "shardgrid") -> Any:
    """``start_session``, and when it is interrupted (Ctrl-C) or fails half-way, the JVM it had
    started is ended by its PID. Found by an outside tester: a Ctrl-C while Spark started left the
    JVM running, orphaned, after the command had exited."""
    try:
        return start_session(master, app_name)
    except BaseException:
        for pid in java_children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        raise
