"""Expiry by TTL: the owner decides it. A put's entries live its own ``ttl_ms``, or the map's
time_to_live_seconds; no read returns an expired entry; the owner's tick removes expired entries,
a bounded number at a time, and replicates the removal as any remove; backups hold the owner's
expiry times, so that replicas at one sequence hold the same records."""

from __future__ import annotations

from dataclasses import replace

import msgspec
import pytest

from shardgrid.core import messages as m
from shardgrid.core.config import MapConfig
from shardgrid.core.hashing import partition_ids_of_serialized
from shardgrid.core.inputs import Receive
from shardgrid.core.limits import MAX_TTL_MS
from shardgrid.core.member.upkeep import MAX_EXPIRED_PER_TICK
from shardgrid.core.table import PartitionTable
from tests.core.test_member import CONFIG, A, B, following, grant_lease, key_in, replies, run_ticks, sent
from tests.wire import codes, map_request, run_keys, run_values, values


def keys_in_0(count: int) -> list[bytes]:
    """``count`` keys of partition 0."""
    found: list[bytes] = []
    n = 0
    while len(found) < count:
        key = b"key-%d" % n
        if partition_ids_of_serialized([key], CONFIG.partition_count)[0] == 0:
            found.append(key)
        n += 1
    return found


B_A = PartitionTable.from_lists([[B, A]] * 4, [1, 1, 1, 1])
B_ALONE = PartitionTable.from_lists([[B]] * 4, [1, 1, 1, 1])
ALONE = replace(CONFIG, backup_count=0)


def put(call_id: int, keys: list[bytes], ttl_ms: int = -1, kind: m.OpKind = m.PUT, map_name: str = "m") -> m.MapRequest:
    return map_request(
        call_id=call_id,
        kind=kind,
        map_name=map_name,
        keys=tuple(keys),
        values=(b"v",) * len(keys),
        ttl_ms=ttl_ms,
    )


def get(call_id: int, keys: list[bytes], map_name: str = "m") -> m.MapRequest:
    return map_request(call_id=call_id, kind=m.GET, map_name=map_name, keys=tuple(keys))


def test_an_entry_is_read_until_it_expires_and_never_after() -> None:
    owner, now = following(B, B_ALONE, config=ALONE)
    now = grant_lease(owner, now)
    (ok,) = replies(owner.handle(now, Receive("c", None, None, put(1, [key_in(0)], ttl_ms=500))))
    assert codes(ok) == (m.ReplyCode.OK,)
    (before,) = replies(owner.handle(now + 499, Receive("c", None, None, get(2, [key_in(0)]))))
    assert values(before) == (b"v",)
    # At its expiry time exactly it is gone (before any tick removed it).
    (after,) = replies(owner.handle(now + 500, Receive("c", None, None, get(3, [key_in(0)]))))
    assert values(after) == (None,)


def test_a_backup_holds_the_owners_expiry_and_the_owners_tick_removes_the_entry_on_both() -> None:
    owner, now = following(B, B_A)
    now = grant_lease(owner, now)
    two = keys_in_0(2)
    effects = owner.handle(now, Receive("c", None, None, put(1, two, ttl_ms=300)))
    (batch,) = sent(effects, m.BackupBatch)
    (run,) = batch.runs
    assert run.written_ms == now  # the record clock (no offset here)
    assert run.ttls_ms == (300).to_bytes(8, "little") * 2
    view = owner.data.view(0)
    assert view is not None
    assert {expiry for _, expiry in view.entries["m"].values()} == {now + 300}
    # Acknowledged by the backup; then the owner's ticks past the expiry remove both keys.
    owner.handle(now + 1, Receive(A.address, A, B.uuid, m.BackupAckBatch(((0, run.last_sequence),))))
    effects, now = run_ticks(owner, now + 1, now + 600)
    removals = [r for b in sent(effects, m.BackupBatch) for r in b.runs if r.kind == m.REMOVE]
    assert {k for r in removals for k in run_keys(r)} == set(two)  # (resent until acknowledged)
    assert owner.data.view(0).maps == {}
    assert owner.data.sequence_of(0) == 4  # two writes, two removals


def test_the_maps_time_to_live_applies_unless_the_write_says_otherwise() -> None:
    config = replace(ALONE, maps=(("cache", MapConfig(backup_count=0, time_to_live_seconds=2)),))
    owner, now = following(B, B_ALONE, config=config)
    now = grant_lease(owner, now)
    default, forever, short = keys_in_0(3)
    owner.handle(now, Receive("c", None, None, put(1, [default], map_name="cache")))
    owner.handle(now, Receive("c", None, None, put(2, [forever], ttl_ms=0, map_name="cache")))
    owner.handle(now, Receive("c", None, None, put(3, [short], ttl_ms=100, map_name="cache")))
    expiries = {k: e for k, (_, e) in owner.data.view(0).entries["cache"].items()}
    assert expiries == {default: now + 2_000, forever: 0, short: now + 100}


def test_a_put_if_absent_takes_the_place_of_an_expired_entry() -> None:
    owner, now = following(B, B_ALONE, config=ALONE)
    now = grant_lease(owner, now)
    owner.handle(now, Receive("c", None, None, put(1, [key_in(0)], ttl_ms=10)))
    (reply,) = replies(owner.handle(now + 10, Receive("c", None, None, put(2, [key_in(0)], kind=m.PUT_IF_ABSENT))))
    assert codes(reply) == (m.ReplyCode.OK,)
    assert owner.data.view(0).entries["m"][key_in(0)] == (b"v", 0)


def test_a_ttl_on_a_read_is_refused() -> None:
    owner, now = following(B, B_ALONE, config=ALONE)
    now = grant_lease(owner, now)
    request = map_request(call_id=1, kind=m.GET, map_name="m", keys=(key_in(0),), ttl_ms=5)
    (reply,) = replies(owner.handle(now, Receive("c", None, None, request)))
    assert codes(reply) == (m.ReplyCode.REJECTED,)
    assert "TTL" in reply.reason


def test_the_active_expiry_removes_a_bounded_number_a_tick() -> None:
    owner, now = following(B, B_ALONE, config=ALONE)
    now = grant_lease(owner, now)
    keys = keys_in_0(2 * MAX_EXPIRED_PER_TICK + 10)
    for call_id, start in enumerate(range(0, len(keys), 1_000), start=1):
        owner.handle(now, Receive("c", None, None, put(call_id, keys[start : start + 1_000], ttl_ms=50)))
    held = owner.data.view(0)
    assert held is not None
    assert len(held.maps["m"]) == len(keys)
    _, now = run_ticks(owner, now + 60, now + 60 + CONFIG.tick_ms)
    left = owner.data.view(0)
    assert left is not None
    assert len(keys) - MAX_EXPIRED_PER_TICK <= len(left.maps.get("m", {})) < len(keys)
    _, now = run_ticks(owner, now, now + 5 * CONFIG.tick_ms)
    assert owner.data.view(0).maps == {}


def test_set_ttl_gives_held_entries_a_new_expiry_through_the_backups() -> None:
    owner, now = following(B, B_A)
    now = grant_lease(owner, now)
    held, absent = keys_in_0(2)
    owner.handle(now, Receive("c", None, None, put(1, [held])))
    set_ttl = map_request(
        call_id=2,
        kind=m.SET_TTL,
        map_name="m",
        keys=(held, absent),
        previous=True,
        ttl_ms=400,
    )
    effects = owner.handle(now + 10, Receive("c", None, None, set_ttl))
    (batch,) = sent(effects, m.BackupBatch)
    (run,) = batch.runs
    assert (run.kind, run_keys(run), run_values(run)) == (m.PUT, (held,), (b"v",))  # the held value, written again
    assert run.ttls_ms == (400).to_bytes(8, "little")
    owner.handle(now + 11, Receive(A.address, A, B.uuid, m.BackupAckBatch(((0, run.last_sequence),))))
    (answer,) = [r for r in replies(owner.handle(now + 12, Receive("c", None, None, get(3, [held])))) if r.call_id == 3]
    assert values(answer) == (b"v",)
    view = owner.data.view(0)
    assert view is not None
    assert view.entries["m"] == {held: (b"v", now + 10 + 400)}
    (gone,) = replies(owner.handle(now + 410, Receive("c", None, None, get(4, [held]))))
    assert values(gone) == (None,)


def test_set_ttl_answers_whether_each_key_was_held_and_never_its_value() -> None:
    owner, now = following(B, B_ALONE, config=ALONE)
    now = grant_lease(owner, now)
    held, absent = keys_in_0(2)
    owner.handle(now, Receive("c", None, None, put(1, [held], ttl_ms=100)))
    request = map_request(call_id=2, kind=m.SET_TTL, map_name="m", keys=(held, absent), previous=True, ttl_ms=0)
    (reply,) = replies(owner.handle(now + 50, Receive("c", None, None, request)))
    assert codes(reply) == (m.ReplyCode.OK, m.ReplyCode.OK)
    assert values(reply) == (b"", None)
    (later,) = replies(owner.handle(now + 1_500, Receive("c", None, None, get(3, [held, absent]))))
    assert values(later) == (b"v", None)  # ttl 0: until removed


def test_a_put_may_give_each_key_its_own_ttl_which_reaches_the_backups() -> None:
    owner, now = following(B, B_A)
    now = grant_lease(owner, now)
    keys = keys_in_0(3)
    ttls = b"".join(ms.to_bytes(8, "little") for ms in (100, 0, 5_000))
    request = msgspec.structs.replace(put(1, keys), ttls_ms=ttls)
    (batch,) = sent(owner.handle(now, Receive("c", None, None, request)), m.BackupBatch)
    assert batch.runs[0].ttls_ms == ttls
    view = owner.data.view(0)
    assert view is not None
    assert {key: expiry for key, (_, expiry) in view.entries["m"].items()} == dict(
        zip(keys, (now + 100, 0, now + 5_000), strict=True)
    )


@pytest.mark.parametrize(
    ("ttls_ms", "ttl_ms", "kind"),
    [
        ((5).to_bytes(8, "little") * 2, -1, m.PUT),  # one short
        ((5).to_bytes(8, "little") * 3, 7, m.PUT),  # and a TTL for the request
        ((MAX_TTL_MS + 1).to_bytes(8, "little") * 3, -1, m.PUT),  # past the longest TTL
        ((5).to_bytes(8, "little") * 3, -1, m.REMOVE),  # not a put
    ],
)
def test_ttls_per_key_that_do_not_fit_the_request_are_refused_whole(ttls_ms: bytes, ttl_ms: int, kind) -> None:
    owner, now = following(B, B_ALONE, config=ALONE)
    now = grant_lease(owner, now)
    keys = keys_in_0(3)
    request = msgspec.structs.replace(put(1, keys), ttls_ms=ttls_ms, ttl_ms=ttl_ms, kind=kind)
    if kind == m.REMOVE:
        request = msgspec.structs.replace(request, values=())
    (reply,) = replies(owner.handle(now, Receive("c", None, None, request)))
    assert set(codes(reply)) == {m.ReplyCode.REJECTED}
    assert "TTL" in reply.reason
    assert owner.data.view(0) is None or not owner.data.view(0).maps


def test_an_entry_idle_past_max_idle_is_not_read_and_the_owner_removes_it_through_its_backups() -> None:
    idle_map = replace(CONFIG, maps=(("m", MapConfig(backup_count=1, max_idle_seconds=1)),))
    owner, now = following(B, B_A, config=idle_map)
    now = grant_lease(owner, now)
    read, left = keys_in_0(2)
    (batch,) = sent(owner.handle(now, Receive("c", None, None, put(1, [read, left]))), m.BackupBatch)
    owner.handle(now + 1, Receive(A.address, A, B.uuid, m.BackupAckBatch(((0, batch.runs[0].last_sequence),))))
    (kept,) = replies(owner.handle(now + 600, Receive("c", None, None, get(2, [read]))))
    assert values(kept) == (b"v",)  # a read keeps it another second
    (later,) = replies(owner.handle(now + 1_100, Receive("c", None, None, get(3, [read, left]))))
    assert values(later) == (b"v", None)  # never read since its write a second ago: idle
    effects, _ = run_ticks(owner, now + 1_100, now + 1_400)
    runs = [run for batch in sent(effects, m.BackupBatch) for run in batch.runs if run.kind == m.REMOVE]
    assert [run_keys(run) for run in runs] == [(left,)]
    view = owner.data.view(0)
    assert view is not None
    assert set(view.maps["m"]) == {read}


# --- max idle, found by an outside tester ----------------------------------------------------------

IDLE_ALONE = replace(ALONE, maps=(("m", MapConfig(backup_count=0, max_idle_seconds=1)),))


def keys_in(pid: int, count: int) -> list[bytes]:
    found = [k for k in (b"i-%d" % n for n in range(40_000)) if partition_ids_of_serialized([k], 4)[0] == pid]
    return found[:count]


def test_the_idle_sweep_reaches_every_partition_whatever_the_first_ones_hold(monkeypatch) -> None:
    """The sweep's scan ended in the first partitions every tick (they hold more records than a
    tick looks at), and an idle entry further on was never removed."""
    from shardgrid.core.member import upkeep

    monkeypatch.setattr(upkeep, "MAX_IDLE_SCANNED_PER_TICK", 100)
    owner, now = following(B, B_ALONE, config=IDLE_ALONE)
    now = grant_lease(owner, now)
    busy = keys_in(0, 300)  # read all the time: never idle
    request = map_request(call_id=1, kind=m.PUT, map_name="m", keys=tuple(busy), values=(b"v",) * 300)
    owner.handle(now, Receive("c", None, None, request))
    (idle,) = keys_in(3, 1)
    owner.handle(now, Receive("c", None, None, put(2, [idle])))
    read = map_request(call_id=3, kind=m.GET, map_name="m", keys=tuple(busy))
    for step in range(1, 40):
        now += CONFIG.tick_ms
        owner.handle(now, Receive("c", None, None, msgspec.structs.replace(read, call_id=10 + step)))
        effects, _ = run_ticks(owner, now - CONFIG.tick_ms, now)
        for lease_request in sent(effects, m.LeaseRequest):  # the lease renewed, as its leader would
            grant = m.LeaseGrant(lease_request.sent_ms, 2_000, 1)
            owner.handle(now, Receive(A.address, A, owner.identity.uuid, grant))
    view = owner.data.view(3)
    assert view is None or idle not in view.maps.get("m", {})
    assert set(owner.data.view(0).maps["m"]) == set(busy)


def test_idle_entries_in_a_full_maps_way_are_removed_for_a_new_key() -> None:
    bounded = replace(ALONE, maps=(("m", MapConfig(backup_count=0, max_idle_seconds=1, max_entries_per_partition=2)),))
    owner, now = following(B, B_ALONE, config=bounded)
    now = grant_lease(owner, now)
    two = keys_in_0(3)
    assert codes(replies(owner.handle(now, Receive("c", None, None, put(1, two[:2]))))[0]) == (m.ReplyCode.OK,) * 2
    (reply,) = replies(owner.handle(now + 1_001, Receive("c", None, None, put(2, two[2:]))))
    assert codes(reply) == (m.ReplyCode.OK,)  # before any tick swept the two idle ones


def test_a_backup_promoted_to_owner_gives_its_idle_maps_entries_a_whole_max_idle() -> None:
    """A promoted backup knew only each entry's last write, not the reads its old owner served,
    and dropped every entry that reads had kept alive (all 74 keys of a killed owner)."""
    from tests.core.test_member import synced
    from tests.core.test_replica_sync import A_OWNS_B_BACKS, _snapshot_makes_b_owner

    idle_map = replace(CONFIG, maps=(("m", MapConfig(max_idle_seconds=1)),))
    backup, now = following(B, A_OWNS_B_BACKS, config=idle_map)
    synced(backup, 0, now, maps={"m": {b"k": b"1"}}, sequence=5, lineage="L")
    now += 5_000  # written long ago: idle by its write alone
    _snapshot_makes_b_owner(backup, now)
    records = backup.data.held(0).maps["m"]
    assert records.peek([b"k"], now + 900) == [b"1"]
    assert records.peek([b"k"], now + 1_000) == [None]
