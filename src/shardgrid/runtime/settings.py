"""A member process's settings, from defaults, a TOML file, the environment and flags.

Later sources win: flags over ``SHARDGRID_*`` environment variables over the file over the
defaults written on the dataclasses below. The file has three kinds of table:

- ``[member]``: this process (``ProcessSettings``): where it listens, whom it joins, its TLS files;
- ``[cluster]``: the core's ``MemberConfig``, every public field but ``maps``;
- ``[maps.<name>]``: one map's replication (``MapConfig``); a key the table leaves out takes the
  ``[cluster]`` value, so a map that only turns on ``read_backup_data`` keeps the cluster's counts.

The accepted keys and their types are read off the dataclass fields, so a field added to
``MemberConfig`` is configurable at once and cannot drift from a list kept here. Every environment
variable is ``SHARDGRID_<FIELD>`` in upper case; one that is not a setting is left alone (the test
suite has its own), unless it is so close to one that it is surely a typo. A bad setting is a
``SettingsError`` naming where it came from, the key and what was expected.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, fields
from difflib import get_close_matches
from os import PathLike
from pathlib import Path
from types import MappingProxyType, NoneType, UnionType
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from shardgrid.core.config import MapConfig, MemberConfig
from shardgrid.core.errors import ConfigError
from shardgrid.core.limits import MAX_FRAME_BYTES, MAX_REQUEST_BYTES
from shardgrid.runtime.machine_memory import default_max_memory_bytes

PROCESS = "member"
CLUSTER = "cluster"
MAPS = "maps"
ENV_PREFIX = "SHARDGRID_"
CONFIG_PATH_ENV = "SHARDGRID_CONFIG"  # the file itself: read by the command line, not a setting
SECRET_MASK = "********"
_TRUE = frozenset({"true", "1", "yes"})
_FALSE = frozenset({"false", "0", "no"})


# Where a member process's default differs from the core's (which is the simulator's): over TCP a
# chunk window is resent when its connection comes back (LinkRestored), so the timer is a backstop,
# of this long or a third of migration_timeout_ms when that is shorter (it must resend before the
# leader gives up on the migration).
RUNTIME_CLUSTER_DEFAULTS: Mapping[str, int] = MappingProxyType({"transfer_resend_ms": 5_000})
BACKSTOP_SHARE_OF_MIGRATION_TIMEOUT = 3


class SettingsError(ConfigError):
    """A setting the process cannot start with. The message names the source (file and table,
    environment variable or flag), the key and what was wrong, so the operator can fix it without
    reading code; ``key`` and ``problem`` let the loader re-word an error it did not raise."""

    def __init__(self, message: str, key: str | None = None, problem: str | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.problem = problem if problem is not None else message


def _check(condition: bool, key: str, problem: str) -> None:
    if not condition:
        raise SettingsError(f"{key}: {problem}", key, problem)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessSettings:
    """What a member process needs that the core never sees (``data_dir`` only makes the core
    persistent). None of it may change what the core decides, so two members with different values
    here still agree on every copy they keep."""

    host: str = "127.0.0.1"
    """The address this member listens on and announces to the others: a name or address they can
    reach it at. Loopback by default, so a new member is never reachable from the network by
    accident."""
    port: int = 5701
    """The TCP port it listens on; 0 lets the system pick one (the log says which)."""
    join: tuple[str, ...] = ()
    """host:port of members to ask for the cluster (a comma-separated list in a variable or a
    flag). Its own address may or may not be among them."""
    cluster_name: str = "shardgrid"
    """The cluster's name: a member or client of another cluster is turned away at the handshake."""
    cluster_secret: str | None = field(default=None, repr=False)
    """The secret every member and client proves at the handshake (HMAC-SHA256 over both nonces).
    Never shown by `config show` or in logs; better set through the environment than a flag."""
    lite: bool = False
    """A lite member joins the cluster but holds no partitions; it can be promoted later."""
    tls_cert_file: Path | None = None
    """This member's certificate (PEM): with `tls_key_file`, the member speaks TLS."""
    tls_key_file: Path | None = None
    """The private key of `tls_cert_file` (PEM)."""
    tls_ca_file: Path | None = None
    """With TLS: members and clients must present a certificate this CA signed."""
    log_format: Literal["text", "json"] = "text"
    """How log lines are written: `text` for people, `json` (one object per line) for collectors."""
    metrics_port: int | None = None
    """Serve Prometheus metrics over HTTP on this port (on `host`); unset, no metrics endpoint."""
    handshake_timeout_ms: int = 5_000
    """A connection that has not finished the handshake by then is closed."""
    max_connections_per_address: int = 4
    """Member connections kept per peer identity; more are refused."""
    max_frame_bytes: int = MAX_FRAME_BYTES
    """The largest frame a peer may send; a longer one closes its connection before it is read.
    At least 8.25 MiB, so that every request a client sends fits in one frame."""
    write_high_water_bytes: int = 4 * 1024 * 1024
    """Unsent bytes to one peer before the member stops reading that peer's requests (a client) or,
    at four times this, cuts the peer off (a member that does not read its frames)."""
    client_frame_budget_bytes: int = 128 * 1024 * 1024
    """Part-read frames all client connections may hold at once: a client claims a large frame's
    length before the rest is read, and waits, its reading paused, while the budget is spent."""
    frame_timeout_ms: int = 30_000
    """A client's claimed frame must be whole this long after its claim was granted, or its
    connection is closed."""
    frame_stall_timeout_ms: int = 5_000
    """A client's claimed frame that gets no byte for this long while it is read closes its
    connection."""
    data_dir: Path | None = None
    """A directory where the member keeps its state across crashes and restarts (its identity, the
    metadata log and every replica it holds), writing and syncing it before anything that depends
    on it leaves the process; restarted on it, the member comes back as itself with its data. Unset,
    the member keeps everything in memory and a restart is a new, empty member. Needs a fixed
    `port`: a member comes back at its address."""

    def validate(self) -> None:
        _check(bool(self.host) and self.host == self.host.strip(), "host", "must be a non-empty name or address")
        _check(0 <= self.port <= 65_535, "port", f"must be 0..65535, got {self.port}")
        for address in self.join:
            _check(is_address(address), "join", f'expected host:port with a port 1..65535, got "{address}"')
        _check(bool(self.cluster_name.strip()), "cluster_name", "must not be empty")
        _check(self.cluster_secret != "", "cluster_secret", "must not be empty (leave it out for none)")
        _check(self.tls_cert_file is None or self.tls_key_file is not None, "tls_cert_file", "needs tls_key_file")
        _check(self.tls_key_file is None or self.tls_cert_file is not None, "tls_key_file", "needs tls_cert_file")
        _check(self.tls_ca_file is None or self.tls_cert_file is not None, "tls_ca_file", "needs tls_cert_file")
        _check(self.log_format in ("text", "json"), "log_format", f'must be "text" or "json", got "{self.log_format}"')
        _check(
            self.data_dir is None or self.port != 0,
            "data_dir",
            "needs a fixed port (not 0): a member comes back as itself at its address",
        )
        if self.metrics_port is not None:
            _check(1 <= self.metrics_port <= 65_535, "metrics_port", f"must be 1..65535, got {self.metrics_port}")
            _check(self.metrics_port != self.port, "metrics_port", "must differ from port")
        _check(self.handshake_timeout_ms > 0, "handshake_timeout_ms", "must be positive")
        _check(self.max_connections_per_address >= 1, "max_connections_per_address", "must be at least 1")
        # Any request a client sends (MAX_REQUEST_BYTES of keys and values, their headers and the
        # partition ids of up to MAX_OPERATIONS_PER_REQUEST keys), and a backup's copy of it, must fit
        # in a frame (found by an outside tester: at 4.25 MiB a client's 8 MiB put_all request was
        # refused, and resent on a new connection, until its call timed out), and the codec sends
        # nothing over MAX_FRAME_BYTES, so a larger limit would never be used.
        smallest = MAX_REQUEST_BYTES + 256 * 1024
        _check(
            smallest <= self.max_frame_bytes <= MAX_FRAME_BYTES,
            "max_frame_bytes",
            f"must be {smallest}..{MAX_FRAME_BYTES}, got {self.max_frame_bytes}",
        )
        _check(self.write_high_water_bytes > 0, "write_high_water_bytes", "must be positive")
        # Every frame must fit the budget alone, or a claim of it would wait for ever.
        _check(
            self.client_frame_budget_bytes >= self.max_frame_bytes,
            "client_frame_budget_bytes",
            f"must be at least max_frame_bytes ({self.max_frame_bytes}), got {self.client_frame_budget_bytes}",
        )
        _check(self.frame_timeout_ms > 0, "frame_timeout_ms", "must be positive")
        _check(
            0 < self.frame_stall_timeout_ms <= self.frame_timeout_ms,
            "frame_stall_timeout_ms",
            f"must be positive and at most frame_timeout_ms ({self.frame_timeout_ms}), "
            f"got {self.frame_stall_timeout_ms}",
        )


def is_address(address: str) -> bool:
    """host:port with a port 1..65535, as members are named in ``join`` and on the command line."""
    host, colon, port = address.rpartition(":")
    return bool(colon and host.strip() and port.isdigit() and 1 <= int(port) <= 65_535)


# Core settings a process does not take from its settings: ``persistent`` follows from ``data_dir``.
_NOT_SETTABLE = frozenset({MAPS, "persistent"})


def _settable(cls: type) -> dict[str, Any]:
    """A dataclass's settable fields and their types: every init field but private ones and
    those above (``maps`` has tables of its own)."""
    hints = get_type_hints(cls)
    return {
        f.name: hints[f.name]
        for f in fields(cls)
        if f.init and not f.name.startswith("_") and f.name not in _NOT_SETTABLE
    }


FIELDS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {PROCESS: _settable(ProcessSettings), CLUSTER: _settable(MemberConfig), MAPS: _settable(MapConfig)}
)
_SECTION_OF = {key: section for section in (PROCESS, CLUSTER) for key in FIELDS[section]}
_SECRETS = frozenset({"cluster_secret"})


@dataclass(frozen=True, slots=True)
class Settings:
    """The effective settings and where each came from: ``sources`` maps (section, key) to
    ``default``, ``file``, ``env`` or ``flag``; a map's section is ``maps.<name>``."""

    process: ProcessSettings
    member_config: MemberConfig
    sources: Mapping[tuple[str, str], str]
    config_path: Path | None = None


class _Expected(Exception):
    """A value of the wrong type; the loader adds where it came from."""


def _convert(raw: object, hint: Any, text: bool) -> object:
    """``raw`` as a value of type ``hint``. ``text`` values (environment variables, string flags)
    are parsed; TOML values must already have the type, so that ``port = "5701"`` is refused."""
    origin = get_origin(hint)
    if origin in (Union, UnionType):
        if raw == "":  # an optional setting set to nothing is not set
            return None
        (inner,) = (arg for arg in get_args(hint) if arg is not NoneType)
        return _convert(raw, inner, text)
    if origin is Literal:
        if raw in get_args(hint):
            return raw
        raise _Expected("one of " + ", ".join(f'"{choice}"' for choice in get_args(hint)))
    if origin is tuple:
        if text and isinstance(raw, str):
            return tuple(part.strip() for part in raw.split(",") if part.strip())
        if isinstance(raw, list | tuple) and all(isinstance(item, str) for item in raw):
            return tuple(raw)
        raise _Expected("a list of strings" + (" (comma-separated)" if text else ""))
    if hint is bool:
        if text and isinstance(raw, str) and raw.strip().lower() in _TRUE | _FALSE:
            return raw.strip().lower() in _TRUE
        if isinstance(raw, bool):
            return raw
        raise _Expected("a boolean (true/false" + ("/1/0/yes/no)" if text else ")"))
    if hint is int:
        if text and isinstance(raw, str) and re.fullmatch(r"\s*[+-]?[0-9]+\s*", raw):
            raw = int(raw)
        if isinstance(raw, int) and not isinstance(raw, bool):
            if raw < 0:  # every integer setting is a count, a size, a duration or a port
                raise _Expected("a non-negative integer")
            return raw
        raise _Expected("an integer")
    if hint is str and isinstance(raw, str):
        return raw
    if hint is Path and isinstance(raw, str | PathLike) and str(raw):
        return Path(raw)
    if hint in (str, Path):
        raise _Expected("a string")
    raise TypeError(f"no settings of type {hint!r}")  # a new field type: teach _convert to read it


def _shown(key: str, value: object) -> str:
    if key in _SECRETS:
        return "(hidden)"
    plain = isinstance(value, str | bool | int | float | list | dict)
    return json.dumps(value, default=str) if plain else str(value)


def _suggestion(key: str, known: Iterable[str]) -> str:
    close = get_close_matches(key, list(known), n=1)
    return f"; did you mean {close[0]}?" if close else ""


def _table(section: str) -> str:
    if section.startswith(MAPS + "."):
        name = section[len(MAPS) + 1 :]
        return f"[{MAPS}.{name if re.fullmatch(r'[A-Za-z0-9_-]+', name) else json.dumps(name)}]"
    return f"[{section}]"


class _Loader:
    """Layers the sources one over another, remembering where each value came from."""

    def __init__(self, config_path: Path | None) -> None:
        self.path = config_path
        self.values: dict[tuple[str, str], object] = {}
        self.origins: dict[tuple[str, str], tuple[str, str]] = {}  # (kind, where) of each value
        for section, defaults in ((PROCESS, ProcessSettings()), (CLUSTER, MemberConfig())):
            for key in FIELDS[section]:
                own = RUNTIME_CLUSTER_DEFAULTS if section == CLUSTER else {}
                self.values[(section, key)] = own[key] if key in own else getattr(defaults, key)
                self.origins[(section, key)] = ("default", f"{_table(section)} {key} (default)")
        # Each member's own: half the memory this process may use (its cgroup's or the machine's).
        self.values[(CLUSTER, "max_memory_bytes")] = default_max_memory_bytes()
        self.origins[(CLUSTER, "max_memory_bytes")] = (
            "default",
            f"{_table(CLUSTER)} max_memory_bytes (default: half the memory this process may use)",
        )
        self.maps: list[str] = []

    def set(self, section: str, key: str, raw: object, kind: str, where: str, text: bool) -> None:
        try:
            self.values[(section, key)] = _convert(raw, FIELDS[section.split(".")[0]][key], text)
        except _Expected as expected:
            raise SettingsError(f"{where}: expected {expected}, got {_shown(key, raw)}", key) from None
        self.origins[(section, key)] = (kind, where)

    def read_file(self, path: Path) -> None:
        try:
            document = tomllib.loads(path.read_bytes().decode("utf-8"))
        except FileNotFoundError:
            raise SettingsError(f"{path}: no such file") from None
        except OSError as error:
            raise SettingsError(f"{path}: cannot be read ({error.strerror})") from None
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
            raise SettingsError(f"{path}: not a valid TOML file ({error})") from None
        expected = f"[{PROCESS}], [{CLUSTER}] or [{MAPS}.<name>]"
        for name, content in document.items():
            if not isinstance(content, dict):
                home = f"; did you mean [{_SECTION_OF[name]}] {name}?" if name in _SECTION_OF else ""
                raise SettingsError(f"{path}: {name} is outside a table; settings go in {expected}{home}", name)
            if name not in FIELDS:
                raise SettingsError(f"{path}: unknown table [{name}]{_suggestion(name, FIELDS)} (expected {expected})")
            for map_name, table in content.items() if name == MAPS else [(None, content)]:
                section = name if map_name is None else f"{MAPS}.{map_name}"
                if not isinstance(table, dict):
                    raise SettingsError(f"{path} [{MAPS}] {map_name}: expected a table [{MAPS}.{map_name}]")
                if map_name is not None:
                    self.maps.append(map_name)
                for key, raw in table.items():
                    where = f"{path} {_table(section)} {key}"
                    if key not in FIELDS[name]:
                        raise SettingsError(f"{where}: unknown key{_suggestion(key, FIELDS[name])}", key)
                    self.set(section, key, raw, "file", where, text=False)

    def read_env(self, env: Mapping[str, str]) -> None:
        known = {ENV_PREFIX + key.upper(): key for key in _SECTION_OF}
        for var, raw in env.items():
            if not var.startswith(ENV_PREFIX) or var == CONFIG_PATH_ENV:
                continue
            if var not in known:
                close = get_close_matches(var, list(known), n=1, cutoff=0.9)
                if close:
                    raise SettingsError(f"environment variable {var}: not a setting; did you mean {close[0]}?")
                continue
            key = known[var]
            self.set(_SECTION_OF[key], key, raw, "env", f"environment variable {var}", text=True)

    def read_flags(self, flags: Mapping[str, object], assigned: Collection[str] = ()) -> None:
        """``assigned``: the keys given as ``--set KEY=VALUE``, named so in an error (a bad one was
        called 'flag --bogus', a flag that does not exist: found by an outside tester)."""
        for key, raw in flags.items():
            where = f"--set {key}" if key in assigned else f"flag --{key.replace('_', '-')}"
            if key not in _SECTION_OF:
                raise SettingsError(f"{where}: not a setting{_suggestion(key, _SECTION_OF)}", key)
            if raw is not None:  # an option not given
                self.set(_SECTION_OF[key], key, raw, "flag", where, text=isinstance(raw, str))

    def blame(self, error: ConfigError, sections: Mapping[str, str]) -> SettingsError:
        """Word a validation error by the settings it names (``sections``: key to section), at
        the first one not left at its default: that is the one the operator changed."""
        keys = list(sections)
        named: list[str] = []
        for token in re.findall(r"[a-z][a-z0-9_]*", str(error)):
            # RaftSettings says heartbeat_interval_ms for MemberConfig's raft_heartbeat_interval_ms.
            matches = [token] if token in keys else [k for k in keys if k.endswith("_" + token)]
            named += [k for k in matches if "_" in token and k not in named]
        if not named:
            return SettingsError(f"{self.path or 'settings'}: {error}")
        slots = [(sections[key], key) for key in named]
        primary = next((s for s in slots if self.origins[s][0] != "default"), slots[0])
        if len(slots) == 1:
            context = f", got {_shown(primary[1], self.values[primary])}"
        else:
            context = "; with " + ", ".join(
                f"{k} = {_shown(k, self.values[(s, k)])} ({self.origins[(s, k)][0]})" for s, k in slots
            )
        return SettingsError(f"{self.origins[primary][1]}: {error}{context}", primary[1], str(error))

    def build(self) -> Settings:
        if self.origins[(CLUSTER, "transfer_resend_ms")][0] == "default":
            timeout_ms = self.values[(CLUSTER, "migration_timeout_ms")]
            if isinstance(timeout_ms, int) and timeout_ms > 0:
                share = max(1, timeout_ms // BACKSTOP_SHARE_OF_MIGRATION_TIMEOUT)
                retry_ms = self.values[(CLUSTER, "retry_interval_ms")]
                backstop = RUNTIME_CLUSTER_DEFAULTS["transfer_resend_ms"]
                # Never sooner than an unacknowledged window's resend, unless the timeout forbids it.
                floor = retry_ms if isinstance(retry_ms, int) and retry_ms < timeout_ms else share
                self.values[(CLUSTER, "transfer_resend_ms")] = min(backstop, max(floor, share))
        process_values = {k: v for (s, k), v in self.values.items() if s == PROCESS}
        cluster_values = {k: v for (s, k), v in self.values.items() if s == CLUSTER}
        process = ProcessSettings(**process_values)
        try:
            process.validate()
        except SettingsError as error:
            raise SettingsError(f"{self.origins[(PROCESS, str(error.key))][1]}: {error.problem}", error.key) from None
        try:
            MemberConfig(**cluster_values).validate()
        except ConfigError as error:
            raise self.blame(error, dict.fromkeys(cluster_values, CLUSTER)) from None
        maps = []
        for name in self.maps:
            section = f"{MAPS}.{name}"
            for key in FIELDS[MAPS]:  # what the table left out, it takes from [cluster]
                if (section, key) in self.values:
                    continue
                if (CLUSTER, key) in self.values:
                    self.values[(section, key)] = self.values[(CLUSTER, key)]
                    self.origins[(section, key)] = self.origins[(CLUSTER, key)]
                else:  # a map's own choice, with no cluster-wide setting (serve_when_unavailable)
                    self.values[(section, key)] = getattr(MapConfig(), key)
                    self.origins[(section, key)] = ("default", f"{_table(section)} {key} (default)")
            map_config = MapConfig(**{key: self.values[(section, key)] for key in FIELDS[MAPS]})
            try:
                map_config.validate(name)
            except ConfigError as error:
                raise self.blame(error, dict.fromkeys(FIELDS[MAPS], section)) from None
            maps.append((name, map_config))
        member_config = MemberConfig(**cluster_values, maps=tuple(maps), persistent=process.data_dir is not None)
        try:
            member_config.validate()
            # A migration chunk travels in one frame.
            if member_config.max_chunk_bytes >= process.max_frame_bytes:
                raise ConfigError("max_chunk_bytes must be below max_frame_bytes")
        except ConfigError as error:
            raise self.blame(error, _SECTION_OF) from None
        sources = MappingProxyType({slot: kind for slot, (kind, _) in self.origins.items()})
        return Settings(process, member_config, sources, self.path)


def load_settings(
    config_path: Path | None, env: Mapping[str, str], flags: Mapping[str, object], assigned: Collection[str] = ()
) -> Settings:
    """The effective settings: ``flags`` (by field name, None for an option not given; those in
    ``assigned`` came from ``--set``) over ``env`` over the TOML file at ``config_path`` over the
    defaults; checked whole."""
    loader = _Loader(config_path)
    if config_path is not None:
        loader.read_file(config_path)
    loader.read_env(env)
    loader.read_flags(flags, assigned)
    return loader.build()


def effective_values(settings: Settings) -> list[tuple[str, str, object, str]]:
    """(section, key, value, source) of every setting, the secret masked: what may be shown."""
    rows: list[tuple[str, str, object, str]] = []
    for section, obj in ((PROCESS, settings.process), (CLUSTER, settings.member_config)):
        for key in FIELDS[section]:
            value = getattr(obj, key)
            shown = SECRET_MASK if key in _SECRETS and value is not None else value
            rows.append((section, key, shown, settings.sources[(section, key)]))
    for name, map_config in settings.member_config.maps:
        section = f"{MAPS}.{name}"
        rows += [(section, key, getattr(map_config, key), settings.sources[(section, key)]) for key in FIELDS[MAPS]]
    return rows


def _display(value: object) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ", ".join(map(str, value)) if value else "(none)"
    return str(value)


def describe(settings: Settings) -> list[tuple[str, str, str, str]]:
    """Rows of (section, key, effective value, source) for ``shardgrid config show``."""
    return [
        (_table(section)[1:-1], key, _display(value), source)
        for section, key, value, source in effective_values(settings)
    ]
