"""max_memory_bytes on one member: at the limit an owner refuses writes (MEMORY_FULL, nothing
applied, the reason naming the member and its limit) while reads and removes go on, and it takes
writes again once removes bring the engine's count down. Backups never refuse what their owner
applied: a refusal would make replicas at one sequence differ."""

from __future__ import annotations

import random
from dataclasses import replace

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardgrid.core import messages as m
from shardgrid.core.config import MapConfig, MemberConfig
from shardgrid.core.errors import ConfigError
from shardgrid.core.inputs import Receive, Start
from shardgrid.core.member import Member
from shardgrid.core.table import PartitionTable
from tests.core.test_member import CONFIG, A, B, C, following, grant_lease, key_in, replies, run_ticks, synced
from tests.wire import codes, column, map_request, values, write_run

# B owns every partition, with no backup: its answers come at once.
B_ALONE = PartitionTable.from_lists([[B]] * 4, [1, 1, 1, 1])
LIMIT_BYTES = 20_000
LIMITED = replace(CONFIG, backup_count=0, max_memory_bytes=LIMIT_BYTES)


def request(call_id: int, kind: m.OpKind, keys: list[bytes], value: bytes = b"") -> m.MapRequest:
    values = (value,) * len(keys) if kind in (m.PUT, m.PUT_IF_ABSENT) else ()
    return map_request(call_id=call_id, kind=kind, map_name="m", keys=tuple(keys), values=values)


def keys(start: int, count: int) -> list[bytes]:
    found: list[bytes] = []
    n = 0
    while len(found) < start + count:
        key = key_in(0) + b"-%d" % n
        if _partition_of(key) == 0:
            found.append(key)
        n += 1
    return found[start:]


def _partition_of(key: bytes) -> int:
    from shardgrid.core.hashing import partition_ids_of_serialized

    return partition_ids_of_serialized([key], CONFIG.partition_count)[0]


def test_max_memory_bytes_is_zero_or_positive() -> None:
    with pytest.raises(ConfigError, match="max_memory_bytes"):
        MemberConfig(max_memory_bytes=-1).validate()
    MemberConfig(max_memory_bytes=0).validate()


def test_an_owner_at_its_limit_refuses_writes_and_serves_reads_and_removes() -> None:
    owner, now = following(B, B_ALONE, config=LIMITED)
    now = grant_lease(owner, now)
    written: list[bytes] = []
    refused = None
    for call_id in range(1, 40):
        batch = keys(len(written), 10)
        (reply,) = replies(
            owner.handle(now + call_id, Receive("c", None, None, request(call_id, m.PUT, batch, b"v" * 100)))
        )
        if codes(reply)[0] is m.ReplyCode.MEMORY_FULL:
            refused = reply
            break
        assert codes(reply) == (m.ReplyCode.OK,) * 10
        written += batch
        _, now = run_ticks(owner, now + call_id, now + call_id + CONFIG.tick_ms)  # the exact count
    assert refused is not None, "the owner never reached its limit"
    assert set(codes(refused)) == {m.ReplyCode.MEMORY_FULL}
    assert B.address in refused.reason
    assert str(LIMIT_BYTES) in refused.reason
    status_before = owner.data.memory_bytes
    assert 0 < status_before <= LIMIT_BYTES
    view = owner.data.view(0)
    assert view is not None
    assert len(view.maps["m"]) == len(written)  # nothing of the refused write
    now += 100
    (read,) = replies(owner.handle(now, Receive("c", None, None, request(90, m.GET, written[:3]))))
    assert codes(read) == (m.ReplyCode.OK,) * 3
    assert values(read) == (b"v" * 100,) * 3
    (absent,) = replies(
        owner.handle(now + 1, Receive("c", None, None, request(91, m.PUT_IF_ABSENT, keys(500, 1), b"x" * LIMIT_BYTES)))
    )
    assert codes(absent) == (m.ReplyCode.MEMORY_FULL,)
    (removed,) = replies(owner.handle(now + 2, Receive("c", None, None, request(92, m.REMOVE, written[:20]))))
    assert codes(removed) == (m.ReplyCode.OK,) * 20
    _, now = run_ticks(owner, now + 3, now + 3 + CONFIG.tick_ms)
    assert owner.data.memory_bytes < status_before
    (again,) = replies(owner.handle(now + 1, Receive("c", None, None, request(93, m.PUT, keys(600, 5), b"v" * 100))))
    assert codes(again) == (m.ReplyCode.OK,) * 5


def test_the_status_reports_the_engines_count_and_the_limit() -> None:
    owner, now = following(B, B_ALONE, config=LIMITED)
    now = grant_lease(owner, now)
    owner.handle(now + 1, Receive("c", None, None, request(1, m.PUT, keys(0, 5), b"v" * 100)))
    _, now = run_ticks(owner, now + 1, now + 1 + CONFIG.tick_ms)
    (status,) = replies(owner.handle(now + 1, Receive("c", None, None, m.MemberStatusRequest(7))))
    assert (status.entries, status.max_memory_bytes) == (5, LIMIT_BYTES)
    assert status.memory_bytes == owner.data.memory_bytes_of(0) > 5 * 100
    assert status.maps == (m.MapUsage(map_name="m", entries=5, memory_bytes=status.memory_bytes),)


def test_a_backup_applies_what_its_owner_applied_whatever_its_own_limit() -> None:
    b_c = PartitionTable.from_lists([[B, C]] * 4, [1, 1, 1, 1])
    tiny = replace(CONFIG, max_memory_bytes=1)
    backup, now = following(C, b_c, config=tiny)
    synced(backup, 0, now, owner=B)
    run = write_run(
        partition_id=0, lineage="", first_sequence=1, kind=m.PUT, map_name="m", keys=(b"k",), values=(b"v" * 1000,)
    )
    effects = backup.handle(now + 1, Receive(B.address, B, C.uuid, m.BackupBatch((run,))))
    assert backup.data.view(0).maps == {"m": {b"k": b"v" * 1000}}
    assert any(isinstance(getattr(e, "message", None), m.BackupAckBatch) for e in effects)


def test_a_late_copy_of_a_write_refused_at_the_limit_is_refused_again_once_memory_is_freed() -> None:
    """Found by an outside tester (the simulator, with messages duplicated): a write answered
    MEMORY_FULL was applied by a copy of the same attempt once removes had freed memory, though its
    client was told it was not applied."""
    owner, now = following(B, B_ALONE, config=LIMITED)
    now = grant_lease(owner, now)
    filler: list[bytes] = []
    for call_id in range(100, 140):  # full, ten keys at a time
        batch = keys(len(filler), 10)
        (reply,) = replies(owner.handle(now, Receive("c", None, None, request(call_id, m.PUT, batch, b"v" * 100))))
        if codes(reply)[0] is m.ReplyCode.MEMORY_FULL:
            break
        filler += batch
    named = msgspec.structs.replace(request(2, m.PUT, keys(500, 1), b"w" * 3_000), client_id="c1", write_id=9)
    (refused,) = replies(owner.handle(now + 1, Receive("c", None, None, named)))
    assert codes(refused) == (m.ReplyCode.MEMORY_FULL,)
    owner.handle(now + 2, Receive("c", None, None, request(3, m.REMOVE, filler)))
    _, now = run_ticks(owner, now + 3, now + 3 + CONFIG.tick_ms)  # counted again: room now
    (again,) = replies(owner.handle(now + 1, Receive("c", None, None, named)))  # the network's copy
    assert codes(again) == (m.ReplyCode.MEMORY_FULL,)
    assert owner.data.view(0).maps == {}
    fresh = msgspec.structs.replace(named, call_id=4, write_id=10)  # the same data, a new write: taken
    (taken,) = replies(owner.handle(now + 2, Receive("c", None, None, fresh)))
    assert codes(taken) == (m.ReplyCode.OK,)


def test_a_conditional_write_whose_answer_would_pass_the_budget_is_refused_whole() -> None:
    """Found by an outside tester: a 6 KB put_if_absent naming one 1 MiB key 400 times answered
    the value 400 times (a member grew by 400 MiB)."""
    owner, now = following(B, B_ALONE, config=replace(LIMITED, max_memory_bytes=0))
    now = grant_lease(owner, now)
    (key,) = keys(0, 1)
    owner.handle(now, Receive("c", None, None, request(1, m.PUT, [key], b"v" * (1 << 20))))
    many = map_request(
        call_id=2,
        kind=m.PUT_IF_ABSENT,
        map_name="m",
        keys=(key,) * 400,
        values=(b"w",) * 400,
        previous=True,
    )
    (reply,) = replies(owner.handle(now + 1, Receive("c", None, None, many)))
    assert set(codes(reply)) == {m.ReplyCode.REJECTED}
    assert "fewer keys" in reply.reason
    assert set(values(reply)) <= {None}
    few = msgspec.structs.replace(many, call_id=3, keys=column((key,) * 4), values=column((b"w",) * 4))
    (answered,) = replies(owner.handle(now + 2, Receive("c", None, None, few)))
    assert values(answered) == (b"v" * (1 << 20),) * 4


def test_writes_refused_overloaded_take_no_memory_allowance() -> None:
    """Found by an outside tester: writes refused OVERLOADED (retried by the client) counted
    toward the memory limit until the next tick, and the next write was refused MEMORY_FULL."""
    small_backlog = replace(LIMITED, backup_count=1, max_memory_bytes=100_000, max_pending_write_bytes=20_000)
    b_c = PartitionTable.from_lists([[B, C]] * 4, [1, 1, 1, 1])
    owner, now = following(B, b_c, config=small_backlog)
    now = grant_lease(owner, now)
    answered = []
    for call_id in range(1, 13):  # the backup never answers: one write waits, the others are OVERLOADED
        write = request(call_id, m.PUT, keys(call_id, 1), b"v" * 15_000)
        answered += [
            code for reply in replies(owner.handle(now, Receive("c", None, None, write))) for code in codes(reply)
        ]
    assert answered.count(m.ReplyCode.OVERLOADED) == 11
    assert m.ReplyCode.MEMORY_FULL not in answered


PARTITIONS = 64


def _alone_with(limit_bytes: int, maps: tuple = ()) -> tuple[Member, int]:
    """A member that leads a cluster of its own and owns all of its 64 partitions."""
    config = replace(
        CONFIG,
        partition_count=PARTITIONS,
        backup_count=0,
        initial_cluster_size=1,
        max_memory_bytes=limit_bytes,
        maps=maps,
    )
    member = Member(A, config, (A.address,), random.Random(1))
    member.handle(0, Start())
    _, now = run_ticks(member, 0, 5_000)
    return member, now


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    slack_bytes=st.integers(0, 60_000),
    puts=st.lists(
        st.tuples(
            st.sampled_from(["m", "n" * 200, "lived"]),  # "lived": a map whose entries have a TTL
            st.integers(1, 400),  # keys
            st.integers(0, 40),  # a value's bytes
            st.booleans(),  # a TTL given in the request
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_no_put_takes_an_owner_past_its_limit(slack_bytes: int, puts: list) -> None:
    """A wider search over the class of the outside tester's finding: puts into new maps with long
    names, keys spread over many partitions, with and without TTLs, against limits close to what
    they need. After each, the engine's own count is within max_memory_bytes."""
    limit = 30_000 + slack_bytes
    owner, now = _alone_with(limit, maps=(("lived", MapConfig(time_to_live_seconds=60)),))
    for call_id, (name, count, value_bytes, ttl) in enumerate(puts, start=1):
        keys = tuple(b"%d-%d" % (call_id, n) for n in range(count))
        request = map_request(
            call_id=call_id,
            kind=m.PUT,
            map_name=name,
            keys=keys,
            values=(b"v" * value_bytes,) * count,
            ttl_ms=60_000 if ttl else -1,
        )
        now += 1
        (reply,) = replies(owner.handle(now, Receive("c", None, None, request)))
        assert set(codes(reply)) <= {m.ReplyCode.OK, m.ReplyCode.MEMORY_FULL}
        _, now = run_ticks(owner, now, now + CONFIG.tick_ms)  # the engine's exact count
        assert owner.data.memory_bytes <= limit, (call_id, owner.data.memory_bytes - limit)
