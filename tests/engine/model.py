"""A pure-Python model of the engine's record store: what it must do, written as plainly as
possible (dicts and lists, one entry at a time), to compare the engine with."""

from __future__ import annotations

from dataclasses import dataclass, replace

import shardgrid._engine as engine

MAX_HITS = 2**32 - 1


def heap_block_bytes(size: int) -> int:
    """glibc's malloc block for ``size`` bytes: the bytes and an 8-byte header rounded up to 16, at
    least 32; no block for no bytes."""
    return 0 if size == 0 else max(32, (size + 8 + 15) // 16 * 16)


@dataclass(frozen=True, slots=True)
class Record:
    value: bytes
    created_ms: int
    updated_ms: int
    accessed_ms: int
    expire_at_ms: int
    hits: int
    version: int

    def live(self, now_ms: int) -> bool:
        return self.expire_at_ms == 0 or now_ms < self.expire_at_ms

    def metadata(self) -> tuple[int, ...]:
        return (self.created_ms, self.updated_ms, self.accessed_ms, self.expire_at_ms, self.hits, self.version)


class ModelMap:
    """Records in a list in insertion order; a removal moves the last into the hole."""

    def __init__(self) -> None:
        self.order: list[bytes] = []
        self.records: dict[bytes, Record] = {}

    def write(self, key: bytes, value: bytes, now_ms: int, ttl_ms: int) -> None:
        # Clamped: every time a record holds stays within what a transfer takes.
        expire_at = min(now_ms + ttl_ms, engine.MAX_COUNTER) if ttl_ms else 0
        old = self.records.get(key)
        if old is None:
            self.order.append(key)
            self.records[key] = Record(value, now_ms, now_ms, now_ms, expire_at, 0, 1)
        elif old.live(now_ms):
            self.records[key] = replace(
                old,
                value=value,
                updated_ms=max(now_ms, old.created_ms),  # a clock behind the creator's: no earlier
                accessed_ms=now_ms,
                expire_at_ms=expire_at,
                version=old.version + 1,
            )
        else:  # an expired entry is replaced by a new one; only the version goes on
            self.records[key] = Record(value, now_ms, now_ms, now_ms, expire_at, 0, old.version + 1)

    def remove(self, key: bytes) -> Record | None:
        record = self.records.pop(key, None)
        if record is not None:
            at = self.order.index(key)
            last = self.order.pop()
            if at < len(self.order):
                self.order[at] = last
        return record

    def memory_bytes(self) -> int:
        return sum(
            engine.RECORD_BYTES
            + engine.INDEX_BYTES
            + heap_block_bytes(len(key) + len(record.value))
            + (engine.EXPIRY_BYTES if record.expire_at_ms else 0)
            for key, record in self.records.items()
        )


class ModelStore:
    def __init__(self) -> None:
        self.maps: dict[str, ModelMap] = {}

    def _live(self, map_name: str, key: bytes, now_ms: int) -> Record | None:
        table = self.maps.get(map_name)
        record = table.records.get(key) if table else None
        return record if record is not None and record.live(now_ms) else None

    def put(self, map_name: str, keys: list[bytes], values: list[bytes], now_ms: int, ttls: list[int]) -> list:
        previous = []
        for key, value, ttl in zip(keys, values, ttls, strict=True):
            record = self._live(map_name, key, now_ms)
            previous.append(record.value if record else None)
            self.maps.setdefault(map_name, ModelMap()).write(key, value, now_ms, ttl)
        return previous

    def put_if_absent(
        self, map_name: str, keys: list[bytes], values: list[bytes], now_ms: int, ttls: list[int]
    ) -> list:
        left = []
        for key, value, ttl in zip(keys, values, ttls, strict=True):
            record = self._live(map_name, key, now_ms)
            left.append(record.value if record else None)
            if record is None:
                self.maps.setdefault(map_name, ModelMap()).write(key, value, now_ms, ttl)
        return left

    def get(self, map_name: str, keys: list[bytes], now_ms: int) -> list:
        out = []
        for key in keys:
            record = self._live(map_name, key, now_ms)
            if record is not None:
                hits = min(record.hits + 1, MAX_HITS)
                self.maps[map_name].records[key] = replace(record, hits=hits, accessed_ms=now_ms)
            out.append(record.value if record else None)
        return out

    def remove(self, map_name: str, keys: list[bytes], now_ms: int) -> list:
        out = []
        table = self.maps.get(map_name)
        for key in keys:
            record = table.remove(key) if table else None
            out.append(record.value if record is not None and record.live(now_ms) else None)
        if table is not None and not table.records:
            del self.maps[map_name]
        return out

    def metadata(self, map_name: str, keys: list[bytes], now_ms: int) -> list:
        out = []
        for key in keys:
            record = self._live(map_name, key, now_ms)
            out.append(record.metadata() if record else None)
        return out

    def scan(self, map_name: str, offset: int, max_entries: int, now_ms: int) -> tuple[list, int]:
        table = self.maps.get(map_name)
        order = table.order if table else []
        start = min(offset, len(order))
        end = min(start + max_entries, len(order))
        assert table is not None or end == 0
        return [(k, table.records[k].value) for k in order[start:end] if table.records[k].live(now_ms)], end

    def expired(self, map_name: str, now_ms: int, max_entries: int) -> list[bytes]:
        table = self.maps.get(map_name)
        if table is None:
            return []
        due = [
            (record.expire_at_ms, table.order.index(key), key)
            for key, record in table.records.items()
            if record.expire_at_ms and record.expire_at_ms <= now_ms
        ]
        return [key for _, _, key in sorted(due)[:max_entries]]

    def memory_bytes(self, map_name: str) -> int:
        table = self.maps.get(map_name)
        if table is None:
            return 0
        return engine.MAP_BYTES + heap_block_bytes(len(map_name.encode())) + table.memory_bytes()
