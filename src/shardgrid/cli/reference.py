"""The manual's generated parts: every setting, command and metric read off the code that defines
it, and the benchmark tables read off the results files, so that the reference cannot drift from
what runs. ``docs/_ext/shardgrid_reference.py`` puts these into the pages; ``undocumented()`` is
what a test asks, so a setting, option or metric added without a description fails the suite.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import json
import textwrap
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from shardgrid.cli.bench_results import RESULTS_DIR
from shardgrid.cli.main import cli
from shardgrid.core.config import MapConfig, MemberConfig
from shardgrid.runtime.metrics import MemberMetrics, MetricSpec
from shardgrid.runtime.settings import (
    CLUSTER,
    ENV_PREFIX,
    FIELDS,
    MAPS,
    PROCESS,
    RUNTIME_CLUSTER_DEFAULTS,
    ProcessSettings,
)

SETTINGS_CLASSES: dict[str, type] = {PROCESS: ProcessSettings, CLUSTER: MemberConfig, MAPS: MapConfig}
UNITS = (
    ("_per_s", "bytes per second"),
    ("_ms", "milliseconds"),
    ("_bytes", "bytes"),
    ("_s", "seconds"),
    ("_chars", "characters"),
)


# --- settings ------------------------------------------------------------------------------------


def field_descriptions(cls: type) -> dict[str, str]:
    """Each field's attribute docstring (the string literal right below it), as written."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    found: dict[str, str] = {}
    for statement, after in itertools.pairwise(body):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            found[statement.target.id] = inspect.cleandoc(after.value.value)
    return found


def unit_of(key: str) -> str:
    return next((unit for suffix, unit in UNITS if key.endswith(suffix)), "")


def _default_of(section: str, key: str) -> object:
    if section == CLUSTER and key in RUNTIME_CLUSTER_DEFAULTS:
        return RUNTIME_CLUSTER_DEFAULTS[key]
    defaults = {PROCESS: ProcessSettings(), CLUSTER: MemberConfig(), MAPS: MapConfig()}[section]
    return getattr(defaults, key)


def _shown_default(value: object) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, tuple):
        return "`[]`" if not value else "`" + ", ".join(map(str, value)) + "`"
    if isinstance(value, int) and value >= 10_000:
        return f"`{value:_}`"
    return f"`{value}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def settings_markdown(section: str) -> str:
    """A table of one settings section: key, default, unit, environment variable, description."""
    descriptions = field_descriptions(SETTINGS_CLASSES[section])
    lines = ["| setting | default | environment variable | what it does |", "|---|---|---|---|"]
    for key in FIELDS[section]:
        unit = unit_of(key)
        default = _shown_default(_default_of(section, key)) + (f" ({unit})" if unit else "")
        env = "file only" if section == MAPS else f"`{ENV_PREFIX}{key.upper()}`"
        lines.append(f"| `{key}` | {default} | {env} | {_cell(descriptions.get(key, ''))} |")
    return "\n".join(lines) + "\n"


# --- commands ------------------------------------------------------------------------------------


def commands(group: click.Group | None = None, path: tuple[str, ...] = ("shardgrid",)) -> Iterator[Any]:
    """(path, command) for every command below ``group``, depth first, in the order --help lists."""
    if group is None:
        group = cli
    ctx = click.Context(group, info_name=path[-1])
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))


def _help_of(command: click.Command) -> str:
    return inspect.cleandoc(command.help or "").split("\f")[0].strip()


def commands_markdown() -> str:
    """One section per command: what it does, its usage, and a table of its options."""
    out: list[str] = []
    for path, command in commands():
        ctx = click.Context(command, info_name=" ".join(path))
        depth = "#" * min(len(path), 4)
        out.append(f"{depth} `{' '.join(path)}`\n")
        help_text = _help_of(command)
        if help_text:
            out.append(help_text.replace("\b\n", "") + "\n")
        usage = " ".join(command.collect_usage_pieces(ctx))
        out.append(f"```text\n{' '.join(path)} {usage}\n```\n")
        rows = [p.get_help_record(ctx) for p in command.get_params(ctx) if p.name != "help"]
        rows = [row for row in rows if row is not None]
        if rows:
            out.append("| option | what it does |\n|---|---|")
            out += [f"| `{_cell(opts)}` | {_cell(text)} |" for opts, text in rows]
            out.append("")
    return "\n".join(out)


# --- metrics -------------------------------------------------------------------------------------


def metric_specs() -> tuple[list[MetricSpec], list[str]]:
    """Every metric a member process registers, read off its registry, not off the list its
    helpers keep (a metric registered directly, ``Counter(..., registry=self.registry)``, got no
    row in the manual and passed the test: found by an outside tester); and the names of those
    the helpers did not describe (their labels unknown to the manual)."""
    metrics = MemberMetrics()
    described = {spec.name: spec for spec in metrics.specs}
    specs, unlisted = [], []
    for family in metrics.registry.collect():
        spec = described.get(family.name)
        if spec is None:
            unlisted.append(family.name)
            spec = MetricSpec(name=family.name, kind=family.type, documentation=family.documentation)
        specs.append(spec)
    return specs, unlisted


def metrics_markdown() -> str:
    lines = ["| metric | type | labels | what it counts |", "|---|---|---|---|"]
    specs, unlisted = metric_specs()
    for spec in specs:
        labels = "?" if spec.name in unlisted else ", ".join(f"`{label}`" for label in spec.labels) or "-"
        lines.append(f"| `{spec.exposed_name}` | {spec.kind} | {labels} | {_cell(spec.documentation)} |")
    return "\n".join(lines) + "\n"


# --- what lacks a description --------------------------------------------------------------------


def undocumented() -> list[str]:
    """Every setting, command, option and metric that has no description, by name."""
    missing: list[str] = []
    for section, cls in SETTINGS_CLASSES.items():
        described = field_descriptions(cls)
        missing += [f"setting [{section}] {key}" for key in FIELDS[section] if not described.get(key)]
    for path, command in commands():
        name = " ".join(path)
        if not _help_of(command):
            missing.append(f"command {name}")
        for param in command.params:
            if isinstance(param, click.Option) and not (param.help or "").strip():
                missing.append(f"option {name} {'/'.join(param.opts)}")
    specs, unlisted = metric_specs()
    missing += [f"metric {spec.name}" for spec in specs if not spec.documentation.strip()]
    missing += [f"metric {name} (registered without MemberMetrics' helpers: not described)" for name in unlisted]
    return missing


# --- benchmark results ---------------------------------------------------------------------------


# What a results file must hold for the page to show it (``bench_results.record`` writes them).
_RUN_FIELDS: dict[str, type] = {
    "bench": str,
    "recorded_at": str,
    "commit": str,
    "machine": dict,
    "command": str,
    "exit_code": int,
    "targets": list,
}
_MACHINE_FIELDS: dict[str, type] = {"cpus": int, "python": str}
_TARGET_FIELDS: dict[str, type] = {"figure": str, "comparison": str, "met": bool}


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchmarkResults:
    runs: list[dict[str, Any]]  # the readable runs, oldest first by when they were recorded
    problems: list[str]  # one per file that is not a readable run, naming it and why


def _missing(document: dict[str, Any], fields: dict[str, type], what: str) -> str:
    wrong = [
        f"{name} ({'missing' if name not in document else type(document[name]).__name__})"
        for name, kind in fields.items()
        if not isinstance(document.get(name), kind)
    ]
    return f"{what} lacks {', '.join(wrong)}" if wrong else ""


def _run_problem(document: object, benches: set[str]) -> str:
    """Why ``document`` is not a run the page can show ('' when it is)."""
    if not isinstance(document, dict):
        return f"not a JSON object but a {type(document).__name__}"
    problem = _missing(document, _RUN_FIELDS, "the run")
    if problem:
        return problem
    problem = _missing(document["machine"], _MACHINE_FIELDS, "its machine")
    if problem:
        return problem
    for number, target in enumerate(document["targets"], start=1):
        if not isinstance(target, dict):
            return f"target {number} is not an object"
        problem = _missing(target, _TARGET_FIELDS, f"target {number}")
        if problem or not {"measured", "target"} <= set(target):
            return problem or f"target {number} lacks measured or target"
    if document["bench"] not in benches:
        return f"bench {document['bench']!r} is none of shardgrid bench {', '.join(sorted(benches))}"
    if _recorded_time(document) is None:
        return f"recorded_at {document.get('recorded_at_utc', document['recorded_at'])!r} is not a time"
    return ""


def _recorded_time(document: dict[str, Any]) -> datetime | None:
    """When the run was recorded: ``recorded_at_utc`` (to the microsecond), or, in a file written
    before it existed, ``recorded_at`` (to the minute)."""
    try:
        if isinstance(document.get("recorded_at_utc"), str):
            return datetime.fromisoformat(document["recorded_at_utc"]).astimezone(UTC)
        return datetime.strptime(document["recorded_at"], "%Y-%m-%d %H:%M UTC").replace(tzinfo=UTC)
    except ValueError:
        return None


def result_files(root: Path) -> BenchmarkResults:
    """Every run recorded under ``root``, oldest first by the time each file says it was recorded
    (a file renamed to something that is not a time sorted last and was shown as the latest), and
    what is wrong with each file that is not a readable run: it is left out, and the manual's build
    warns naming it (a truncated file, or one without ``bench`` or ``machine``, failed the build
    with a KeyError; all found by an outside tester)."""
    directory = root / RESULTS_DIR
    if not directory.is_dir():
        return BenchmarkResults(runs=[], problems=[])
    benches = {path[2] for path, _ in commands() if len(path) == 3 and path[1] == "bench"}
    runs, problems = [], []
    for path in sorted(directory.glob("*.json")):
        where = path.relative_to(root)
        try:
            document = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as error:
            problems.append(f"{where}: not a readable JSON file: {error}")
            continue
        problem = _run_problem(document, benches)
        if problem:
            problems.append(f"{where}: {problem}")
            continue
        document["file"] = path.name
        runs.append(document)
    runs.sort(key=lambda document: (_recorded_time(document), document["file"]))
    return BenchmarkResults(runs=runs, problems=problems)


def _figure(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return _cell(str(value))


def benchmark_markdown(root: Path, bench: str) -> str:
    """A benchmark's section: what it measures (its command's help), then its latest recorded run:
    when, where, the targets met or missed, and its headline figures."""
    command = next(c for path, c in commands() if path[1:] == ("bench", bench))
    out = [f"## `shardgrid bench {bench}`\n", _help_of(command).replace("\b\n", "") + "\n"]
    runs = [document for document in result_files(root).runs if document["bench"] == bench]
    if not runs:
        out.append(f"No run recorded yet: `shardgrid bench {bench} --record` records one.\n")
        return "\n".join(out)
    latest = runs[-1]
    machine = latest["machine"]
    dirty = " (with uncommitted changes)" if latest.get("dirty") else ""
    out.append(
        f"Latest recorded run ({len(runs)} kept): `{latest['file']}`, {latest['recorded_at']}, commit "
        f"`{latest['commit'][:10]}`{dirty}, {machine['cpus']} CPUs, Python {machine['python']}; "
        f"`{latest['command']}` exited {latest['exit_code']}.\n"
    )
    if latest["targets"]:
        out.append("| target | measured | wanted | met |\n|---|---|---|---|")
        for target in latest["targets"]:
            met = "yes" if target["met"] else "**no**"
            wanted = f"{target['comparison']} {_figure(target['target'])}"
            out.append(f"| {_cell(target['figure'])} | {_figure(target['measured'])} | {wanted} | {met} |")
    else:
        out.append("No targets: this run was checked against none, so it says nothing about meeting them.")
    out.append("")
    figures = latest.get("figures", {})
    if figures:
        out.append("| figure | value |\n|---|---|")
        out += [f"| {_cell(name)} | {_figure(value)} |" for name, value in figures.items()]
        out.append("")
    return "\n".join(out)


# --- scenarios -----------------------------------------------------------------------------------


def scenarios_markdown(root: Path) -> str:
    """The named scenarios, one row each: the file and its description."""
    lines = ["| scenario | what it does |", "|---|---|"]
    for path in sorted((root / "scenarios").glob("*.toml")):
        description = tomllib.loads(path.read_text()).get("description", "")
        lines.append(f"| `{path.stem}` | {_cell(description)} |")
    return "\n".join(lines) + "\n"
