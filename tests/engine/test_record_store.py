"""The engine's behaviour, case by case, as the core will rely on it: previous values, hits and
versions, TTL edges (0, 1, the largest, the clock at the expiry time), the owner's expiry sweep, scan
pages, the memory count of a typical record, and determinism whatever the hash seed."""

from __future__ import annotations

import struct

from shardgrid._engine import EXPIRY_BYTES, INDEX_BYTES, MAP_BYTES, MAX_COUNTER, RECORD_BYTES, RecordStore
from shardgrid.core.store import unpacked_lengths
from tests.engine.packing import found, held, numbers, pack, unpack

MAP = "m"


def test_put_answers_the_previous_values_in_the_cores_packed_format() -> None:
    store = RecordStore()
    assert found(store.put(MAP, *pack([b"a", b"b"]), *pack([b"1", b"22"]), 0, return_previous=True)) == [None, None]
    before = store.memory_bytes(MAP)
    values, lengths, present, grown = store.put(
        MAP, *pack([b"b", b"c", b"b"]), *pack([b"x", b"y", b"z"]), 1, return_previous=True
    )
    assert grown == store.memory_bytes(MAP) - before > 0  # a write says how the map's count changed
    assert list(unpacked_lengths(lengths)) == [2, 0, 1]
    assert values == b"22x"
    assert present == b"\x01\x00\x01"
    assert found(store.get(MAP, *pack([b"a", b"b", b"c", b"nope"]), 2)) == [b"1", b"z", b"y", None]


def test_without_return_previous_only_the_mask_comes_back() -> None:
    store = RecordStore()
    store.put(MAP, *pack([b"a"]), *pack([b"1"]), 0)
    assert store.put(MAP, *pack([b"a", b"b"]), *pack([b"2", b"3"]), 0)[:3] == (b"", b"", b"\x01\x00")
    assert store.remove(MAP, *pack([b"a", b"x"]), 0)[:3] == (b"", b"", b"\x01\x00")


def test_reads_count_hits_and_access_writes_count_versions() -> None:
    store = RecordStore()
    store.put(MAP, *pack([b"k"]), *pack([b"v1"]), 10)
    store.get(MAP, *pack([b"k", b"k"]), 20)
    store.put_if_absent(MAP, *pack([b"k"]), *pack([b"no"]), 25)  # present: not written, not a read
    store.put(MAP, *pack([b"k"]), *pack([b"v2"]), 30)
    (record,) = held(store, MAP)
    assert record.value == b"v2"
    # created, updated, accessed (a write is an access too), expire_at, hits, version
    assert record.metadata == (10, 30, 30, 0, 2, 2)


def test_an_entry_expires_exactly_at_now_plus_its_ttl() -> None:
    store = RecordStore()
    store.put(MAP, *pack([b"one", b"never"]), *pack([b"v", b"v"]), 1_000, ttls_ms=struct.pack("<2Q", 1, 0))
    assert found(store.get(MAP, *pack([b"one", b"never"]), 1_000)) == [b"v", b"v"]
    assert found(store.get(MAP, *pack([b"one", b"never"]), 1_001)) == [None, b"v"]
    assert found(store.get(MAP, *pack([b"one"]), 999)) == [b"v"], "a clock behind the write still reads it"
    assert found(store.get(MAP, *pack([b"never"]), MAX_COUNTER)) == [b"v"]
    assert store.entry_count(MAP) == 2, "an expired entry is hidden, not removed"


def test_the_largest_ttl_expires_at_the_largest_time_a_transfer_takes() -> None:
    store = RecordStore()
    store.put(MAP, *pack([b"k"]), *pack([b"v"]), MAX_COUNTER - 5, ttl_ms=MAX_COUNTER)
    meta, present = store.metadata(MAP, *pack([b"k"]), MAX_COUNTER - 1)
    assert present == b"\x01"
    assert numbers(meta)[3] == MAX_COUNTER  # clamped, not 2 * MAX_COUNTER - 5


def test_the_owner_sweeps_expired_keys_in_bounded_steps_earliest_first() -> None:
    store = RecordStore()
    keys = [b"k%02d" % n for n in range(10)]
    ttls = struct.pack("<10Q", *[100 - n for n in range(10)])  # k09 expires first
    store.put(MAP, *pack(keys), *pack([b"v"] * 10), 0, ttls_ms=ttls)
    assert unpack(*store.expired(MAP, 90, 100)) == []
    assert unpack(*store.expired(MAP, 93, 100)) == [b"k09", b"k08", b"k07"]
    swept = []
    while batch := unpack(*store.expired(MAP, 1_000, 4)):
        assert len(batch) <= 4
        assert store.remove(MAP, *pack(batch), 1_000)[2] == b"\x00" * len(batch)
        swept += batch
    assert swept == keys[::-1]
    assert store.map_names() == []


def test_scan_pages_read_the_map_once_in_order_and_skip_expired_entries() -> None:
    store = RecordStore()
    keys = [b"%03d" % n for n in range(25)]
    ttls = struct.pack("<25Q", *[5 if n % 4 == 0 else 0 for n in range(25)])
    store.put(MAP, *pack(keys), *pack([k + b"!" for k in keys]), 0, ttls_ms=ttls)
    seen, offset = [], 0
    while offset < store.entry_count(MAP):
        page_keys, key_lengths, values, value_lengths, offset = store.scan(MAP, offset, 10, 10)
        page = unpack(page_keys, key_lengths)
        assert unpack(values, value_lengths) == [k + b"!" for k in page]
        seen += page
    assert seen == [k for n, k in enumerate(keys) if n % 4]
    assert store.scan(MAP, 0, 3, 10, keys_only=True)[2:] == (b"", b"", 3)


def test_a_10_byte_key_and_100_byte_value_is_counted_at_200_bytes() -> None:
    store = RecordStore()
    keys = [b"key-%06d" % n for n in range(1_000)]
    store.put(MAP, *pack(keys), *pack([b"v" * 100] * 1_000), 0)
    per_record = RECORD_BYTES + INDEX_BYTES + 128  # 110 bytes + an 8-byte header, rounded up to 16
    assert per_record == 200
    assert store.memory_bytes(MAP) == MAP_BYTES + 32 + 1_000 * per_record  # 32: the name's block
    store.put(MAP, *pack(keys[:10]), *pack([b"v" * 100] * 10), 0, ttl_ms=60_000)
    assert store.memory_bytes(MAP) == MAP_BYTES + 32 + 1_000 * per_record + 10 * EXPIRY_BYTES
    assert store.total_memory_bytes() == store.memory_bytes(MAP)
    store.remove(MAP, *pack(keys), 0)
    assert (store.total_memory_bytes(), store.total_entry_count(), store.map_names()) == (0, 0, [])


def test_the_same_calls_give_the_same_order_and_bytes_whatever_the_seed() -> None:
    stores = [RecordStore(seed) for seed in (0, 1, 2**64 - 1, 12345)]
    for store in stores:
        keys = [b"%d" % n for n in range(2_000)]
        store.put(MAP, *pack(keys), *pack(keys), 0)
        store.remove(MAP, *pack(keys[::3]), 0)
        store.put(MAP, *pack(keys[:50]), *pack([b"again"] * 50), 1, ttl_ms=7)
    first = held(stores[0], MAP)
    assert len(first) == 2_000 - 667 + 17  # removed every third, then 17 of those written again
    for store in stores[1:]:
        assert held(store, MAP) == first
        assert store.memory_bytes(MAP) == stores[0].memory_bytes(MAP)
        assert unpack(*store.expired(MAP, 8, 100)) == unpack(*stores[0].expired(MAP, 8, 100))


def test_a_removal_moves_the_last_record_into_its_place() -> None:
    store = RecordStore()
    store.put(MAP, *pack([b"a", b"b", b"c", b"d"]), *pack([b""] * 4), 0)
    store.remove(MAP, *pack([b"b"]), 0)
    assert [r.key for r in held(store, MAP)] == [b"a", b"d", b"c"]


def test_maps_are_kept_apart_and_listed_in_first_write_order() -> None:
    store = RecordStore()
    for name in ("b", "a", "c"):
        store.put(name, *pack([b"k"]), *pack([name.encode()]), 0)
    assert store.map_names() == ["b", "a", "c"]
    assert found(store.get("a", *pack([b"k"]), 0)) == [b"a"]
    store.remove("a", *pack([b"k"]), 0)
    assert store.map_names() == ["b", "c"]
    assert found(store.get("a", *pack([b"k"]), 0)) == [None]
    assert store.map_names() == ["b", "c"], "a read creates no map"
    assert repr(store) == f"RecordStore(2 maps, 2 entries, {store.total_memory_bytes()} bytes)"
