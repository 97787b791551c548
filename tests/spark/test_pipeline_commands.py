"""``shardgrid pipeline load``, ``export`` and ``stream`` against member processes on 127.0.0.1: a
load as a user runs it (its own process, with its own local Spark), the rest in this process on
the test session (a JVM and Spark's Python daemons per command cost 25-100 s each here; the demo's
test runs the export's jobs in a process of their own too)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from click.testing import CliRunner, Result

from shardgrid.cli.main import cli
from shardgrid.client import Client

from .conftest import SECRET

ROWS = 20_000


def _shardgrid(cluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SHARDGRID_CLUSTER_SECRET": SECRET, "SHARDGRID_MEMBERS": ",".join(cluster.addresses)}
    command = [sys.executable, "-m", "shardgrid", "pipeline", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_load_then_export_round_trips_a_parquet_file(commands_on_test_session, cluster, tmp_path):
    spark = commands_on_test_session
    source = spark.range(ROWS).selectExpr("id", "concat('row-', id) as label", "id % 13 as bucket")
    source.write.parquet(str(tmp_path / "in.parquet"))
    loaded = _shardgrid(
        cluster, "load", "--input", str(tmp_path / "in.parquet"), "--map", "piped", "--key", "id", "--json"
    )
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    figures = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert figures["rows"] == ROWS
    assert figures["bytes"] > 0
    assert figures["rows_per_s"] > 0
    exported = _here(
        cluster,
        "export",
        "--map",
        "piped",
        "--output",
        str(tmp_path / "out.parquet"),
        "--key",
        "id",
        "--schema",
        "id long, label string, bucket long",
        "--json",
    )
    assert exported.exit_code == 0, exported.output[-3000:]
    assert json.loads(exported.stdout.strip().splitlines()[-1])["rows"] == ROWS
    back = spark.read.parquet(str(tmp_path / "out.parquet"))
    assert back.count() == ROWS
    assert source.exceptAll(back.select("id", "label", "bucket")).count() == 0


def _here(cluster, *args: str) -> Result:
    env = {"SHARDGRID_CLUSTER_SECRET": SECRET, "SHARDGRID_MEMBERS": ",".join(cluster.addresses)}
    return CliRunner().invoke(cli, ["pipeline", *args], env=env)


def _failed_load(cluster, input_path, map_name: str, key: str) -> str:
    """What a load that must fail (exit 1) said on stderr."""
    failed = _here(cluster, "load", "--input", str(input_path), "--map", map_name, "--key", key)
    assert failed.exit_code == 1, failed.output[-2000:]
    return failed.stderr


def test_export_never_replaces_what_is_at_the_output_unless_told(cluster, tmp_path):
    """Found by an outside tester: an export replaced a folder of other files without a word."""
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "notes.txt").write_text("mine")
    refused = _shardgrid(cluster, "export", "--map", "piped", "--output", str(tmp_path / "keep"))
    assert refused.returncode == 2
    assert "exists; give --overwrite" in refused.stderr
    assert (tmp_path / "keep" / "notes.txt").read_text() == "mine"


def test_a_load_that_cannot_run_says_why_and_exits_non_zero(commands_on_test_session, cluster, tmp_path):
    commands_on_test_session.range(5).write.json(str(tmp_path / "in.json"))
    failed = _failed_load(cluster, tmp_path / "in.json", "bad", "nope")
    assert "load failed: shardgrid: option 'key.column': no column 'nope' in the schema" in failed
    (tmp_path / "nulls.csv").write_text("id,v\n1,a\n,b\n")
    nulls = _failed_load(cluster, tmp_path / "nulls.csv", "bad", "id")
    assert "load failed: shardgrid: a row has a null key (column 'id'); every row needs a key" in nulls


def test_a_malformed_json_or_csv_record_fails_the_load_naming_it(commands_on_test_session, cluster, tmp_path):
    """Spark's default reads a malformed JSON line as a row of nulls (and a _corrupt_record column),
    which the load refused as "a null key", and fills a short CSV row's missing fields with nulls,
    which it stored: a load reads files strictly, and says what it could not parse (Spark names a
    CSV record; for JSON it gives the parser's complaint)."""
    (tmp_path / "bad.json").write_text('{"id": 1, "v": "a"}\n{"id": 2, "v": \n')
    failed = _failed_load(cluster, tmp_path / "bad.json", "strict", "id")
    assert "load failed: Unexpected end-of-input within/between Object entries" in failed
    (tmp_path / "short.csv").write_text("id,v,w\n1,a,x\n2,b\n")
    short = _failed_load(cluster, tmp_path / "short.csv", "strict", "id")
    assert "Malformed CSV record: 2,b" in short
    with Client(cluster.addresses, cluster_secret=SECRET) as client:
        assert client.get_map("strict", key_type=int).get_all([1, 2]) == {}
    # Found by an outside tester: rows other tasks read before the bad one are written, and the
    # failure said nothing of them; and a folder's bad file was not named.
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "a.csv").write_text("id,v\n10,a\n")
    (tmp_path / "folder" / "b.csv").write_text("id,v\n11,b\n12\n")
    partly = _failed_load(cluster, tmp_path / "folder", "strict", "id")
    assert "Malformed CSV record: 12" in partly
    assert "b.csv" in partly
    assert "rows the job wrote before it failed stay in the map" in partly


def test_paths_with_glob_characters_are_read_as_they_are(commands_on_test_session, cluster, tmp_path):
    """Found by an outside tester: Spark reads a path as a glob, so an input in a folder named
    ``in[1]`` was "not found", and an export to ``out[2]`` wrote its files, then failed counting them
    with a raw traceback."""
    folder = tmp_path / "in[1]"
    folder.mkdir()
    (folder / "rows.json").write_text("".join(f'{{"id": {i}, "v": "r{i}"}}\n' for i in range(50)))
    loaded = _here(cluster, "load", "--input", str(folder / "rows.json"), "--map", "globbed", "--key", "id")
    assert loaded.exit_code == 0, loaded.output[-2000:]
    exported = _here(cluster, "export", "--map", "globbed", "--output", str(tmp_path / "out[2]"), "--key", "id",
                     "--schema", "id long, v string", "--json")  # fmt: skip
    assert exported.exit_code == 0, exported.output[-2000:]
    assert json.loads(exported.stdout.strip().splitlines()[-1])["rows"] == 50


def test_a_streams_first_start_on_a_bad_file_is_a_failed_job_not_a_usage_error(
    commands_on_test_session, cluster, tmp_path
):
    """Found by an outside tester: a bad file met while inferring the schema exited 2 (a usage
    error); the same file met later exits 1."""
    arriving = tmp_path / "in"
    arriving.mkdir()
    (arriving / "a.json").write_text('{"id": 1, "v": "a"}\n{"id": 2, "v": \n')
    done = _here(cluster, "stream", "--input", str(arriving), "--map", "firstbad", "--key", "id",
                 "--checkpoint", str(tmp_path / "ckpt"), "--once")  # fmt: skip
    assert done.exit_code == 1, done.output[-2000:]
    assert f"stream failed: cannot infer the schema from {arriving}" in done.stderr


def test_without_java_a_load_names_what_is_missing_and_starts_no_jvm(tmp_path):
    (tmp_path / "in.csv").write_text("id,v\n1,a\n")
    bin_dir = os.path.dirname(sys.executable)  # the interpreter only: no java on this PATH
    env = {key: value for key, value in os.environ.items() if key != "JAVA_HOME"}
    env["PATH"] = bin_dir
    command = [sys.executable, "-m", "shardgrid", "pipeline", "load", "--input", str(tmp_path / "in.csv")]
    done = subprocess.run(
        [*command, "--map", "m", "--key", "id"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert "Spark needs Java 17 or newer and there is no java on PATH" in done.stderr
    assert "Traceback" not in done.stderr


def test_stream_writes_each_file_of_a_folder_once_and_resumes_after_them(commands_on_test_session, cluster, tmp_path):
    """The example pipeline: a folder that JSON files arrive in, streamed into a map; a second run
    with the same checkpoint writes only the file that arrived since (its own batch count says so)."""
    from shardgrid.client import Client

    arriving = tmp_path / "arriving"
    arriving.mkdir()

    def drop(name: str, first: int, count: int) -> None:
        lines = [json.dumps({"id": i, "name": f"user-{i}", "score": i * 1.5}) for i in range(first, first + count)]
        (arriving / name).write_text("\n".join(lines) + "\n")

    drop("a.json", 0, 300)
    drop("b.json", 300, 300)
    common = ["--input", str(arriving), "--map", "streamed", "--key", "id", "--checkpoint", str(tmp_path / "ckpt")]
    first = _here(cluster, "stream", *common, "--once", "--max-files-per-batch", "1")
    assert first.exit_code == 0, first.stderr[-3000:]
    assert "streamed 600 rows into map 'streamed'" in first.stdout
    assert first.stdout.count("rows into 'streamed'") == 2  # one file a batch
    drop("c.json", 600, 50)
    second = _here(cluster, "stream", *common, "--once", "--schema", "id long, name string, score double")
    assert second.exit_code == 0, second.stderr[-3000:]
    assert "streamed 50 rows into map 'streamed'" in second.stdout
    with Client(cluster.addresses, cluster_secret=SECRET) as client:
        users = client.get_map("streamed", key_type=int)
        assert users.size() == 650
        assert users.get(649) == {"name": "user-649", "score": 649 * 1.5}


def test_stream_without_files_or_schema_says_what_to_give(commands_on_test_session, cluster, tmp_path):
    (tmp_path / "empty").mkdir()
    done = _here(
        cluster, "stream", "--input", str(tmp_path / "empty"), "--map", "m", "--key", "id",
        "--checkpoint", str(tmp_path / "ckpt"), "--once",
    )  # fmt: skip
    assert done.exit_code == 2
    assert "holds no files to infer the schema from; give --schema DDL" in done.stderr


def test_csv_headers_are_honoured_and_quoted_newlines_stay_in_their_field(commands_on_test_session, cluster, tmp_path):
    """Found by an outside tester: files whose headers differ loaded values under the wrong keys,
    and a quoted field holding a newline became an extra row with an invented key."""
    from shardgrid.client import Client

    (tmp_path / "quoted.csv").write_text('id,v\n1,"multi\nline"\n2,"say ""hi"""\n')
    loaded = _here(cluster, "load", "--input", str(tmp_path / "quoted.csv"), "--map", "csvq", "--key", "id")
    assert loaded.exit_code == 0, loaded.output[-3000:]
    assert "loaded into map 'csvq': 2 rows" in loaded.stdout
    with Client(cluster.addresses, cluster_secret=SECRET) as client:
        csvq = client.get_map("csvq", key_type=int)
        assert csvq.size() == 2
        assert csvq.get(1) == {"v": "multi\nline"}
        assert csvq.get(2) == {"v": 'say "hi"'}
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "a.csv").write_text("id,v\n1,alpha\n")
    (mixed / "b.csv").write_text("v,id\nbeta,2\n")
    refused = _here(cluster, "load", "--input", str(mixed), "--map", "csvmixed", "--key", "id")
    with Client(cluster.addresses, cluster_secret=SECRET) as client:
        stored = client.get_map("csvmixed", key_type=int)
        if refused.exit_code == 0:  # matched by name: each value under its own key
            assert stored.get(1) == {"v": "alpha"}
            assert stored.get(2) == {"v": "beta"}
        else:  # or refused, naming the header: never stored under the wrong keys
            assert refused.exit_code == 1
            assert "header" in refused.stderr.lower()
            # a failed job keeps what its other tasks wrote (a.csv's row), never a row under a wrong key
            assert client.get_map("csvmixed", key_type=str).size() <= 1
            assert stored.get(1) in (None, {"v": "alpha"})


def test_a_stream_checkpoint_belongs_to_one_stream_and_keeps_its_schema(commands_on_test_session, cluster, tmp_path):
    """Found by an outside tester: a checkpoint given with another --map skipped every file without
    a word, and a schema inferred again at a restart turned int keys into strings beside them."""
    arriving = tmp_path / "in"
    arriving.mkdir()
    (arriving / "a.json").write_text('{"id": 1, "v": "first"}\n')
    common = ["--input", str(arriving), "--key", "id", "--checkpoint", str(tmp_path / "ckpt"), "--once"]
    assert _here(cluster, "stream", *common, "--map", "kept").exit_code == 0
    other = _here(cluster, "stream", *common, "--map", "kept-elsewhere")
    assert other.exit_code == 2
    assert "belongs to the stream with map 'kept', not 'kept-elsewhere'" in other.stderr
    (arriving / "b.json").write_text('{"id": "2", "v": "second"}\n')  # ids as text now
    again = _here(cluster, "stream", *common, "--map", "kept")
    assert again.exit_code == 1  # the kept schema reads that id as no long: the file is refused
    assert "Encountered error while reading file" in again.stderr
    assert "b.json" in again.stderr
    from shardgrid.client import Client

    with Client(cluster.addresses, cluster_secret=SECRET) as client:
        assert client.get_map("kept", key_type=int).get(1) == {"v": "first"}
        assert client.get_map("kept", key_type=int).size() == 1  # no key "2" beside the long keys
    changed = _here(cluster, "stream", *common, "--map", "kept", "--schema", "id string, v string")
    assert changed.exit_code == 2
    assert "began with struct<id:bigint,v:string>" in changed.stderr
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "offsets").mkdir()
    foreign = _here(cluster, "stream", "--input", str(arriving), "--key", "id", "--map", "kept", "--once",
                    "--checkpoint", str(tmp_path / "foreign"))  # fmt: skip
    assert foreign.exit_code == 2
    assert "holds files no stream of this command wrote" in foreign.stderr


def test_ctrl_c_while_spark_starts_leaves_no_jvm_behind(tmp_path):
    """Found by an outside tester: an interrupt while Spark started left its JVM running, orphaned."""
    import signal
    import time

    from shardgrid.cli.local_cluster import alive
    from shardgrid.spark.session import java_children

    (tmp_path / "in.csv").write_text("id,v\n1,a\n")
    command = [sys.executable, "-m", "shardgrid", "pipeline", "load", "--input", str(tmp_path / "in.csv"),
               "--map", "m", "--key", "id", "--members", "127.0.0.1:1"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    jvms: list[int] = []
    deadline = time.monotonic() + 60
    try:
        while not jvms and time.monotonic() < deadline and process.poll() is None:
            jvms = java_children(process.pid)
            time.sleep(0.1)
        assert jvms, "no JVM started"
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)
        gone_by = time.monotonic() + 10
        while any(alive(pid) for pid in jvms) and time.monotonic() < gone_by:
            time.sleep(0.1)
        assert not [pid for pid in jvms if alive(pid)]
    finally:
        if process.poll() is None:
            process.kill()
        for pid in jvms:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_spark_master_url_spark_would_not_take_is_refused_before_any_jvm(tmp_path):
    """Found by an outside tester: ``--spark-master local[abc]`` started a JVM that died with a Java
    trace and a Python one, and no readable reason."""
    (tmp_path / "one.json").write_text('{"id": 1}\n')
    for master in ("local[abc]", "local[0]", "spark:/nohost"):
        done = CliRunner().invoke(
            cli, ["pipeline", "load", "--input", str(tmp_path / "one.json"), "--map", "m", "--key", "id",
                  "--spark-master", master],
        )  # fmt: skip
        assert done.exit_code == 2, done.output
        assert "is no Spark master URL" in done.output
