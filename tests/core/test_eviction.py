"""A map's eviction policy and sizes on its owner: with LRU, LFU or RANDOM a write makes room by
evicting entries of the map in the written partition (sampled, replicated as removes in the
partition's sequence); with NONE a write past a size is refused MEMORY_FULL, nothing applied."""

from __future__ import annotations

from dataclasses import replace

import msgspec
import pytest

from shardgrid.core import messages as m
from shardgrid.core.config import MapConfig, MemberConfig
from shardgrid.core.errors import ConfigError
from shardgrid.core.inputs import Receive
from shardgrid.core.table import PartitionTable
from tests.core.test_member import CONFIG, B, C, following, grant_lease, replies, run_ticks, sent
from tests.core.test_memory_limit import B_ALONE, keys, request
from tests.wire import codes, map_request, run_keys, values

VALUE = b"v" * 100


def owner_with(map_config: MapConfig, **config: int) -> tuple[object, int]:
    settings = replace(CONFIG, backup_count=0, maps=(("m", map_config),), **config)
    owner, now = following(B, B_ALONE, config=settings)
    return owner, grant_lease(owner, now)


def put(owner, now: int, call_id: int, batch: list[bytes], value: bytes = VALUE) -> m.MapReply:
    (reply,) = replies(owner.handle(now, Receive("c", None, None, request(call_id, m.PUT, batch, value))))
    return reply


def get(owner, now: int, call_id: int, batch: list[bytes]) -> m.MapReply:
    (reply,) = replies(owner.handle(now, Receive("c", None, None, request(call_id, m.GET, batch))))
    return reply


def held(owner) -> set[bytes]:
    view = owner.data.view(0)
    return set(view.maps.get("m", {})) if view is not None else set()


def test_the_policy_and_sizes_are_checked() -> None:
    with pytest.raises(ConfigError, match="eviction_policy"):
        MemberConfig(maps=(("m", MapConfig(eviction_policy="OLDEST")),)).validate()  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="max_entries_per_partition"):
        MemberConfig(maps=(("m", MapConfig(max_entries_per_partition=-1)),)).validate()
    MemberConfig(maps=(("m", MapConfig(eviction_policy="LFU", max_bytes_per_member=10**9)),)).validate()


@pytest.mark.parametrize("policy", ["LRU", "LFU", "RANDOM"])
def test_an_evicting_map_at_the_members_limit_takes_every_write(policy: str) -> None:
    limit = 40_000
    owner, now = owner_with(MapConfig(backup_count=0, eviction_policy=policy), max_memory_bytes=limit)
    written: list[bytes] = []
    for call_id in range(1, 80):
        batch = keys(len(written), 10)
        assert codes(put(owner, now + call_id, call_id, batch)) == (m.ReplyCode.OK,) * 10
        written += batch
        assert owner.data.memory_bytes_of(0) <= limit
    _, now = run_ticks(owner, now + 100, now + 100 + CONFIG.tick_ms)
    (status,) = replies(owner.handle(now + 1, Receive("c", None, None, m.MemberStatusRequest(7))))
    assert status.entries_evicted == len(written) - len(held(owner)) > 0
    assert status.memory_bytes <= limit
    assert written[-10:] == [k for k in written[-10:] if k in held(owner)], "the newest write was evicted"


def test_lru_keeps_what_is_read() -> None:
    owner, now = owner_with(MapConfig(backup_count=0, eviction_policy="LRU", max_entries_per_partition=50))
    hot = keys(0, 10)
    assert codes(put(owner, now, 1, hot)) == (m.ReplyCode.OK,) * 10
    for call_id in range(2, 40):
        now += 10
        assert values(get(owner, now, 1000 + call_id, hot)) == (VALUE,) * 10
        assert codes(put(owner, now + 1, call_id, keys(10 * call_id, 10))) == (m.ReplyCode.OK,) * 10
    assert len(held(owner)) == 50
    assert set(hot) <= held(owner)


def test_lfu_keeps_what_is_read_often() -> None:
    owner, now = owner_with(MapConfig(backup_count=0, eviction_policy="LFU", max_entries_per_partition=30))
    often = keys(0, 5)
    assert codes(put(owner, now, 1, often)) == (m.ReplyCode.OK,) * 5
    for call_id in range(1, 6):
        get(owner, now + call_id, 1000 + call_id, often)
    for call_id in range(2, 30):
        assert codes(put(owner, now + 10 + call_id, call_id, keys(10 * call_id, 10))) == (m.ReplyCode.OK,) * 10
    assert len(held(owner)) == 30
    assert set(often) <= held(owner)


def test_an_overwrite_at_the_size_evicts_nothing() -> None:
    owner, now = owner_with(MapConfig(backup_count=0, eviction_policy="RANDOM", max_entries_per_partition=20))
    batch = keys(0, 20)
    put(owner, now, 1, batch)
    for call_id in range(2, 10):
        assert codes(put(owner, now + call_id, call_id, batch, b"w" * 100)) == (m.ReplyCode.OK,) * 20
    assert held(owner) == set(batch)
    assert owner.data.entries_evicted == 0


def test_the_per_member_size_is_shared_out_per_partition() -> None:
    # One owner of CONFIG's partitions: each partition's share is the size over the partitions.
    partitions = CONFIG.partition_count
    owner, now = owner_with(MapConfig(backup_count=0, eviction_policy="LRU", max_entries_per_member=partitions * 7))
    put(owner, now, 1, keys(0, 30))
    assert len(held(owner)) == 7


def test_a_map_that_evicts_nothing_refuses_new_keys_at_its_size_but_takes_overwrites() -> None:
    owner, now = owner_with(MapConfig(backup_count=0, max_entries_per_partition=10))
    batch = keys(0, 10)
    assert codes(put(owner, now, 1, batch)) == (m.ReplyCode.OK,) * 10
    refused = put(owner, now + 1, 2, keys(10, 1))
    assert codes(refused) == (m.ReplyCode.MEMORY_FULL,)
    assert "'m'" in refused.reason
    assert "max_entries_per_partition" in refused.reason
    assert codes(put(owner, now + 2, 3, batch[:5], b"w")) == (m.ReplyCode.OK,) * 5
    assert held(owner) == set(batch)
    owner.handle(now + 3, Receive("c", None, None, request(4, m.REMOVE, batch[:1])))
    assert codes(put(owner, now + 4, 5, keys(10, 1))) == (m.ReplyCode.OK,)


def test_a_map_that_evicts_nothing_refuses_past_its_bytes() -> None:
    partitions = CONFIG.partition_count
    owner, now = owner_with(MapConfig(backup_count=0, max_bytes_per_member=partitions * 2_000))
    answered = [codes(put(owner, now + n, n, keys(n, 1)))[0] for n in range(20)]
    assert answered[:5] == [m.ReplyCode.OK] * 5
    assert answered[-1] is m.ReplyCode.MEMORY_FULL
    assert owner.data.memory_bytes_of(0) <= 2_000


def test_evictions_reach_the_backups_as_removes_after_the_put() -> None:
    b_c = PartitionTable.from_lists([[B, C]] * 4, [1, 1, 1, 1])
    settings = replace(
        CONFIG, maps=(("m", MapConfig(backup_count=1, eviction_policy="LRU", max_entries_per_partition=5)),)
    )
    owner, now = following(B, b_c, config=settings)
    now = grant_lease(owner, now)
    effects = owner.handle(now, Receive("c", None, None, request(1, m.PUT, keys(0, 8), VALUE)))
    runs = [run for batch in sent(effects, m.BackupBatch) for run in batch.runs]
    assert [(run.kind, run.first_sequence, len(run_keys(run))) for run in runs] == [(m.PUT, 1, 8), (m.REMOVE, 9, 3)]
    assert set(run_keys(runs[1])) == set(keys(0, 8)) - held(owner)
    assert owner.data.sequence_of(0) == 11


def keys_of(pid: int, count: int) -> list[bytes]:
    from shardgrid.core.hashing import partition_ids_of_serialized

    candidates = [b"p-%d" % n for n in range(count * CONFIG.partition_count * 2)]
    pids = partition_ids_of_serialized(candidates, CONFIG.partition_count)
    return [key for key, of in zip(candidates, pids, strict=True) if of == pid][:count]


def put_to(owner, now: int, call_id: int, map_name: str, pid: int, batch: list[bytes]) -> tuple[m.ReplyCode, ...]:
    request_ = map_request(
        call_id=call_id,
        kind=m.PUT,
        map_name=map_name,
        keys=tuple(batch),
        values=(VALUE,) * len(batch),
    )
    (reply,) = replies(owner.handle(now, Receive("c", None, None, request_)))
    return codes(reply)


def test_a_map_that_evicts_nothing_takes_the_memory_a_cache_holds_in_other_partitions() -> None:
    limit = 40_000
    maps = (("cache", MapConfig(backup_count=0, eviction_policy="LRU")), ("store", MapConfig(backup_count=0)))
    settings = replace(CONFIG, backup_count=0, maps=maps, max_memory_bytes=limit)
    owner, now = following(B, B_ALONE, config=settings)
    now = grant_lease(owner, now)
    cached = keys_of(1, 150)  # the cache fills the member, in partition 1
    for call_id, start in enumerate(range(0, 150, 10), start=1):
        assert put_to(owner, now + call_id, call_id, "cache", 1, cached[start : start + 10]) == (m.ReplyCode.OK,) * 10
    cache_bytes = owner.data.memory_bytes_of(1)
    assert cache_bytes > limit * 2 // 3
    stored = keys(0, 100)  # the store writes in partition 0: the cache makes room
    for call_id, start in enumerate(range(0, 100, 10), start=100):
        assert put_to(owner, now + call_id, call_id, "store", 0, stored[start : start + 10]) == (m.ReplyCode.OK,) * 10
    view = owner.data.view(0)
    assert view is not None
    assert set(view.maps["store"]) == set(stored)
    assert owner.data.memory_bytes_of(0) + owner.data.memory_bytes_of(1) <= limit
    assert owner.data.memory_bytes_of(1) < cache_bytes - 10_000  # the cache yielded a third of it


# --- found by an outside tester ------------------------------------------------------------------


def test_a_write_refused_at_the_members_limit_evicts_nothing() -> None:
    owner, now = owner_with(MapConfig(backup_count=0, eviction_policy="LRU"), max_memory_bytes=40_000)
    batch = keys(0, 10)
    assert codes(put(owner, now, 1, batch)) == (m.ReplyCode.OK,) * 10
    too_large = put(owner, now + 1, 2, keys(10, 1), b"x" * 60_000)
    assert codes(too_large) == (m.ReplyCode.MEMORY_FULL,)
    assert held(owner) == set(batch)
    assert owner.data.entries_evicted == 0


def test_a_map_that_evicts_nothing_takes_a_rewrite_at_its_bytes() -> None:
    partitions = CONFIG.partition_count
    owner, now = owner_with(MapConfig(backup_count=0, max_bytes_per_member=partitions * 4_000))
    value = b"v" * 700
    taken = []
    for n in range(20):
        if codes(put(owner, now + n, n + 1, keys(n, 1), value)) == (m.ReplyCode.OK,):
            taken += keys(n, 1)
    assert 0 < len(taken) < 20
    assert codes(put(owner, now + 30, 50, taken[:1], b"w" * 700)) == (m.ReplyCode.OK,)
    assert codes(put(owner, now + 31, 51, taken[:1], b"w" * 600)) == (m.ReplyCode.OK,)


def test_expired_entries_in_a_full_maps_way_are_removed_for_a_new_key() -> None:
    owner, now = owner_with(MapConfig(backup_count=0, max_entries_per_partition=3))
    request_ = msgspec.structs.replace(request(1, m.PUT, keys(0, 3), VALUE), ttl_ms=100)
    assert codes(replies(owner.handle(now, Receive("c", None, None, request_)))[0]) == (m.ReplyCode.OK,) * 3
    assert codes(put(owner, now + 150, 2, keys(3, 1))) == (m.ReplyCode.OK,)  # before any tick swept them
    assert held(owner) == set(keys(3, 1))


def test_set_ttl_is_taken_at_the_members_limit() -> None:
    owner, now = owner_with(MapConfig(backup_count=0), max_memory_bytes=20_000)
    written: list[bytes] = []
    for call_id in range(1, 600):  # a key at a time: full to within one entry
        batch = keys(len(written), 1)
        if codes(put(owner, now, call_id, batch))[0] is m.ReplyCode.MEMORY_FULL:
            break
        written += batch
    set_ttl = map_request(call_id=99, kind=m.SET_TTL, map_name="m", keys=(written[0],), previous=True, ttl_ms=5_000)
    (reply,) = replies(owner.handle(now + 1, Receive("c", None, None, set_ttl)))
    assert codes(reply) == (m.ReplyCode.OK,)
    assert values(reply) == (b"",)


def test_a_set_ttl_whose_values_would_pass_a_request_is_refused_whole() -> None:
    b_c = PartitionTable.from_lists([[B, C]] * 4, [1, 1, 1, 1])
    owner, now = following(B, b_c, config=replace(CONFIG, maps=(("m", MapConfig(backup_count=1)),)))
    now = grant_lease(owner, now)
    big = keys(0, 6)
    for n, key in enumerate(big):
        effects = owner.handle(now + n, Receive("c", None, None, request(n + 1, m.PUT, [key], b"v" * (3 << 20))))
        (batch,) = sent(effects, m.BackupBatch)
        owner.handle(now + n, Receive(C.address, C, B.uuid, m.BackupAckBatch(((0, batch.runs[0].last_sequence),))))
    sequence = owner.data.sequence_of(0)
    set_ttl = map_request(call_id=50, kind=m.SET_TTL, map_name="m", keys=tuple(big), previous=True, ttl_ms=5_000)
    effects = owner.handle(now + 10, Receive("c", None, None, set_ttl))
    (reply,) = replies(effects)
    assert set(codes(reply)) == {m.ReplyCode.REJECTED}
    assert "fewer keys" in reply.reason
    assert not sent(effects, m.BackupBatch)
    assert owner.data.sequence_of(0) == sequence


def test_a_compare_and_set_whose_key_is_evicted_for_its_room_answers_what_it_was_judged_on() -> None:
    """Found by the simulator (compare-and-sets in the random runs): the eviction that made room
    for a replace_if_same took its own key, and the put's previous value (none) was answered:
    'not swapped', though the new value was written."""
    maps = (("cache", MapConfig(backup_count=0, eviction_policy="LRU")), ("store", MapConfig(backup_count=0)))
    owner, now = following(B, B_ALONE, config=replace(CONFIG, backup_count=0, maps=maps, max_memory_bytes=20_000))
    now = grant_lease(owner, now)
    (key,) = keys(0, 1)
    stored = []
    for call_id, one in enumerate(keys_of(1, 200), start=2):  # the store fills the member, a key at a time
        if put_to(owner, now, call_id, "store", 1, [one]) != (m.ReplyCode.OK,):
            break
        stored.append(one)
    # Room for the cache's map and one entry: what two of the store's entries held.
    remove = map_request(call_id=300, kind=m.REMOVE, map_name="store", keys=tuple(stored[:2]))
    owner.handle(now, Receive("c", None, None, remove))
    _, now = run_ticks(owner, now, now + CONFIG.tick_ms)  # counted again
    assert put_to(owner, now, 301, "cache", 0, [key]) == (m.ReplyCode.OK,)
    assert owner.data.entries_evicted == 0
    swap = map_request(
        call_id=500,
        kind=m.REPLACE_IF_SAME,
        map_name="cache",
        keys=(key,),
        values=(b"w" * 100,),
        expected=(VALUE,),
        previous=True,
    )
    (reply,) = replies(owner.handle(now + 1, Receive("c", None, None, swap)))
    assert codes(reply) == (m.ReplyCode.OK,)
    assert owner.data.entries_evicted == 1  # its own key made the room
    assert values(reply) == (VALUE,)  # judged on the value it replaced: swapped
    view = owner.data.view(0)
    assert view is not None
    assert view.maps["cache"] == {key: b"w" * 100}


def test_a_write_that_eviction_within_its_budget_cannot_fit_evicts_nothing() -> None:
    """Found by an outside tester: a refused 2 MB write first evicted 10,000 small entries (all
    one write may evict) and freed too little anyway."""
    maps = (("cache", MapConfig(backup_count=0, eviction_policy="LRU")), ("store", MapConfig(backup_count=0)))
    owner, now = following(B, B_ALONE, config=replace(CONFIG, backup_count=0, maps=maps, max_memory_bytes=3_000_000))
    now = grant_lease(owner, now)
    small = keys_of(0, 20_000)
    for call_id, start in enumerate(range(0, 20_000, 10_000), start=1):
        batch = small[start : start + 10_000]
        request_ = map_request(
            call_id=call_id, kind=m.PUT, map_name="cache", keys=tuple(batch),
            values=(b"x",) * len(batch),
        )  # fmt: skip
        assert set(codes(replies(owner.handle(now, Receive("c", None, None, request_)))[0])) == {m.ReplyCode.OK}
    _, now = run_ticks(owner, now, now + CONFIG.tick_ms)
    assert put_to(owner, now, 10, "store", 1, keys_of(1, 1)[:1]) == (m.ReplyCode.OK,)
    big = map_request(call_id=11, kind=m.PUT, map_name="store", keys=(b"big",), values=(b"v" * 2_000_000,))
    (reply,) = replies(owner.handle(now + 1, Receive("c", None, None, big)))
    assert codes(reply) == (m.ReplyCode.MEMORY_FULL,)
    assert owner.data.entries_evicted == 0
    assert len(owner.data.view(0).maps["cache"]) == 20_000


def partition_id_of(key: bytes) -> int:
    from shardgrid.core.hashing import partition_ids_of_serialized

    return partition_ids_of_serialized([key], CONFIG.partition_count)[0]
