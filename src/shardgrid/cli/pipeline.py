"""``shardgrid pipeline load`` and ``export``: files into a map and a map into Parquet, on Spark.

Each runs one Spark job through the ``shardgrid`` data source (local Spark unless
``--spark-master`` names another) and prints rows, bytes, seconds and rows per second; it exits
non-zero when the job fails, naming why.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import click

from shardgrid.cli.cluster_commands import EXIT_REFUSED, MEMBERS_ENV, parse_members
from shardgrid.core.limits import MAX_TTL_SECONDS
from shardgrid.spark.jobs import failure_reason, read_map, read_path, write_to_map

INPUT_FORMATS = ("parquet", "csv", "json")


# The master URLs Spark takes (its own parser's forms): anything else started a JVM that died
# with a Java trace and a Python one, and no readable reason (found by an outside tester).
SPARK_MASTER = re.compile(
    r"local(\[(\*|[1-9]\d*)(,\s*[1-9]\d*)?\])?|local-cluster\[\d+,\s*\d+,\s*\d+\]"
    r"|spark://[^\s/]+(:\d+)?(,[^\s/]+(:\d+)?)*|yarn|k8s://\S+"
)


def checked_spark_master(_context: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not SPARK_MASTER.fullmatch(value):
        raise click.BadParameter(
            f"{value!r} is no Spark master URL: local, local[N], local[*], spark://HOST:PORT, yarn or k8s://..."
        )
    return value


def _connection_options(function: Any) -> Any:
    for option in reversed(
        [
            click.option(
                "--members",
                envvar=MEMBERS_ENV,
                default="127.0.0.1:5701",
                show_default=True,
                help=f"Addresses of members to ask, host:port,... (or ${MEMBERS_ENV}).",
            ),
            click.option(
                "--cluster-name",
                envvar="SHARDGRID_CLUSTER_NAME",
                default="shardgrid",
                show_default=True,
                help="The cluster's name (or $SHARDGRID_CLUSTER_NAME).",
            ),
            click.option(
                "--cluster-secret",
                envvar="SHARDGRID_CLUSTER_SECRET",
                default=None,
                help="The cluster's secret (better: $SHARDGRID_CLUSTER_SECRET, kept out of the process list).",
            ),
            click.option(
                "--tls-ca-file",
                type=click.Path(dir_okay=False),
                default=None,
                help="Speak TLS, trusting members whose certificate this CA signed (PEM).",
            ),
            click.option(
                "--spark-master",
                default=None,
                callback=checked_spark_master,
                help="A Spark master URL (default: local[2]).",
            ),
        ]
    ):
        function = option(function)
    return function


def source_options(members: str, cluster_name: str, secret: str | None, tls_ca_file: str | None) -> dict[str, str]:
    found = {"cluster.members": ",".join(parse_members(members)), "cluster.name": cluster_name}
    if secret:
        found["cluster.secret"] = secret
    if tls_ca_file:
        found["tls.ca.file"] = tls_ca_file
    return found


def _format_of(path: Path, given: str | None) -> str:
    if given is not None:
        return given
    suffix = path.suffix.lstrip(".").lower() if path.is_file() else ""
    if suffix in INPUT_FORMATS:
        return suffix
    if path.is_dir():
        files = [p for p in path.iterdir() if p.is_file() and not p.name.startswith((".", "_"))]
        kinds = {p.suffix.lstrip(".").lower() for p in files} & set(INPUT_FORMATS)
        if len(kinds) == 1:
            return kinds.pop()
    raise click.UsageError(f"--input: cannot tell the format of {path}; give --format {'|'.join(INPUT_FORMATS)}")


def _size_bytes(path: Path) -> int:
    """The bytes of the files Spark reads: a folder's own files, not those whose names start with
    "_" or "." (Spark skips them), nor those in plain subfolders (Spark descends only into
    partition folders, named column=value)."""
    if path.is_file():
        return path.stat().st_size
    total = 0
    for child in path.iterdir():
        if child.name.startswith(("_", ".")):
            continue
        if child.is_file():
            total += child.stat().st_size
        elif child.is_dir() and "=" in child.name:
            total += _size_bytes(child)
    return total


def _figures(verb: str, rows: int, data_bytes: int, seconds: float) -> dict[str, Any]:
    figures = {
        "rows": rows,
        "bytes": data_bytes,
        "seconds": round(seconds, 2),
        "rows_per_s": round(rows / seconds) if seconds > 0 else None,
    }
    click.echo(
        f"{verb} {rows:,} rows, {data_bytes / 1e6:,.1f} MB in {seconds:.1f} s ({figures['rows_per_s'] or 0:,} rows/s)"
    )
    return figures


# A load is not one transaction: tasks that read rows before another met a bad one wrote them.
PARTIAL_LOAD = (
    "rows the job wrote before it failed stay in the map (a load is not one transaction); "
    "fix the input and load it again: the same keys are written again"
)


def _fail(what: str, error: Exception, then: str = "") -> None:
    click.echo(f"{what} failed: {failure_reason(error)}", err=True)
    if then:
        click.echo(then, err=True)
    sys.exit(EXIT_REFUSED)


def _start_spark(master: str | None, app_name: str) -> Any:
    from shardgrid.spark.session import SparkUnavailableError, start_session_or_end_jvm

    try:
        return start_session_or_end_jvm(master, app_name)
    except SparkUnavailableError as error:
        click.echo(f"{app_name} failed: {error}", err=True)
        sys.exit(EXIT_REFUSED)
    except Exception as error:  # the JVM did not start, or the master could not be reached
        _fail(app_name, error)


@click.group()
def pipeline() -> None:
    """Move data between files and maps on Spark."""


@pipeline.command("load")
@click.option(
    "--input",
    "input_path",
    type=click.Path(exists=True, path_type=Path),
    required=True,
    help="A file, or a folder of files, to load.",
)
@click.option(
    "--format",
    "input_format",
    type=click.Choice(INPUT_FORMATS),
    default=None,
    help="The files' format (default: from the file's or the folder's extension).",
)
@click.option("--map", "map_name", required=True, help="The map to write into.")
@click.option("--key", "key_column", required=True, help="The column holding the keys.")
@click.option(
    "--mode",
    type=click.Choice(["put", "put_if_absent"]),
    default="put",
    show_default=True,
    help="put replaces a key's value; put_if_absent keeps a value already there.",
)
@click.option(
    "--ttl",
    "ttl_seconds",
    type=click.IntRange(0, MAX_TTL_SECONDS),
    default=None,
    help="Seconds the loaded entries live (0: until removed; default: the map's time_to_live_seconds).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as one JSON object too.")
@_connection_options
def load(
    input_path: Path,
    input_format: str | None,
    map_name: str,
    key_column: str,
    mode: str,
    ttl_seconds: int | None,
    as_json: bool,
    **given: Any,
) -> None:
    """Load a Parquet, CSV or JSON file (or folder of them) into a map, keyed by a column."""
    options = source_options(given["members"], given["cluster_name"], given["cluster_secret"], given["tls_ca_file"])
    kind = _format_of(input_path, input_format)
    spark = _start_spark(given["spark_master"], "shardgrid pipeline load")
    try:
        try:  # reading the input (its schema) fails here too: a malformed record, a corrupt file
            frame = _file_reader(spark.read.format(kind), kind).load(read_path(input_path))
            written = write_to_map(frame, options, map_name, key_column, mode, ttl_seconds)
        except Exception as error:  # Spark's, carrying the source's message
            _fail("load", error, PARTIAL_LOAD)
        figures = _figures(f"loaded into map '{map_name}':", written.rows, written.data_bytes, written.seconds)
        if as_json:
            click.echo(json.dumps({"map": map_name, "input": str(input_path), **figures}))
    finally:
        spark.stop()


STREAM_POLL_S = 1.0


def _file_reader(reader: Any, kind: str) -> Any:
    """CSV as RFC 4180 writes it, columns matched by each file's header. Found by an outside
    tester: by default Spark matched columns by position across files whose headers differed
    (values stored under the wrong keys) and split a quoted field holding a newline into rows.
    JSON and CSV are read strictly (FAILFAST): by default Spark reads a malformed JSON line as a
    row of nulls, refused as "a null key" with no word of the line, and a CSV row short of fields
    as nulls in their place, which the load stored."""
    if kind == "parquet":
        return reader
    reader = reader.option("mode", "FAILFAST")
    if kind != "csv":
        return reader
    options = {"header": "true", "inferSchema": "true", "enforceSchema": "false", "multiLine": "true", "escape": '"'}
    return reader.options(**options)


STREAM_RECORD = "shardgrid-stream.json"  # in the checkpoint folder: what stream it belongs to


def _infer_schema(spark: Any, kind: str, input_dir: Path) -> Any:
    if not any(p.is_file() and not p.name.startswith((".", "_")) for p in input_dir.iterdir()):
        raise click.UsageError(f"--schema: {input_dir} holds no files to infer the schema from; give --schema DDL")
    try:
        return _file_reader(spark.read.format(kind), kind).load(read_path(input_dir)).schema
    except Exception as error:
        # The files' fault, not the command line's: a job failure (1), as the same file later is.
        click.echo(f"stream failed: cannot infer the schema from {input_dir}: {failure_reason(error)}", err=True)
        sys.exit(EXIT_REFUSED)


def _stream_schema(spark: Any, stream: dict[str, str], checkpoint: Path, given: str | None) -> Any:
    """The files' schema (a streaming file source needs one before it starts), kept with the
    checkpoint: a stream goes on with the schema it began with. Found by an outside tester: inferred
    again at each start, a file that arrived with ids as text turned the key column to strings, and
    the map held key 1 and key "1" side by side; and a checkpoint given with another --map skipped
    every file without a word. A checkpoint belongs to one stream (input, format, map, key)."""
    from pyspark.sql.types import StructType

    record = checkpoint / STREAM_RECORD
    input_dir = Path(stream["input"])
    if record.exists():
        kept = json.loads(record.read_text())
        for name, value in stream.items():
            if kept.get(name) != value:
                raise click.UsageError(
                    f"--checkpoint: {checkpoint} belongs to the stream with {name} {kept.get(name)!r}, not "
                    f"{value!r}; a checkpoint notes the files one stream wrote: give another --checkpoint"
                )
        schema = StructType.fromJson(json.loads(kept["schema"]))
        if given is not None and spark.createDataFrame([], given).schema != schema:
            raise click.UsageError(
                f"--schema: the stream at {checkpoint} began with {schema.simpleString()}; it goes on with it"
            )
        return schema
    if checkpoint.exists() and any(checkpoint.iterdir()):
        raise click.UsageError(f"--checkpoint: {checkpoint} holds files no stream of this command wrote")
    if given is not None:
        schema = spark.createDataFrame([], given).schema
    else:
        schema = _infer_schema(spark, stream["format"], input_dir)
    checkpoint.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({**stream, "schema": schema.json()}))
    return schema


@pipeline.command("stream")
@click.option("--input", "input_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True,
              help="A folder that files arrive in; each file is written once.")  # fmt: skip
@click.option(
    "--format",
    "input_format",
    type=click.Choice(INPUT_FORMATS),
    default="json",
    show_default=True,
    help="The format of the files that arrive.",
)
@click.option("--map", "map_name", required=True, help="The map to write into.")
@click.option("--key", "key_column", required=True, help="The column holding the keys.")
@click.option("--checkpoint", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Where Spark notes the files written; the same folder again resumes after them.")  # fmt: skip
@click.option("--schema", "schema_ddl", default=None, help="The files' schema as DDL (default: inferred).")
@click.option("--once", is_flag=True, help="Write the files there now, in micro-batches, then stop.")
@click.option(
    "--interval-ms",
    type=click.IntRange(100, 3_600_000),
    default=1000,
    show_default=True,
    help="Time between micro-batches.",
)
@click.option(
    "--max-files-per-batch",
    type=click.IntRange(1, 100_000),
    default=100,
    show_default=True,
    help="New files one micro-batch takes, at most.",
)
@_connection_options
def stream(
    input_dir: Path,
    input_format: str,
    map_name: str,
    key_column: str,
    checkpoint: Path,
    schema_ddl: str | None,
    once: bool,
    interval_ms: int,
    max_files_per_batch: int,
    **given: Any,
) -> None:
    """Stream a folder of JSON, CSV or Parquet files into a map, keyed by a column: each new file
    is written once (a micro-batch replayed after a failure rewrites the same keys). Runs until
    Ctrl-C, or with --once until the files there now are written."""
    options = source_options(given["members"], given["cluster_name"], given["cluster_secret"], given["tls_ca_file"])
    spark = _start_spark(given["spark_master"], "shardgrid pipeline stream")
    query = None
    rows = 0
    interrupted = False
    started = time.monotonic()
    try:
        stream = {"input": str(input_dir.resolve()), "format": input_format, "map": map_name, "key": key_column}
        schema = _stream_schema(spark, stream, checkpoint, schema_ddl)
        source = spark.readStream.format(input_format).schema(schema).option("maxFilesPerTrigger", max_files_per_batch)
        writer = (
            _file_reader(source, input_format)
            .load(read_path(input_dir))
            .writeStream.format("shardgrid")
            .options(**options)
            .option("map", map_name)
            .option("key.column", key_column)
            .option("checkpointLocation", str(checkpoint))
        )
        trigger = {"availableNow": True} if once else {"processingTime": f"{interval_ms} milliseconds"}
        try:
            query = writer.trigger(**trigger).start()
            last_seen = ""  # the newest progress report's timestamp (Spark keeps the last 100 reports)
            while True:
                active = query.isActive
                query.awaitTermination(STREAM_POLL_S)
                for batch in query.recentProgress:
                    if batch["timestamp"] > last_seen:  # ISO 8601 in UTC: ordered as text
                        last_seen = batch["timestamp"]
                        rows += batch["numInputRows"]
                        if batch["numInputRows"]:
                            click.echo(f"batch {batch['batchId']}: {batch['numInputRows']:,} rows into '{map_name}'")
                if not active:  # one more look after it ended: its last batch's report
                    break
            if query.exception() is not None:
                _fail("stream", query.exception())
        except KeyboardInterrupt:
            interrupted = True
            click.echo(f"stopped; run again with --checkpoint {checkpoint} to go on after the files written")
        except Exception as error:
            _fail("stream", error)
    finally:
        if query is not None and query.isActive:
            query.stop()
        spark.stop()
    seconds = time.monotonic() - started
    click.echo(f"streamed {rows:,} rows into map '{map_name}' in {seconds:.1f} s")
    if interrupted:
        sys.exit(130)


@pipeline.command("export")
@click.option("--map", "map_name", required=True, help="The map to read.")
@click.option(
    "--output", "output_path", type=click.Path(path_type=Path), required=True, help="The Parquet folder to write."
)
@click.option("--key", "key_column", default="key", show_default=True, help="The key column's name.")
@click.option(
    "--key-type",
    type=click.Choice(["string", "long", "binary"]),
    default="string",
    show_default=True,
    help="The map's key type, as it was written (the stored form carries none).",
)
@click.option("--schema", "schema_ddl", default=None, help="The rows' schema as DDL (default: inferred).")
@click.option("--overwrite", is_flag=True, help="Replace what is at --output (refused otherwise).")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as one JSON object too.")
@_connection_options
def export(
    map_name: str,
    output_path: Path,
    key_column: str,
    key_type: str,
    schema_ddl: str | None,
    overwrite: bool,
    as_json: bool,
    **given: Any,
) -> None:
    """Write every entry of a map to a Parquet folder at --output (which must not exist, unless
    --overwrite: then it is replaced whole)."""
    if output_path.exists() and not overwrite:
        raise click.UsageError(f"--output: {output_path} exists; give --overwrite to replace it (all of it)")
    options = source_options(given["members"], given["cluster_name"], given["cluster_secret"], given["tls_ca_file"])
    spark = _start_spark(given["spark_master"], "shardgrid pipeline export")
    try:
        started = time.monotonic()
        try:
            frame = read_map(spark, options, map_name, key_column, key_type, schema_ddl)
            frame.write.mode("overwrite").parquet(str(output_path))
            seconds = time.monotonic() - started
            rows = spark.read.parquet(read_path(output_path)).count()  # from the files' footers
        except Exception as error:
            _fail("export", error)
        figures = _figures(f"exported map '{map_name}' to {output_path}:", rows, _size_bytes(output_path), seconds)
        if as_json:
            click.echo(json.dumps({"map": map_name, "output": str(output_path), **figures}))
    finally:
        spark.stop()
