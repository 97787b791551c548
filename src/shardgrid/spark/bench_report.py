"""The Spark job behind ``shardgrid bench report``: latency per second and migration periods out of
the samples ``shardgrid bench cluster`` writes.

Percentiles are Spark's ``percentile_approx`` with accuracy 100,000: an actual sample, at most
1/100,000 of a group's samples in rank from the nearest-rank value within one summary. A group read
in one piece (every second, and the phases of a small run) gets the exact nearest-rank value; a
group whose samples Spark reads in several pieces merges summaries and can be a rank or so off
(found by an outside tester: p99.9 of 61,111 samples of a 1M-line file was one rank off). The exact
``percentile`` was not used because it interpolates between samples and keeps every distinct value
of a group in memory, which a long run's phase groups would make large.

Times are seconds since the scenario's first sample (``at_s``); a second is the bucket
[n, n + 1) of that. A migration's interval runs from its ``started`` notice to the ``finished`` or
``failed`` one that follows it for the same partition, source and destination; a notice with no
partner is a point (an end whose start came before the listener) or runs to the scenario's last
sample (a start with no end, "unfinished"). Overlapping intervals merge into migration periods,
and a second is a migration second when it overlaps a period. Only aggregates reach the driver:
rows per second and operation, per period, per completion bucket and per phase.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

PERCENTILE_ACCURACY = 100_000
QUANTILES = (0.5, 0.99, 0.999)
COMPLETION_BUCKET_S = 0.01  # a rebalance here takes under a second: whole seconds would draw one step
ENDS = ("finished", "failed")

SAMPLES_SCHEMA = StructType(
    [
        StructField("kind", StringType(), False),
        StructField("scenario", StringType(), False),
        StructField("t", DoubleType(), False),
        StructField("op", StringType(), True),
        StructField("s", DoubleType(), True),
        StructField("phase", StringType(), True),
        StructField("partition_id", LongType(), True),
        StructField("source", StringType(), True),
        StructField("destination", StringType(), True),
    ]
)


@dataclass(frozen=True, kw_only=True)
class SecondLatency:
    scenario: str
    second: int
    op: str
    count: int
    p50_ms: float
    p99_ms: float
    p999_ms: float
    migrating: bool


@dataclass(frozen=True, kw_only=True)
class MigrationPeriod:
    scenario: str
    start_s: float
    end_s: float
    finished: int
    failed: int
    unfinished: int

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class CompletionBucket:
    scenario: str
    start_s: float
    finished: int


@dataclass(frozen=True, kw_only=True)
class PhaseLatency:
    scenario: str
    op: str
    phase: str  # "steady" or "migration"
    count: int
    p50_ms: float
    p99_ms: float
    p999_ms: float


@dataclass(frozen=True, kw_only=True)
class BenchFigures:
    seconds: list[SecondLatency]
    periods: list[MigrationPeriod]
    completions: list[CompletionBucket]
    phases: list[PhaseLatency]
    span_s: dict[str, float]  # scenario -> first to last sample


def _percentiles_ms(column: str) -> list[Any]:
    quantiles = F.percentile_approx(F.col(column) * 1000.0, list(QUANTILES), PERCENTILE_ACCURACY)
    return [
        F.count(F.lit(1)).alias("count"),
        quantiles[0].alias("p50_ms"),
        quantiles[1].alias("p99_ms"),
        quantiles[2].alias("p999_ms"),
    ]


def _since(origin: str) -> Any:
    """Seconds since the origin, to the microsecond: a difference of two large monotonic readings
    carries float noise (1004.9 - 1000.0 = 4.89999...) that would move a time on a bucket's edge into
    the bucket before it."""
    return F.round(F.col("t") - F.col(origin), 6)


def _intervals(migrations: DataFrame) -> DataFrame:
    """One row per migration: its start, end and outcome, paired within partition, source and
    destination (a partition can move more than once in a run)."""
    same = Window.partitionBy("scenario", "partition_id", "source", "destination").orderBy("at_s", "order")
    paired = (
        migrations.withColumn("order", F.when(F.col("phase") == "started", 0).otherwise(1))
        .withColumn("next_phase", F.lead("phase").over(same))
        .withColumn("next_at_s", F.lead("at_s").over(same))
        .withColumn("previous_phase", F.lag("phase").over(same))
    )
    started = paired.where(F.col("phase") == "started").select(
        "scenario",
        F.col("at_s").alias("start_s"),
        # A start after the last sample (found by an outside tester: a negative duration) ends where it began.
        F.when(F.col("next_phase").isin(*ENDS), F.col("next_at_s"))
        .otherwise(F.greatest(F.col("last_s"), F.col("at_s")))
        .alias("end_s"),
        F.when(F.col("next_phase").isin(*ENDS), F.col("next_phase")).otherwise("unfinished").alias("outcome"),
    )
    unpaired_ends = paired.where(
        F.col("phase").isin(*ENDS) & (F.col("previous_phase").isNull() | (F.col("previous_phase") != "started"))
    ).select("scenario", F.col("at_s").alias("start_s"), F.col("at_s").alias("end_s"), F.col("phase").alias("outcome"))
    return started.unionByName(unpaired_ends)


def _periods(intervals: DataFrame) -> DataFrame:
    """Overlapping intervals merged (gaps and islands): an interval opens a new period when it starts
    after every earlier one has ended."""
    ordered = Window.partitionBy("scenario").orderBy("start_s", "end_s")
    earlier = ordered.rowsBetween(Window.unboundedPreceding, -1)
    so_far = ordered.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    reach = F.max("end_s").over(earlier)
    opens = F.when(reach.isNull() | (F.col("start_s") > reach), 1).otherwise(0)
    numbered = intervals.withColumn("opens", opens).withColumn("period", F.sum("opens").over(so_far))
    return numbered.groupBy("scenario", "period").agg(
        F.min("start_s").alias("start_s"),
        F.max("end_s").alias("end_s"),
        F.sum(F.when(F.col("outcome") == "finished", 1).otherwise(0)).alias("finished"),
        F.sum(F.when(F.col("outcome") == "failed", 1).otherwise(0)).alias("failed"),
        F.sum(F.when(F.col("outcome") == "unfinished", 1).otherwise(0)).alias("unfinished"),
    )


def _migration_seconds(samples: DataFrame, periods: DataFrame) -> DataFrame:
    """The (scenario, second) pairs that overlap a migration period, flagged ``migrating``: few rows,
    so they are broadcast to the joins that use them."""
    seconds = samples.select("scenario", "second").distinct()
    overlaps = (
        (F.col("s.scenario") == F.col("p.scenario"))
        & (F.col("p.start_s") < F.col("s.second") + 1)
        & (F.col("p.end_s") >= F.col("s.second"))
    )
    marked = seconds.alias("s").join(F.broadcast(periods.alias("p")), overlaps, "left_semi")
    return F.broadcast(marked.select("scenario", "second").withColumn("migrating", F.lit(True)))


def _latencies(samples: DataFrame, marked: DataFrame) -> tuple[list[Any], list[Any]]:
    """Percentiles per second and operation, and per phase (steady or migration) and operation."""
    flagged = (
        samples.join(marked, ["scenario", "second"], "left")
        .fillna({"migrating": False})
        .select("scenario", "second", "op", "s", "migrating")
        .cache()  # both groupings read it
    )
    try:
        return _percentiles_by(flagged)
    finally:
        flagged.unpersist()


def _percentiles_by(flagged: DataFrame) -> tuple[list[Any], list[Any]]:
    per_second = (
        flagged.groupBy("scenario", "second", "op", "migrating")
        .agg(*_percentiles_ms("s"))
        .orderBy("scenario", "second", "op")
        .collect()
    )
    phases = (
        flagged.withColumn("phase", F.when(F.col("migrating"), "migration").otherwise("steady"))
        .groupBy("scenario", "op", "phase")
        .agg(*_percentiles_ms("s"))
        .orderBy("scenario", "op", "phase")
        .collect()
    )
    return per_second, phases


def analyze(spark: SparkSession, path: str) -> BenchFigures:
    """The figures of one samples file (already checked line by line: see ``cli.bench_samples``).

    The parsed lines are cached (every figure reads them) and each scenario's first and last sample
    are collected once and handed back as a local table, so no later query aggregates them again."""
    lines = spark.read.schema(SAMPLES_SCHEMA).option("mode", "FAILFAST").json(path).cache()
    try:
        spans = (
            lines.where(F.col("kind") == "sample")
            .groupBy("scenario")
            .agg(F.min("t").alias("t0"), F.round(F.max("t") - F.min("t"), 6).alias("last_s"))
            .collect()
        )
        origins = spark.createDataFrame(spans, "scenario string, t0 double, last_s double")
        figures = _analyze(lines, F.broadcast(origins))
    finally:
        lines.unpersist()
    return replace(figures, span_s={r["scenario"]: r["last_s"] for r in spans})


def _analyze(lines: DataFrame, origins: DataFrame) -> BenchFigures:
    samples = lines.where(F.col("kind") == "sample").join(origins, "scenario").withColumn("at_s", _since("t0"))
    samples = samples.withColumn("second", F.floor("at_s").cast("long"))
    migrations = (
        lines.where(F.col("kind") == "migration")
        .join(origins, "scenario")
        .withColumn("at_s", _since("t0"))
        .fillna({"source": "", "destination": ""})
    )
    periods = _periods(_intervals(migrations)).cache()  # read by the collect and by the marking
    try:
        period_rows = periods.orderBy("scenario", "start_s").collect()
        per_second, phases = _latencies(samples, _migration_seconds(samples, periods))
    finally:
        periods.unpersist()
    completions = (
        migrations.where(F.col("phase") == "finished")
        .withColumn("bucket", F.floor(F.round(F.col("at_s") / COMPLETION_BUCKET_S, 3)).cast("long"))
        .groupBy("scenario", "bucket")
        .agg(F.count(F.lit(1)).alias("finished"))
        .orderBy("scenario", "bucket")
        .collect()
    )
    return BenchFigures(
        seconds=[
            SecondLatency(
                scenario=r["scenario"],
                second=r["second"],
                op=r["op"],
                count=r["count"],
                p50_ms=r["p50_ms"],
                p99_ms=r["p99_ms"],
                p999_ms=r["p999_ms"],
                migrating=r["migrating"],
            )
            for r in per_second
        ],
        periods=[
            MigrationPeriod(
                scenario=r["scenario"],
                start_s=r["start_s"],
                end_s=r["end_s"],
                finished=r["finished"],
                failed=r["failed"],
                unfinished=r["unfinished"],
            )
            for r in period_rows
        ],
        completions=[
            CompletionBucket(r["scenario"], round(r["bucket"] * COMPLETION_BUCKET_S, 3), r["finished"])
            for r in completions
        ],
        phases=[
            PhaseLatency(
                scenario=r["scenario"],
                op=r["op"],
                phase=r["phase"],
                count=r["count"],
                p50_ms=r["p50_ms"],
                p99_ms=r["p99_ms"],
                p999_ms=r["p999_ms"],
            )
            for r in phases
        ],
        span_s={},  # filled in by analyze
    )
