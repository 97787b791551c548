"""One local SparkSession for the Spark tests (starting one takes 5-12 s) and one cluster of
member processes on 127.0.0.1 with a secret, both ended when the tests are done."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..runtime.local_cluster import LocalCluster

pyspark = pytest.importorskip("pyspark")  # installed by the test command (the spark extra)

SECRET = "spark-test-secret"


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from shardgrid.spark.session import start_session

    session = start_session(app_name="shardgrid-tests")  # what the pipeline commands run on
    session.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    yield session
    session.stop()


class KeptSession:
    """The test session, handed to a command, which stops what it started: not this one."""

    def __init__(self, session: object) -> None:
        self._session = session

    def __getattr__(self, name: str) -> object:
        return getattr(self._session, name)

    def stop(self) -> None:
        pass


@pytest.fixture
def commands_on_test_session(spark: object, monkeypatch: pytest.MonkeyPatch) -> object:
    """Commands run in this process (click's runner) on the test session: a command run as its
    own process starts a JVM (15-20 s); the tests that must run one as a user does still do."""
    import shardgrid.spark.session

    monkeypatch.setattr(shardgrid.spark.session, "start_session", lambda *args, **kwargs: KeptSession(spark))
    return spark


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    env = {"SHARDGRID_CLUSTER_SECRET": SECRET}
    with LocalCluster(tmp_path_factory.mktemp("spark-cluster"), 3, env=env) as running:
        running.wait_formed()
        yield running


def options(cluster: LocalCluster, map_name: str, **more: str) -> dict[str, str]:
    return {"cluster.members": ",".join(cluster.addresses), "cluster.secret": SECRET, "map": map_name, **more}
