"""The shardgrid data source on a local SparkSession against member processes on 127.0.0.1."""

from __future__ import annotations

import re
import threading
import time

import pytest

from shardgrid.client import Client

from .conftest import SECRET, options

ROWS = 200_000


def _users(spark, rows: int):
    return spark.range(rows).selectExpr(
        "id",
        "concat('user-', id) as name",
        "cast(id as double) * 2.5 as score",
        "cast(id * 3 as decimal(20, 2)) as amount",
        "date_add(date'2024-01-01', cast(id % 1000 as int)) as day",
    )


def _read(spark, cluster, map_name: str, schema=None, **more: str):
    reader = spark.read.format("shardgrid").options(**options(cluster, map_name, **more))
    return (reader.schema(schema) if schema is not None else reader).load()


def test_a_write_then_a_read_round_trips_every_row_exactly(spark, cluster):
    users = _users(spark, ROWS)
    users.write.format("shardgrid").options(**options(cluster, "users", **{"key.column": "id"})).mode("append").save()
    back = _read(spark, cluster, "users", users.schema, **{"key.column": "id"})
    assert back.count() == ROWS
    assert users.exceptAll(back).count() == 0
    assert back.exceptAll(users).count() == 0
    with Client(cluster.addresses, cluster_secret=SECRET) as client:  # what Spark wrote, a client reads
        assert client.get_map("users", key_type=int).get(42) == {
            "name": "user-42",
            "score": 105.0,
            "amount": "126.00",
            "day": "2024-02-12",
        }
    inferred = _read(spark, cluster, "users", **{"key.column": "id", "key.type": "long"})
    assert inferred.schema.simpleString() == "struct<id:bigint,name:string,score:double,amount:string,day:string>"


def test_key_filters_are_read_with_get_all(spark, cluster):
    spark.range(1_000).selectExpr("id", "id * 10 as tenfold").write.format("shardgrid").options(
        **options(cluster, "keyed", **{"key.column": "id"})
    ).mode("append").save()
    more = {"key.column": "id", "read.pushdown": "true"}
    one = _read(spark, cluster, "keyed", "id long, tenfold long", **more).where("id = 42")
    assert [tuple(row) for row in one.collect()] == [(42, 420)]
    some = _read(spark, cluster, "keyed", "id long, tenfold long", **more).where("id in (1, 2, 5000)")
    assert sorted(tuple(row) for row in some.collect()) == [(1, 10), (2, 20)]


def test_a_value_column_is_stored_as_it_is(spark, cluster):
    frame = spark.createDataFrame([("a", b"\x00\x01"), ("b", b"")], "k string, blob binary")
    frame.write.format("shardgrid").options(
        **options(cluster, "blobs", **{"key.column": "k", "value.column": "blob"})
    ).mode("append").save()
    with Client(cluster.addresses, cluster_secret=SECRET) as client:
        from shardgrid.client import BytesSerializer

        assert client.get_map("blobs", value_serializer=BytesSerializer()).get_all(["a", "b"]) == {
            "a": b"\x00\x01",
            "b": b"",
        }
    back = _read(spark, cluster, "blobs", **{"key.column": "k", "value.column": "blob"})
    assert sorted((row.k, bytes(row.blob)) for row in back.collect()) == [("a", b"\x00\x01"), ("b", b"")]


def test_write_ttl_seconds_makes_the_written_rows_expire(spark, cluster):
    frame = spark.createDataFrame([(1, "a"), (2, "b")], "id long, v string")
    frame.write.format("shardgrid").options(
        **options(cluster, "expiring", **{"key.column": "id", "write.ttl.seconds": "6"})
    ).mode("append").save()
    written = time.monotonic()
    spark.createDataFrame([(3, "c")], "id long, v string").write.format("shardgrid").options(
        **options(cluster, "expiring", **{"key.column": "id", "write.ttl.seconds": "0"})
    ).mode("append").save()

    def ids() -> list[int]:
        read = _read(spark, cluster, "expiring", "id long, v string", **{"key.column": "id"})
        return sorted(row.id for row in read.collect())

    with Client(cluster.addresses, cluster_secret=SECRET) as client:
        assert sorted(client.get_map("expiring", key_type=int).get_all([1, 2, 3])) == [1, 2, 3]
    time.sleep(max(0.0, 6.2 - (time.monotonic() - written)))
    assert ids() == [3]  # an expired entry is never read back
    with pytest.raises(Exception, match=r"write\.ttl\.seconds"):
        frame.write.format("shardgrid").options(
            **options(cluster, "expiring", **{"key.column": "id", "write.ttl.seconds": "-1"})
        ).mode("append").save()


def test_a_ttl_column_gives_each_row_its_own_expiry_and_is_not_stored(spark, cluster):
    frame = spark.createDataFrame([(1, "a", 5.0), (2, "b", 0.0), (3, "c", 3600.25)], "id long, v string, ttl double")
    frame.write.format("shardgrid").options(
        **options(cluster, "own-ttls", **{"key.column": "id", "ttl.column": "ttl"})
    ).mode("append").save()
    with Client(cluster.addresses, cluster_secret=SECRET) as client:
        held = client.get_map("own-ttls", key_type=int)
        assert held.get(1) == {"v": "a"}  # the TTL column sets the expiry, and is not in the value
        lives = {}
        for key in (1, 2, 3):
            view = held.get_entry_view(key)
            lives[key] = view.expire_at_ms - view.updated_ms if view.expire_at_ms else 0
        assert lives == {1: 5_000, 2: 0, 3: 3_600_250}
    nulls = spark.createDataFrame([(4, "d", None)], "id long, v string, ttl long")
    with pytest.raises(Exception, match="null TTL"):
        nulls.write.format("shardgrid").options(
            **options(cluster, "own-ttls", **{"key.column": "id", "ttl.column": "ttl"})
        ).mode("append").save()
    with pytest.raises(Exception, match="exclude each other"):
        frame.write.format("shardgrid").options(
            **options(cluster, "own-ttls", **{"key.column": "id", "ttl.column": "ttl", "write.ttl.seconds": "1"})
        ).mode("append").save()


def test_put_if_absent_keeps_what_is_there_and_overwrite_needs_confirming(spark, cluster):
    write = {"key.column": "id", "write.mode": "put_if_absent"}
    spark.createDataFrame([(1, "a"), (2, "b")], "id long, v string").write.format("shardgrid").options(
        **options(cluster, "modes", **write)
    ).mode("append").save()
    spark.createDataFrame([(1, "x"), (3, "c")], "id long, v string").write.format("shardgrid").options(
        **options(cluster, "modes", **write)
    ).mode("append").save()
    read = _read(spark, cluster, "modes", "id long, v string", **{"key.column": "id"})
    assert sorted(tuple(row) for row in read.collect()) == [(1, "a"), (2, "b"), (3, "c")]
    replacement = spark.createDataFrame([(9, "z")], "id long, v string")
    with pytest.raises(Exception, match=r"confirm\.truncate"):
        replacement.write.format("shardgrid").options(**options(cluster, "modes", **{"key.column": "id"})).mode(
            "overwrite"
        ).save()
    replacement.write.format("shardgrid").options(
        **options(cluster, "modes", **{"key.column": "id", "confirm.truncate": "true"})
    ).mode("overwrite").save()
    read = _read(spark, cluster, "modes", "id long, v string", **{"key.column": "id"})
    assert [tuple(row) for row in read.collect()] == [(9, "z")]


@pytest.mark.parametrize(
    ("more", "expected"),
    [
        ({}, "option 'key.column' is required"),
        ({"key.column": "nope"}, "no column 'nope' in the schema"),
        ({"key.column": "id", "write.batch.size": "0"}, "'write.batch.size': expected an integer from 1"),
        ({"key.column": "id", "wrte.mode": "put"}, "unknown option 'wrte.mode'; did you mean 'write.mode'"),
        ({"key.column": "id", "cluster.members": "127.0.0.1:1"}, "cannot use the cluster at 127.0.0.1:1"),
        ({"key.column": "id", "cluster.secret": "wrong"}, "cannot use the cluster"),
        ({"key.column": "v"}, "key column 'v' is double"),
    ],
)
def test_bad_input_is_a_clear_error_before_any_task(spark, cluster, more, expected):
    frame = spark.createDataFrame([(1, 2.0)], "id long, v double")
    with pytest.raises(Exception, match=re.escape(expected)):
        frame.write.format("shardgrid").options(**{**options(cluster, "bad"), **more}).mode("append").save()


def test_a_null_key_fails_the_write_naming_the_column(spark, cluster):
    frame = spark.createDataFrame([(1, "a"), (None, "b")], "id long, v string")
    with pytest.raises(Exception, match="a row has a null key \\(column 'id'\\)"):
        frame.write.format("shardgrid").options(**options(cluster, "nulls", **{"key.column": "id"})).mode(
            "append"
        ).save()


def test_a_stream_into_a_map_restarts_from_its_checkpoint_without_loss_or_double(spark, cluster, tmp_path):
    sink = options(cluster, "stream", **{"key.column": "value"})

    def run_until(batches: int) -> int:
        """Rows of the batches this run committed (a batch Spark reports progress for)."""
        query = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", 2_000)
            .load()
            .writeStream.format("shardgrid")
            .options(**sink)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="500 milliseconds")
            .start()
        )
        deadline = time.monotonic() + 120
        try:
            while sum(1 for p in query.recentProgress if p["numInputRows"] > 0) < batches:
                assert query.exception() is None, query.exception()
                assert time.monotonic() < deadline, "the stream made no progress"
                time.sleep(0.2)
        finally:
            query.stop()
        return sum(p["numInputRows"] for p in query.recentProgress)

    committed = run_until(2)
    first = _read(spark, cluster, "stream", "value long, timestamp timestamp", **{"key.column": "value"}).count()
    committed += run_until(2)
    back = _read(spark, cluster, "stream", "value long, timestamp timestamp", **{"key.column": "value"})
    rows, below = back.selectExpr("count(*)", f"count_if(value < {committed})").first()
    assert rows > first
    # The rate source counts 0, 1, 2, ...: every value of a committed batch there, once. The batch a
    # stop interrupted is not committed: part of it may be in the map (a writer task Spark had not
    # stopped yet), and the next start writes it again whole.
    assert below == committed
    assert rows >= committed


def test_a_write_goes_on_through_a_sigkilled_member(spark, cluster):
    frame = spark.range(ROWS).selectExpr("id", "concat('v-', id) as v")
    victim = cluster.start(join=cluster.addresses)  # a fourth member, so three remain
    with Client(cluster.addresses, cluster_secret=SECRET) as client:
        client.wait_until_safe(120)
    killer = threading.Timer(3.0, cluster.kill, args=(victim,))
    killer.start()
    try:
        frame.write.format("shardgrid").options(
            **options(cluster, "through-crash", **{"key.column": "id", "write.batch.size": "500"})
        ).mode("append").save()
    finally:
        killer.join()
    back = _read(spark, cluster, "through-crash", "id long, v string", **{"key.column": "id"})
    assert back.count() == ROWS
    assert frame.exceptAll(back).count() == 0


def test_a_read_while_a_member_joins_has_no_row_missing_or_doubled(spark, cluster):
    frame = spark.range(ROWS).selectExpr("id", "id % 7 as seven")
    frame.write.format("shardgrid").options(**options(cluster, "during-join", **{"key.column": "id"})).mode(
        "append"
    ).save()
    joiner = cluster.start(join=cluster.addresses)
    try:
        back = _read(spark, cluster, "during-join", "id long, seven long", **{"key.column": "id", "read.tasks": "8"})
        rows, distinct = back.selectExpr("count(*)", "count(distinct id)").first()
        assert (rows, distinct) == (ROWS, ROWS)
    finally:
        cluster.terminate(joiner, timeout_s=120)
