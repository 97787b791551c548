"""The engine enforces the core's bounds: its constants are the numbers of ``core/limits.py``."""

from __future__ import annotations

import shardgrid._engine as engine
from shardgrid.core import limits


def test_the_engine_bounds_are_the_cores() -> None:
    assert engine.MAX_KEY_BYTES == limits.MAX_KEY_BYTES
    assert engine.MAX_VALUE_BYTES == limits.MAX_VALUE_BYTES
    assert engine.MAX_OPERATIONS_PER_REQUEST == limits.MAX_OPERATIONS_PER_REQUEST
    assert engine.MAX_MAP_NAME_CHARS == limits.MAX_MAP_NAME_CHARS
    assert engine.MAX_COUNTER == limits.MAX_COUNTER
    assert engine.MAX_ENTRIES_PER_CHUNK == limits.MAX_ENTRIES_PER_CHUNK
    assert engine.MAX_PARTITION_COUNT == limits.MAX_PARTITION_COUNT


def test_the_packed_format_is_the_cores() -> None:
    assert engine.LENGTH_BYTES == 4
    assert engine.NUMBER_BYTES == 8
    assert engine.METADATA_FIELDS == ("created_ms", "updated_ms", "accessed_ms", "expire_at_ms", "hits", "version")
