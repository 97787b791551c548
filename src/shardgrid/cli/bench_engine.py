"""``shardgrid bench engine``: what the storage engine (``shardgrid._engine``) costs on its own,
against the Python dicts that hold a member's records today.

Batches of 1,000 entries of 10-byte keys and 100-byte values, as ``bench member`` sends them:

- one boundary call: a call that crosses into the engine and back with no work (``entry_count``),
  and a get of one key (its packed column in, three ``bytes`` out), next to one dict lookup;
- put and get of a batch, store only: the engine from packed columns, the dict from tuples of
  ``bytes`` (each side's own input), into a store of 100,000 entries;
- the same through the codec, as a member meets them: the request decoded from msgpack (the dict's
  one ``bytes`` object per key and value, the engine's four per column), applied over the batch's
  keys or as new keys into an empty store, and for a get the reply encoded;
- memory per entry of 100,000: the engine's own count, the process's resident memory it added, and
  what the dict and its ``bytes`` objects took (tracemalloc).

Each timing is the best of several runs (the least disturbed by the rest of the machine), with
the collector off while timing; the figures are per entry or per call. Nothing here is wired to the
data path yet: this is the engine's budget, before the member adds its own work.
"""

from __future__ import annotations

import gc
import resource
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from shardgrid._engine import RecordStore
from shardgrid.cli.bench_results import Target, with_targets
from shardgrid.core.store import packed_lengths

MAP_NAME = "bench"
BATCH_ENTRIES = 1_000
STORED_ENTRIES = 100_000
KEY_BYTES = 10
VALUE_BYTES = 100
NOW_MS = 1_000
REPEATS = 51
CALLS_TIMED = 100_000

# name: (what it is, comparison, target). Issue 34's member targets (put_all of these batches at
# 1.5M entries/s with one sync backup, so 3M writes/s between owner and backup; get_all at 3M) are
# for the whole data path; the engine's own share must leave most of that budget to the rest, and
# beat the dicts it replaces once the codec's objects are counted. The memory target is issue
# 34's, 180 bytes per entry: the present record layout counts 200, so this bench exits 1 until a
# leaner layout (keys and values in a shared buffer, smaller metadata) lands.
TARGETS: dict[str, tuple[str, str, float]] = {
    "engine_put_new_entries_per_second": ("engine put of new keys, 1,000 a call into 100,000: entries/s", ">=", 3e6),
    "engine_put_entries_per_second": ("engine put over 1,000 held keys of 100,000: entries/s", ">=", 10e6),
    "engine_get_entries_per_second": ("engine get of 1,000 held keys of 100,000: entries/s", ">=", 10e6),
    "codec_put_speedup": ("put through the codec: the engine's entries/s over the dict's", ">=", 1.5),
    "codec_get_speedup": ("get through the codec: the engine's entries/s over the dict's", ">=", 1.5),
    "engine_counted_bytes_per_entry": ("the engine's count per 10-byte key and 100-byte value: bytes", "<=", 180),
}


# The request and reply shapes of each path through the codec (msgpack, as the wire).
class TupleColumns(msgspec.Struct, array_like=True):
    keys: tuple[bytes, ...]
    values: tuple[bytes, ...]


class TupleKeys(msgspec.Struct, array_like=True):
    keys: tuple[bytes, ...]


class TupleValues(msgspec.Struct, array_like=True):
    values: tuple[bytes | None, ...]


class PackedColumns(msgspec.Struct, array_like=True):
    keys: bytes
    key_lengths: bytes
    values: bytes
    value_lengths: bytes


class PackedKeys(msgspec.Struct, array_like=True):
    keys: bytes
    key_lengths: bytes


class PackedValues(msgspec.Struct, array_like=True):
    values: bytes
    value_lengths: bytes
    present: bytes


def _keys(start: int, count: int) -> list[bytes]:
    """``count`` distinct 10-byte keys from ``start`` on."""
    return [b"k%09d" % n for n in range(start, start + count)]


def _value(n: int) -> bytes:
    return (b"%08d" % n) * (VALUE_BYTES // 8) + b"v" * (VALUE_BYTES % 8)


def _packed(items: list[bytes]) -> tuple[bytes, bytes]:
    return b"".join(items), packed_lengths([len(item) for item in items])


def _best_ns(action: Callable[[], object], repeats: int | None = None) -> int:
    """The best wall time of ``action`` (run ``repeats`` times, REPEATS unless given), in ns, the
    collector off."""
    times = []
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats or REPEATS):
            started = time.perf_counter_ns()
            action()
            times.append(time.perf_counter_ns() - started)
    finally:
        if enabled:
            gc.enable()
    return min(times)


def _per_call_ns(call: Callable[[], object]) -> float:
    """One call's cost, from the best of several loops of CALLS_TIMED calls."""
    calls = CALLS_TIMED

    def loop() -> None:
        for _ in range(calls):
            call()

    return round(_best_ns(loop) / calls, 1)


def _rate(entries: int, ns: int) -> int:
    return round(entries * 1e9 / ns)


def _resident_bytes() -> int | None:
    """The process's resident memory (Linux's /proc; None elsewhere)."""
    try:
        fields = Path("/proc/self/statm").read_text().split()
    except OSError:
        return None
    return int(fields[1]) * resource.getpagesize()


def memory_per_entry() -> dict[str, Any]:
    """Bytes per stored entry, of STORED_ENTRIES: the engine's count and the resident memory it
    added, the dict's (its table, and a ``bytes`` object per key and value) as tracemalloc counts
    them."""
    entries = STORED_ENTRIES
    batches = [
        (_keys(n, BATCH_ENTRIES), [_value(n + i) for i in range(BATCH_ENTRIES)])
        for n in range(0, entries, BATCH_ENTRIES)
    ]
    columns = [(_packed(keys), _packed(values)) for keys, values in batches]
    gc.collect()
    before = _resident_bytes()
    store = RecordStore(7)
    for (keys, key_lengths), (values, value_lengths) in columns:
        store.put(MAP_NAME, keys, key_lengths, values, value_lengths, NOW_MS)
    after = _resident_bytes()
    engine_counted = store.memory_bytes(MAP_NAME) / entries
    del store
    tracemalloc.start()
    baseline = tracemalloc.get_traced_memory()[0]
    records: dict[bytes, bytes] = {}
    for keys, values in batches:
        # As the codec hands them to a member: new bytes objects, not the benchmark's own.
        records.update(zip(map(bytes, map(bytearray, keys)), map(bytes, map(bytearray, values)), strict=True))
    dict_bytes = tracemalloc.get_traced_memory()[0] - baseline
    tracemalloc.stop()
    return {
        "entries": entries,
        "engine_counted_bytes_per_entry": round(engine_counted, 1),
        "engine_resident_bytes_per_entry": None
        if before is None or after is None
        else round((after - before) / entries, 1),
        "dict_traced_bytes_per_entry": round(dict_bytes / entries, 1),
    }


def store_only() -> dict[str, Any]:
    """Put and get of one batch into a store of STORED_ENTRIES entries, each side from its own input."""
    batches = STORED_ENTRIES // BATCH_ENTRIES
    keys = [_keys(n * BATCH_ENTRIES, BATCH_ENTRIES) for n in range(batches)]
    values = [[_value(i) for i in range(BATCH_ENTRIES)]] * batches
    packed_keys = [_packed(k) for k in keys]
    packed_values = _packed(values[0])
    store = RecordStore(7)
    records: dict[bytes, bytes] = {}

    def engine_fill() -> None:
        for key_column in packed_keys:
            store.put(MAP_NAME, *key_column, *packed_values, NOW_MS)

    def dict_fill() -> None:
        for batch in keys:
            records.update(zip(batch, values[0], strict=True))

    # The first fill inserts (timed once: a fill is many batches); the later ones overwrite.
    engine_insert_ns = _best_ns(engine_fill, repeats=1)
    dict_insert_ns = _best_ns(dict_fill, repeats=1)
    middle_keys, middle_packed = keys[batches // 2], packed_keys[batches // 2]
    figures = {
        "engine_put_new_entries_per_second": _rate(STORED_ENTRIES, engine_insert_ns),
        "dict_put_new_entries_per_second": _rate(STORED_ENTRIES, dict_insert_ns),
        "engine_put_entries_per_second": _rate(
            BATCH_ENTRIES, _best_ns(lambda: store.put(MAP_NAME, *middle_packed, *packed_values, NOW_MS))
        ),
        "dict_put_entries_per_second": _rate(
            BATCH_ENTRIES, _best_ns(lambda: records.update(zip(middle_keys, values[0], strict=True)))
        ),
        "engine_put_previous_entries_per_second": _rate(
            BATCH_ENTRIES,
            _best_ns(lambda: store.put(MAP_NAME, *middle_packed, *packed_values, NOW_MS, return_previous=True)),
        ),
        "engine_get_entries_per_second": _rate(
            BATCH_ENTRIES, _best_ns(lambda: store.get(MAP_NAME, *middle_packed, NOW_MS))
        ),
        "dict_get_entries_per_second": _rate(BATCH_ENTRIES, _best_ns(lambda: list(map(records.get, middle_keys)))),
    }
    one_key = _packed(middle_keys[:1])
    one = middle_keys[0]
    figures |= {
        "boundary_call_ns": _per_call_ns(lambda: store.entry_count(MAP_NAME)),
        "engine_get_one_key_ns": _per_call_ns(lambda: store.get(MAP_NAME, *one_key, NOW_MS)),
        "dict_get_one_key_ns": _per_call_ns(lambda: records.get(one)),
        "packing_1000_values_us": round(
            _best_ns(lambda: _packed(values[0])) / 1000, 1
        ),  # what a client spends to send a batch packed (once, where it serializes)
    }
    return figures


def through_the_codec() -> dict[str, Any]:
    """A batch as a member meets it: the request decoded from msgpack, applied (and for a get, the
    reply encoded), with one bytes object per key and value (the dict) or per column (the engine)."""
    keys = _keys(0, BATCH_ENTRIES)
    values = [_value(i) for i in range(BATCH_ENTRIES)]
    encoder = msgspec.msgpack.Encoder()
    tuple_put = encoder.encode(TupleColumns(tuple(keys), tuple(values)))
    packed_put = encoder.encode(PackedColumns(*_packed(keys), *_packed(values)))
    tuple_get = encoder.encode(TupleKeys(tuple(keys)))
    packed_get = encoder.encode(PackedKeys(*_packed(keys)))
    decode_tuple_put = msgspec.msgpack.Decoder(TupleColumns).decode
    decode_packed_put = msgspec.msgpack.Decoder(PackedColumns).decode
    decode_tuple_get = msgspec.msgpack.Decoder(TupleKeys).decode
    decode_packed_get = msgspec.msgpack.Decoder(PackedKeys).decode
    store = RecordStore(7)
    records: dict[bytes, bytes] = {}

    def dict_put() -> None:
        request = decode_tuple_put(tuple_put)
        records.update(zip(request.keys, request.values, strict=True))

    def engine_put() -> None:
        request = decode_packed_put(packed_put)
        store.put(MAP_NAME, request.keys, request.key_lengths, request.values, request.value_lengths, NOW_MS)

    def dict_get() -> bytes:
        request = decode_tuple_get(tuple_get)
        return encoder.encode(TupleValues(tuple(map(records.get, request.keys))))

    def engine_get() -> bytes:
        request = decode_packed_get(packed_get)
        return encoder.encode(PackedValues(*store.get(MAP_NAME, request.keys, request.key_lengths, NOW_MS)))

    def dict_put_new() -> None:
        request = decode_tuple_put(tuple_put)
        dict(zip(request.keys, request.values, strict=True))

    def engine_put_new() -> None:
        request = decode_packed_put(packed_put)
        fresh = RecordStore(7)
        fresh.put(MAP_NAME, request.keys, request.key_lengths, request.values, request.value_lengths, NOW_MS)

    dict_put()
    engine_put()
    figures = {
        "codec_dict_put_new_entries_per_second": _rate(BATCH_ENTRIES, _best_ns(dict_put_new)),
        "codec_engine_put_new_entries_per_second": _rate(BATCH_ENTRIES, _best_ns(engine_put_new)),
        "codec_dict_put_entries_per_second": _rate(BATCH_ENTRIES, _best_ns(dict_put)),
        "codec_engine_put_entries_per_second": _rate(BATCH_ENTRIES, _best_ns(engine_put)),
        "codec_dict_get_entries_per_second": _rate(BATCH_ENTRIES, _best_ns(dict_get)),
        "codec_engine_get_entries_per_second": _rate(BATCH_ENTRIES, _best_ns(engine_get)),
        "request_bytes_put_tuples": len(tuple_put),
        "request_bytes_put_packed": len(packed_put),
    }
    figures["codec_put_speedup"] = round(
        figures["codec_engine_put_entries_per_second"] / figures["codec_dict_put_entries_per_second"], 2
    )
    figures["codec_get_speedup"] = round(
        figures["codec_engine_get_entries_per_second"] / figures["codec_dict_get_entries_per_second"], 2
    )
    return figures


def targets_of(figures: dict[str, Any]) -> list[Target]:
    return [
        Target(name=name, figure=figure, measured=figures[name], comparison=comparison, wanted=wanted)
        for name, (figure, comparison, wanted) in TARGETS.items()
    ]


def run_engine_bench() -> dict[str, Any]:
    memory = memory_per_entry()  # first, while the heap holds little that a new store could reuse
    figures = {**store_only(), **through_the_codec(), **memory}
    report = {
        "benchmark": "engine",
        "batch_entries": BATCH_ENTRIES,
        "key_bytes": KEY_BYTES,
        "value_bytes": VALUE_BYTES,
        "stored_entries": STORED_ENTRIES,
        "figures": figures,
    }
    return with_targets(report, targets_of(figures))


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """The figures the targets do not show: the dict's side of each, and the boundary's cost."""
    shown = set(TARGETS)
    return {name: value for name, value in report["figures"].items() if name not in shown}
