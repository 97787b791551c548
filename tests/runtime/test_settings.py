"""The member's settings: defaults, a TOML file, SHARDGRID_* variables and flags, and the errors
an operator sees when one of them is wrong."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from shardgrid.cli.main import cli
from shardgrid.core.config import MapConfig, MemberConfig
from shardgrid.core.limits import MAX_FRAME_BYTES, MAX_PARTITION_COUNT, MAX_REQUEST_BYTES
from shardgrid.runtime.machine_memory import default_max_memory_bytes
from shardgrid.runtime.settings import (
    FIELDS,
    RUNTIME_CLUSTER_DEFAULTS,
    SECRET_MASK,
    ProcessSettings,
    Settings,
    SettingsError,
    describe,
    load_settings,
)

SECRET = "correct-horse-battery-staple"


def write(tmp_path: Path, text: str, name: str = "shardgrid.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def load(path: Path | None = None, env: dict[str, str] | None = None, **flags: object) -> Settings:
    return load_settings(path, env or {}, flags)


def error_of(path: Path | None = None, env: dict[str, str] | None = None, **flags: object) -> str:
    with pytest.raises(SettingsError) as caught:
        load(path, env, **flags)
    return str(caught.value)


def test_defaults_bind_to_loopback_and_are_the_dataclasses_own() -> None:
    settings = load()
    assert settings.process == ProcessSettings()
    assert (settings.process.host, settings.process.port) == ("127.0.0.1", 5701)
    assert settings.process.cluster_name == "shardgrid"
    assert settings.process.max_frame_bytes == MAX_FRAME_BYTES
    # the core's defaults, but for the runtime's own (a resend backstop: connections report loss;
    # the memory limit, from the machine)
    runtime_own = {**RUNTIME_CLUSTER_DEFAULTS, "max_memory_bytes": default_max_memory_bytes()}
    assert settings.member_config == replace(MemberConfig(), **runtime_own)
    assert settings.member_config.transfer_resend_ms > settings.member_config.retry_interval_ms
    assert set(settings.sources.values()) == {"default"}
    assert settings.config_path is None


def test_the_resend_backstop_follows_a_shorter_migration_timeout_unless_set() -> None:
    assert load(migration_timeout_ms=2_000).member_config.transfer_resend_ms == 666
    assert load(migration_timeout_ms=60_000).member_config.transfer_resend_ms == 5_000
    assert load(migration_timeout_ms=60_000, transfer_resend_ms=9_000).member_config.transfer_resend_ms == 9_000
    assert "transfer_resend_ms must be positive and under migration_timeout_ms" in error_of(
        migration_timeout_ms=2_000, transfer_resend_ms=3_000
    )


def test_every_client_frame_fits_the_frame_budget() -> None:
    assert load(client_frame_budget_bytes=MAX_FRAME_BYTES).process.client_frame_budget_bytes == MAX_FRAME_BYTES
    assert "client-frame-budget-bytes: must be at least max_frame_bytes" in error_of(
        client_frame_budget_bytes=MAX_FRAME_BYTES - 1
    )
    assert "frame-timeout-ms: must be positive" in error_of(frame_timeout_ms=0)
    assert "frame-stall-timeout-ms: must be positive and at most frame_timeout_ms" in error_of(
        frame_timeout_ms=1_000, frame_stall_timeout_ms=2_000
    )


def test_every_request_a_client_sends_fits_a_frame() -> None:
    """Found by an outside tester: at 4.25 MiB a client's 8 MiB put_all request was refused, and
    resent on a new connection, until its call timed out."""
    assert "max-frame-bytes: must be" in error_of(max_frame_bytes=MAX_REQUEST_BYTES)
    assert load(max_frame_bytes=MAX_REQUEST_BYTES + 256 * 1024).process.max_frame_bytes > MAX_REQUEST_BYTES


def test_every_public_field_is_a_setting_and_no_private_one_is() -> None:
    # ``persistent`` is no setting: it follows from ``data_dir``.
    assert set(FIELDS["cluster"]) == {
        name
        for name in MemberConfig.__dataclass_fields__
        if not name.startswith("_") and name not in ("maps", "persistent")
    }
    assert set(FIELDS["member"]) == set(ProcessSettings.__dataclass_fields__)
    assert set(FIELDS["maps"]) == {
        "backup_count",
        "async_backup_count",
        "read_backup_data",
        "serve_when_unavailable",
        "time_to_live_seconds",
        "max_idle_seconds",
        "eviction_policy",
        "max_entries_per_member",
        "max_entries_per_partition",
        "max_bytes_per_member",
    }
    # One environment namespace serves both tables: a name in both would be ambiguous.
    assert not set(FIELDS["cluster"]) & set(FIELDS["member"])


def test_flags_beat_env_beat_file_beat_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, "[member]\nport = 5800\nlite = true\n[cluster]\npartition_count = 1013\ntick_ms = 50\n")
    env = {"SHARDGRID_PORT": "5900", "SHARDGRID_TICK_MS": "20", "SHARDGRID_JOIN": "10.0.0.1:5701, 10.0.0.2:5701"}

    both = load(path, env, port=6000, lite=None)  # None: the option was not given
    assert both.process.port == 6000
    assert both.sources[("member", "port")] == "flag"
    assert both.process.lite is True
    assert both.sources[("member", "lite")] == "file"
    assert both.process.join == ("10.0.0.1:5701", "10.0.0.2:5701")
    assert both.member_config.tick_ms == 20
    assert both.sources[("cluster", "tick_ms")] == "env"
    assert both.member_config.partition_count == 1013
    assert both.sources[("cluster", "partition_count")] == "file"
    assert both.sources[("cluster", "lease_ms")] == "default"

    assert load(path, env).process.port == 5900
    assert load(path).process.port == 5800
    assert load(None, env).member_config.partition_count == MemberConfig().partition_count


def test_flags_take_typed_values_or_text() -> None:
    settings = load(join=("a:1", "b:2"), partition_count="13", lite="yes", tls_cert_file="c.pem", tls_key_file="k.pem")
    assert settings.process.join == ("a:1", "b:2")
    assert settings.member_config.partition_count == 13
    assert settings.process.lite is True
    assert settings.process.tls_cert_file == Path("c.pem")
    assert load(join="a:1,b:2").process.join == ("a:1", "b:2")


@pytest.mark.parametrize(
    ("text", "expected"), [("true", True), ("YES", True), ("1", True), ("false", False), ("no", False), ("0", False)]
)
def test_env_booleans(text: str, expected: bool) -> None:
    assert load(env={"SHARDGRID_LITE": text}).process.lite is expected


def test_an_empty_env_value_unsets_an_optional_setting(tmp_path: Path) -> None:
    path = write(tmp_path, "[member]\nmetrics_port = 9100\n")
    assert load(path).process.metrics_port == 9100
    assert load(path, {"SHARDGRID_METRICS_PORT": ""}).process.metrics_port is None


def test_map_tables_take_what_they_leave_out_from_the_cluster(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[cluster]\nbackup_count = 2\n[maps.orders]\nread_backup_data = true\n[maps."audit.log"]\n'
        "backup_count = 0\nasync_backup_count = 1\n",
    )
    settings = load(path)
    config = settings.member_config
    assert config.map_config("orders") == MapConfig(backup_count=2, async_backup_count=0, read_backup_data=True)
    assert config.map_config("audit.log") == MapConfig(backup_count=0, async_backup_count=1)
    assert config.map_config("other") == MapConfig(backup_count=2)
    assert [name for name, _ in config.maps] == ["orders", "audit.log"]
    assert settings.sources[("maps.orders", "read_backup_data")] == "file"
    assert settings.sources[("maps.orders", "async_backup_count")] == "default"
    rows = {(section, key): value for section, key, value, _ in describe(settings)}
    assert rows[('maps."audit.log"', "async_backup_count")] == "1"
    assert rows[("maps.orders", "backup_count")] == "2"
    # A map's own choice with no cluster-wide setting: off unless its table says so.
    assert not config.map_config("orders").serve_when_unavailable
    cache = load(write(tmp_path, "[maps.sessions]\nserve_when_unavailable = true\n")).member_config
    assert cache.map_config("sessions").serve_when_unavailable
    assert cache.serving_maps == frozenset({"sessions"})
    # An env override of the cluster's count reaches the maps that did not set their own.
    assert load(path, {"SHARDGRID_BACKUP_COUNT": "3"}).member_config.map_config("orders").backup_count == 3


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[cluster]\npartiton_count = 3\n", "[cluster] partiton_count: unknown key; did you mean partition_count?"),
        ("[member]\nzzz = 3\n", "[member] zzz: unknown key"),
        ("[maps.orders]\nbackups = 3\n", "[maps.orders] backups: unknown key; did you mean backup_count?"),
        ("[clustr]\ntick_ms = 3\n", "unknown table [clustr]; did you mean cluster?"),
        ("port = 5701\n", "port is outside a table; settings go in [member], [cluster] or [maps.<name>]; "),
        ("[maps]\norders = 3\n", "[maps] orders: expected a table [maps.orders]"),
        ('[cluster]\npartition_count = "abc"\n', '[cluster] partition_count: expected an integer, got "abc"'),
        ("[cluster]\npartition_count = true\n", "[cluster] partition_count: expected an integer, got true"),
        ('[member]\nport = "5701"\n', '[member] port: expected an integer, got "5701"'),
        ('[cluster]\nread_backup_data = "yes"\n', "read_backup_data: expected a boolean (true/false), got"),
        ('[member]\njoin = "a:1"\n', '[member] join: expected a list of strings, got "a:1"'),
        ('[member]\nlog_format = "xml"\n', '[member] log_format: expected one of "text", "json", got "xml"'),
        ("[cluster]\ntick_ms = -5\n", "[cluster] tick_ms: expected a non-negative integer, got -5"),
        ("[cluster]\npartition_count = 0\n", "[cluster] partition_count: partition_count out of range, got 0"),
        ("[maps.orders]\nbackup_count = 7\n", "[maps.orders] backup_count: map 'orders': backup_count out of range"),
        ('[maps.""]\nbackup_count = 1\n', "shardgrid.toml: a map name is 1 to 256 characters"),
        ("[member]\nport = 65536\n", "[member] port: must be 0..65535, got 65536"),
        ('[member]\njoin = ["10.0.0.1"]\n', '[member] join: expected host:port with a port 1..65535, got "10.0.0.1"'),
        ('[member]\ntls_key_file = "k.pem"\n', "[member] tls_key_file: needs tls_cert_file"),
        ('[member]\ntls_cert_file = "c.pem"\n', "[member] tls_cert_file: needs tls_key_file"),
        ('[member]\ntls_ca_file = "ca.pem"\n', "[member] tls_ca_file: needs tls_cert_file"),
        ("[member]\ntls_ca_file = 3\n", "[member] tls_ca_file: expected a string, got 3"),
    ],
)
def test_a_bad_file_names_the_file_table_key_and_what_was_expected(tmp_path: Path, toml: str, message: str) -> None:
    path = write(tmp_path, toml)
    error = error_of(path)
    assert message in error
    assert error.startswith(str(path))


def test_an_unknown_key_far_from_any_suggests_nothing(tmp_path: Path) -> None:
    assert "did you mean" not in error_of(write(tmp_path, "[member]\nzzz = 3\n"))


def test_the_brief_example_error_reads_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, '[cluster]\npartition_count = "abc"\n')
    expected = 'shardgrid.toml [cluster] partition_count: expected an integer, got "abc"'
    assert error_of(Path("shardgrid.toml")) == expected


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SHARDGRID_PARTITION_COUNT": "abc"}, "environment variable SHARDGRID_PARTITION_COUNT: expected an integer"),
        ({"SHARDGRID_PARTITION_COUNT": "0"}, "SHARDGRID_PARTITION_COUNT: partition_count out of range, got 0"),
        ({"SHARDGRID_PORT": "70000"}, "environment variable SHARDGRID_PORT: must be 0..65535, got 70000"),
        ({"SHARDGRID_JOIN": "a:1,:5701"}, 'SHARDGRID_JOIN: expected host:port with a port 1..65535, got ":5701"'),
        ({"SHARDGRID_JOIN": "a:0"}, 'SHARDGRID_JOIN: expected host:port with a port 1..65535, got "a:0"'),
        ({"SHARDGRID_HOST": ""}, "environment variable SHARDGRID_HOST: must be a non-empty name or address"),
        ({"SHARDGRID_LITE": "maybe"}, 'SHARDGRID_LITE: expected a boolean (true/false/1/0/yes/no), got "maybe"'),
        (
            {"SHARDGRID_PARTITON_COUNT": "3"},
            "environment variable SHARDGRID_PARTITON_COUNT: not a setting; did you mean SHARDGRID_PARTITION_COUNT?",
        ),
        # A check across keys is blamed on the one that was changed, naming the others with theirs.
        (
            {"SHARDGRID_LEASE_MS": "10000"},
            "environment variable SHARDGRID_LEASE_MS: failure_timeout_ms must exceed lease_ms plus "
            "clock_drift_margin_ms; with failure_timeout_ms = 5000 (default), lease_ms = 10000 (env)",
        ),
        # RaftSettings names the heartbeat without MemberConfig's raft_ prefix.
        (
            {"SHARDGRID_RAFT_HEARTBEAT_INTERVAL_MS": "900"},
            "environment variable SHARDGRID_RAFT_HEARTBEAT_INTERVAL_MS: election_timeout_ms must be at least",
        ),
        (
            {"SHARDGRID_MAX_CHUNK_BYTES": str(MAX_FRAME_BYTES)},
            "SHARDGRID_MAX_CHUNK_BYTES: max_chunk_bytes must be below max_frame_bytes",
        ),
        ({"SHARDGRID_MAX_FRAME_BYTES": "1024"}, "SHARDGRID_MAX_FRAME_BYTES: must be"),
        ({"SHARDGRID_METRICS_PORT": "5701"}, "SHARDGRID_METRICS_PORT: must differ from port"),
    ],
)
def test_a_bad_environment_variable_is_named(env: dict[str, str], message: str) -> None:
    assert message in error_of(env=env)


def test_variables_far_from_any_setting_are_someone_elses() -> None:
    env = {"SHARDGRID_SIM_SEEDS": "600", "SHARDGRID_RAFT_SEEDS": "4", "SHARDGRID_CONFIG": "x.toml", "HOME": "/"}
    assert load(env=env) == load()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"port": 70000}, "flag --port: must be 0..65535, got 70000"),
        ({"port": "x"}, 'flag --port: expected an integer, got "x"'),
        ({"port": 1.5}, "flag --port: expected an integer, got 1.5"),
        ({"join": ("a:1", "b")}, 'flag --join: expected host:port with a port 1..65535, got "b"'),
        ({"partiton_count": 3}, "flag --partiton-count: not a setting; did you mean partition_count?"),
        ({"max_voters": 10}, "flag --max-voters: max_voters must be 1..9, got 10"),
    ],
)
def test_a_bad_flag_is_named(flags: dict[str, object], message: str) -> None:
    assert message in error_of(**flags)


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        # Found by an outside tester: each was named "flag --bogus", a flag that does not exist.
        ("bogus=1", "--set bogus: not a setting"),
        ("max_parallel_migrations=x", '--set max_parallel_migrations: expected an integer, got "x"'),
        # ... and the heartbeat was called heartbeat_interval_ms, which is not a setting.
        (
            "election_timeout_ms=100",
            "--set election_timeout_ms: election_timeout_ms must be at least three times "
            "raft_heartbeat_interval_ms; with election_timeout_ms = 100 (flag), raft_heartbeat_interval_ms = 200",
        ),
    ],
)
def test_a_bad_set_is_named_as_the_set_it_was(assignment: str, message: str) -> None:
    code, out, err = run_cli("config", "show", "--set", assignment)
    assert (code, out) == (2, "")
    assert message in err
    assert "flag --" not in err
    assert "heartbeat_interval_ms" not in err.replace("raft_heartbeat_interval_ms", "")


def test_a_file_that_is_not_toml_missing_or_unreadable_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "[member\nport = = 1\n")
    assert error_of(path).startswith(f"{path}: not a valid TOML file (")
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00junk")
    assert error_of(binary).startswith(f"{binary}: not a valid TOML file (")
    assert error_of(tmp_path / "absent.toml") == f"{tmp_path / 'absent.toml'}: no such file"
    assert error_of(tmp_path).startswith(f"{tmp_path}: cannot be read (")


def test_settings_errors_are_value_errors() -> None:
    with pytest.raises(ValueError, match="SHARDGRID_PORT"):
        load(env={"SHARDGRID_PORT": "x"})


def test_the_secret_is_never_shown(tmp_path: Path) -> None:
    path = write(tmp_path, f'[member]\ncluster_secret = "{SECRET}"\n')
    settings = load(path)
    assert settings.process.cluster_secret == SECRET
    rows = {(section, key): (value, source) for section, key, value, source in describe(settings)}
    assert rows[("member", "cluster_secret")] == (SECRET_MASK, "file")
    assert SECRET not in repr(describe(settings))
    assert SECRET not in repr(settings)
    assert rows[("member", "host")] == ("127.0.0.1", "default")
    assert dict(((s, k), v) for s, k, v, _ in describe(load()))[("member", "cluster_secret")] == "(unset)"
    # Nor in an error about it.
    bad = write(tmp_path, "[member]\ncluster_secret = 1234567\n", "bad.toml")
    assert "1234567" not in error_of(bad)


def test_describe_has_one_row_per_setting() -> None:
    rows = describe(load())
    assert len(rows) == len(FIELDS["member"]) + len(FIELDS["cluster"])
    assert len({(section, key) for section, key, _, _ in rows}) == len(rows)


@given(st.integers(0, 65_535))
def test_any_port_in_range_round_trips_through_env_and_flags(port: int) -> None:
    assert load(env={"SHARDGRID_PORT": str(port)}).process.port == port
    assert load(port=str(port)).process.port == port


@given(st.integers(1, MAX_PARTITION_COUNT))
def test_any_partition_count_in_range_round_trips_through_env(count: int) -> None:
    settings = load(env={"SHARDGRID_PARTITION_COUNT": f" {count} "})
    assert settings.member_config.partition_count == count
    assert settings.member_config.settings_digest == MemberConfig(partition_count=count).settings_digest


def run_cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    # The caller's own SHARDGRID_* variables must not leak into the command under test.
    clean: dict[str, str | None] = {var: None for var in os.environ if var.startswith("SHARDGRID_")}
    result = CliRunner().invoke(cli, list(args), env={**clean, **(env or {})})
    return result.exit_code, result.stdout, result.stderr


def test_config_show_prints_an_aligned_table_with_sources(tmp_path: Path) -> None:
    path = write(tmp_path, f'[member]\ncluster_secret = "{SECRET}"\n[maps.orders]\nbackup_count = 2\n')
    code, out, err = run_cli("config", "show", "--config", str(path), env={"SHARDGRID_PORT": "5702"})
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"config file: {path}"
    header = lines[1]
    assert header.split() == ["SECTION", "KEY", "VALUE", "SOURCE"]
    columns = [header.index(word) for word in ("KEY", "VALUE", "SOURCE")]
    port_line = next(line for line in lines if line.split()[:2] == ["member", "port"])
    assert port_line.split() == ["member", "port", "5702", "env"]
    for line in lines[2:]:
        assert all(line[column - 2 : column] == "  " and line[column] != " " for column in columns), line
    assert any(line.split() == ["maps.orders", "backup_count", "2", "file"] for line in lines)
    assert SECRET not in out
    assert len(lines) == 2 + len(FIELDS["member"]) + len(FIELDS["cluster"]) + len(FIELDS["maps"])


def test_config_show_json_is_one_object_by_section(tmp_path: Path) -> None:
    path = write(tmp_path, f'[member]\ncluster_secret = "{SECRET}"\njoin = ["a:1"]\n[maps.orders]\nbackup_count = 2\n')
    code, out, _ = run_cli("config", "show", "--format", "json", env={"SHARDGRID_CONFIG": str(path)})
    assert code == 0
    document = json.loads(out)
    assert set(document) == {"config_file", "member", "cluster", "maps"}
    assert document["config_file"] == str(path)
    assert document["member"]["host"] == {"value": "127.0.0.1", "source": "default"}
    assert document["member"]["join"] == {"value": ["a:1"], "source": "file"}
    assert document["member"]["cluster_secret"] == {"value": SECRET_MASK, "source": "file"}
    assert document["member"]["tls_ca_file"] == {"value": None, "source": "default"}
    assert document["cluster"]["partition_count"] == {"value": 271, "source": "default"}
    assert set(document["cluster"]) == set(FIELDS["cluster"])
    assert document["maps"]["orders"]["backup_count"] == {"value": 2, "source": "file"}
    assert SECRET not in out


def test_config_show_without_maps_has_no_maps_key() -> None:
    code, out, _ = run_cli("config", "show", "--format", "json")
    assert code == 0
    assert set(json.loads(out)) == {"config_file", "member", "cluster"}


def test_config_show_exits_2_with_the_error_on_stderr(tmp_path: Path) -> None:
    code, out, err = run_cli("config", "show", env={"SHARDGRID_PARTITION_COUNT": "abc"})
    assert (code, out) == (2, "")
    assert err == 'environment variable SHARDGRID_PARTITION_COUNT: expected an integer, got "abc"\n'
    code, out, err = run_cli("config", "show", "--config", str(tmp_path / "absent.toml"))
    assert (code, out) == (2, "")
    assert "absent.toml: no such file" in err
