"""``shardgrid config show``: the effective settings as an aligned table or one JSON object."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shardgrid.runtime.settings import Settings, describe, effective_values


def render_text(settings: Settings) -> str:
    """One row a setting with its source, so that an operator sees at a glance what was overridden."""
    rows = [("SECTION", "KEY", "VALUE", "SOURCE"), *describe(settings)]
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    lines = [f"config file: {settings.config_path or '(none)'}"]
    for row in rows:
        lines.append("  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[3]]))
    return "\n".join(lines)


def _plain(value: object) -> object:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def render_json(settings: Settings) -> str:
    """Sections of keys, each ``{"value": ..., "source": ...}``, the maps by name under ``maps``,
    so that a script reads ``["maps"]["orders"]["backup_count"]["value"]``."""
    document: dict[str, Any] = {"config_file": str(settings.config_path) if settings.config_path else None}
    for section, key, value, source in effective_values(settings):
        table, _, name = section.partition(".")
        holder = document.setdefault(table, {})
        if name:
            holder = holder.setdefault(name, {})
        holder[key] = {"value": _plain(value), "source": source}
    return json.dumps(document, indent=2)
