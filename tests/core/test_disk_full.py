"""A persistent member short of disk: with less free space than its ``disk_reserve_bytes`` plus
room to rewrite what it holds (as its runtime reports with each ``Synced``), an owner refuses
writes DISK_FULL (nothing applied, the reason naming the member and its free space) while reads
and removes go on, and takes writes again once the space comes back. What it says of its disk
(status) is its own count of what it wrote."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from shardgrid.core import messages as m
from shardgrid.core.disk_usage import UNKNOWN_FREE_BYTES, DiskUsage
from shardgrid.core.effects import DiskFile, Persist, WriteMode
from shardgrid.core.inputs import Receive, Synced
from shardgrid.core.table import PartitionTable
from tests.core.test_member import CONFIG, B, following, grant_lease, replies, run_ticks
from tests.core.test_memory_limit import keys
from tests.wire import codes, map_request

B_ALONE = PartitionTable.from_lists([[B]] * 4, [1, 1, 1, 1])
RESERVE_BYTES = 1_000_000
PERSISTENT = replace(CONFIG, backup_count=0, persistent=True, disk_reserve_bytes=RESERVE_BYTES)


def put(call_id: int, keys: list[bytes], kind: m.OpKind = m.PUT) -> m.MapRequest:
    """A request of client "c", its call ``call_id`` its write too (a late copy is the same call)."""
    values = (b"v" * 100,) * len(keys) if kind == m.PUT else ()
    named = {"client_id": "c", "write_id": call_id} if kind != m.GET else {}
    return map_request(call_id=call_id, kind=kind, map_name="m", keys=tuple(keys), values=values, **named)


def persisted(effects: list) -> int:
    return sum(1 for e in effects if isinstance(e, Persist))


def test_an_owner_short_of_disk_refuses_writes_serves_reads_and_removes_and_recovers() -> None:
    owner, now = following(B, B_ALONE, config=PERSISTENT)
    now = grant_lease(owner, now)
    written = keys(0, 20)
    effects = owner.handle(now + 1, Receive("c", None, None, put(1, written[:10])))
    (reply,) = replies(effects)
    assert codes(reply) == (m.ReplyCode.OK,) * 10  # never told its free space: nothing refused
    writes = owner.status(0).unsynced_writes
    assert writes >= 1
    assert persisted(effects) >= 1
    # Synced: plenty of room.
    owner.handle(now + 2, Synced(writes, 10 * RESERVE_BYTES))
    status = owner.status(0)
    assert status.persistent
    assert status.unsynced_writes == 0
    assert status.sync_lag_ms == 0
    assert status.disk_free_bytes == 10 * RESERVE_BYTES
    assert not status.disk_full
    assert status.disk_bytes > 0
    # The disk fills up (another process): the next report says so.
    owner.handle(now + 3, Synced(writes, RESERVE_BYTES // 2))
    (refused,) = replies(owner.handle(now + 4, Receive("c", None, None, put(2, written[10:]))))
    assert set(codes(refused)) == {m.ReplyCode.DISK_FULL}
    assert B.address in refused.reason
    assert "refused (not applied)" in refused.reason
    assert str(RESERVE_BYTES // 2) in refused.reason
    assert owner.status(0).disk_full
    (read,) = replies(owner.handle(now + 5, Receive("c", None, None, put(3, written[:10], m.GET))))
    assert codes(read) == (m.ReplyCode.OK,) * 10
    (removed,) = replies(owner.handle(now + 6, Receive("c", None, None, put(4, written[:2], m.REMOVE))))
    assert codes(removed) == (m.ReplyCode.OK,) * 2
    # A late copy of the refused write is refused the same way, even once there is room again.
    owner.handle(now + 7, Synced(owner.status(0).unsynced_writes + writes, 10 * RESERVE_BYTES))
    assert not owner.status(0).disk_full
    (again,) = replies(owner.handle(now + 8, Receive("c", None, None, put(2, written[10:]))))
    assert set(codes(again)) == {m.ReplyCode.DISK_FULL}
    (later,) = replies(owner.handle(now + 9, Receive("c", None, None, put(5, written[10:]))))
    assert codes(later) == (m.ReplyCode.OK,) * 10


def test_the_room_kept_grows_with_the_records_held() -> None:
    """Free space above the reserve alone is not enough: a rewrite of the records needs room."""
    owner, now = following(B, B_ALONE, config=PERSISTENT)
    now = grant_lease(owner, now)
    written = keys(0, 400)
    for call_id in range(1, 5):
        batch = written[(call_id - 1) * 100 : call_id * 100]
        owner.handle(now + call_id, Receive("c", None, None, put(call_id, batch)))
    _, now = run_ticks(owner, now + 10, now + 10 + CONFIG.tick_ms)  # the engine's exact count
    held = owner.status(0).memory_bytes
    assert held > 40_000
    owner.handle(now, Synced(0, RESERVE_BYTES + held // 2))
    assert owner.status(0).disk_full
    owner.handle(now + 1, Synced(0, RESERVE_BYTES + 2 * held))
    assert not owner.status(0).disk_full


def test_a_member_that_is_not_persistent_never_refuses_for_its_disk() -> None:
    owner, now = following(B, B_ALONE, config=replace(PERSISTENT, persistent=False))
    now = grant_lease(owner, now)
    owner.handle(now, Synced(0, 0))  # no runtime says this; and if one did, nothing changes
    (reply,) = replies(owner.handle(now + 1, Receive("c", None, None, put(1, keys(0, 5)))))
    assert codes(reply) == (m.ReplyCode.OK,) * 5
    status = owner.status(0)
    assert not status.persistent
    assert status.disk_bytes == 0
    assert not status.disk_full


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(
                st.just("write"), st.sampled_from(list(DiskFile)), st.integers(0, 5_000), st.sampled_from(WriteMode)
            ),
            st.tuples(st.just("report"), st.integers(0, 40), st.integers(-1, 1_000_000)),
            st.tuples(st.just("wait"), st.integers(0, 1_000)),
        ),
        max_size=60,
    )
)
def test_the_count_follows_the_writes(steps: list[tuple]) -> None:
    """Each file's bytes are what was written to it since its last replacement (and its next file's,
    while a compaction builds one), the free space is
    the last report less what was written since, and the lag is the oldest unsynced write's age."""
    usage = DiskUsage()
    sizes = dict.fromkeys(DiskFile, 0)
    following = dict.fromkeys(DiskFile, 0)  # a compaction's next file, beside each
    times: list[int] = []  # when each write was emitted
    synced = 0
    now = 0
    free, written_since = UNKNOWN_FREE_BYTES, 0
    for step in steps:
        if step[0] == "write":
            _, file, size, mode = step
            if mode in (WriteMode.ADOPT_NEXT, WriteMode.DISCARD_NEXT):
                size = 0
            number = usage.wrote(file, size, mode=mode, now_ms=now)
            times.append(now)
            assert number == len(times)
            if mode is WriteMode.APPEND:
                sizes[file] += size
            elif mode is WriteMode.REPLACE:
                sizes[file], following[file] = size, 0
            elif mode is WriteMode.BEGIN_NEXT:
                following[file] = size
            elif mode is WriteMode.APPEND_NEXT:
                following[file] += size
            elif mode is WriteMode.ADOPT_NEXT:
                sizes[file], following[file] = following[file], 0
            else:
                following[file] = 0
            written_since += size
        elif step[0] == "report":
            _, back, reported = step
            persisted = max(synced, len(times) - back) if times else 0
            usage.reported(persisted, reported)
            synced = max(synced, persisted)
            if reported != UNKNOWN_FREE_BYTES:
                free, written_since = reported, 0
        else:
            now += step[1]
        assert usage.disk_bytes == sum(sizes.values()) + sum(following.values())
        assert all(usage.file_bytes(file) == sizes[file] + following[file] for file in DiskFile)
        assert usage.unsynced_writes == len(times) - synced
        assert usage.sync_lag_ms(now) == (now - times[synced] if synced < len(times) else 0)
        expected_free = UNKNOWN_FREE_BYTES if free == UNKNOWN_FREE_BYTES else max(0, free - written_since)
        assert usage.free_bytes == expected_free
