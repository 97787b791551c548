"""The logs page (docs/operations/logs.md) names every line a member process writes at info level
and above, with the fields the code gives it (found by an outside tester: the page left out
partitions-unavailable and partitions-available, which a member logs)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from pathlib import Path

from shardgrid.runtime import logs, process

LOGS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "operations" / "logs.md"
ROW = re.compile(r"^\| `(?P<event>[a-z-]+)` \| (?P<level>[^|]+) \| (?P<fields>[^|]*) \|")


def documented() -> dict[str, tuple[str, list[str]]]:
    """Each event row of the page: its level column and the fields it names."""
    rows = {}
    for line in LOGS_PAGE.read_text().splitlines():
        if match := ROW.match(line):
            rows[match["event"]] = (match["level"].strip(), re.findall(r"`([a-z_]+)`", match["fields"]))
    return rows


def process_lines() -> dict[str, tuple[str, list[str]]]:
    """The lines the process logs itself at info and above (``logs.log`` calls, and member-failed),
    read off its source: event name to (level, fields)."""
    found = {}
    for node in ast.walk(ast.parse(inspect.getsource(process))):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        if node.func.attr == "log" and isinstance(node.func.value, ast.Name) and node.func.value.id == "logs":
            event, level_node = node.args[1], node.args[2] if len(node.args) > 2 else None
            level = level_node.attr.lower() if isinstance(level_node, ast.Attribute) else "info"
            fields = [keyword.arg for keyword in node.keywords if keyword.arg]
        elif node.func.attr == "critical":
            event, level, fields = node.args[0], "critical", ["error", "traceback"]  # the traceback: the formatter's
        else:
            continue
        assert isinstance(event, ast.Constant)
        if level != "debug":
            found[event.value] = (level, fields)
    return found


def test_every_member_event_is_on_the_logs_page_with_its_fields():
    rows = documented()
    for kind, name in logs._EVENT_NAMES.items():
        fields = [field.name for field in dataclasses.fields(kind)]
        if name == "member-cannot-leave-now":
            fields.append("note")
        assert name in rows, f"{name} is logged and not on the logs page"
        assert rows[name][1] == fields, name


def test_every_line_the_process_logs_is_on_the_logs_page_with_its_level_and_fields():
    rows = documented()
    lines = process_lines()
    assert {"member-listening", "member-exit", "member-failed", "connection-refused"} <= set(lines)
    for name, (level, fields) in lines.items():
        assert name in rows, f"{name} is logged and not on the logs page"
        assert rows[name] == (level, fields), name


def test_the_logs_page_names_no_line_that_is_not_logged():
    logged = set(logs._EVENT_NAMES.values()) | set(process_lines())
    assert sorted(set(documented()) - logged) == []
