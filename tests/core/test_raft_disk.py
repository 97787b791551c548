"""A member's Raft file: every command, a real metadata snapshot and the hard state read back as
written; bytes no member wrote are ``CorruptDisk``, never another error; a torn last step is
dropped whole."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardgrid.core import codec
from shardgrid.core.disk_records import RecordKind, encode_record
from shardgrid.core.errors import CorruptDisk
from shardgrid.core.identity import MemberId
from shardgrid.core.metadata import commands as c
from shardgrid.core.metadata.cluster_state import ClusterState
from shardgrid.core.metadata.state import MetadataState
from shardgrid.core.raft.log import Entry, Snapshot
from shardgrid.core.raft.membership import ConfChange, Membership
from shardgrid.core.raft.storage import HardState, RaftWrite
from shardgrid.core.raft_disk import load_raft, raft_record, storage_record
from shardgrid.core.table import PartitionTable

A, B = MemberId("a" * 8, "x:1"), MemberId("b" * 8, "x:2")
TABLE = PartitionTable.from_lists([[A, B], [B, A], [A]], [3, 4, 5])
STATE = MetadataState(3, (c.MemberRecord(A), c.MemberRecord(B, lite=True)), TABLE, ClusterState.FROZEN, {})
SNAPSHOT = Snapshot(9, 4, Membership.of([A], [B]), STATE)
ENTRIES = (
    Entry(term=4, index=10, command=(c.AssignPartitions(TABLE), c.MarkUnreachable((B,)))),
    Entry(term=5, index=11, command=None, change=ConfChange(promote=B)),
    Entry(term=5, index=12, command=(), forced=Membership.of([A], [B])),
)


def steps() -> list[RaftWrite]:
    return [
        RaftWrite(snapshot=SNAPSHOT, hard_state=HardState(4, A, 9)),
        RaftWrite(entries_from=10, entries=ENTRIES),
        RaftWrite(hard_state=HardState(5, None, 11)),
        RaftWrite(entries_from=12, entries=(Entry(term=5, index=12, command=(c.StopAllMembers(),)),)),
    ]


def test_a_members_steps_read_back_as_the_storage_they_add_up_to() -> None:
    data = b"".join(raft_record(write) for write in steps())
    storage, scan = load_raft(data)
    assert scan.torn_bytes == 0
    assert storage.hard_state == HardState(5, None, 11)
    assert storage.snapshot is not None
    assert codec._state_to_wire(storage.snapshot.state) == codec._state_to_wire(STATE)
    assert storage.entries[:2] == list(ENTRIES[:2])
    assert storage.entries[2].command == (c.StopAllMembers(),)  # the later step replaced entry 12
    again, _ = load_raft(storage_record(storage))
    assert (again.hard_state, again.entries) == (storage.hard_state, storage.entries)


def test_a_torn_last_step_is_dropped_whole() -> None:
    records = [raft_record(write) for write in steps()]
    whole = b"".join(records)
    for cut in range(len(whole) - len(records[-1]) + 1, len(whole)):
        storage, scan = load_raft(whole[:cut])
        assert scan.torn_bytes == cut - (len(whole) - len(records[-1]))
        assert storage.hard_state == HardState(5, None, 11)
        assert storage.entries == list(ENTRIES)


@given(st.binary(max_size=200))
def test_bytes_no_member_wrote_are_a_corrupt_disk(payload: bytes) -> None:
    with contextlib.suppress(CorruptDisk):
        load_raft(encode_record(RecordKind.RAFT_WRITE, payload))


def test_a_step_that_leaves_what_no_server_could_is_a_corrupt_disk() -> None:
    data = raft_record(RaftWrite(snapshot=SNAPSHOT, hard_state=HardState(4, A, 9))) + raft_record(
        RaftWrite(entries_from=10, entries=(Entry(term=9, index=10),))  # a term past the hard state's
    )
    with pytest.raises(CorruptDisk, match=r"raft\.log holds what no Raft server could have written"):
        load_raft(data, name="raft.log")


def test_an_old_record_replayed_at_the_end_is_a_corrupt_disk() -> None:
    """It passes its checksum; what it says cannot follow what came before (found by an outside
    tester: the term and the vote rolled back, and a committed entry could be written again)."""
    first = raft_record(RaftWrite(snapshot=SNAPSHOT, hard_state=HardState(4, A, 9)))
    vote = raft_record(RaftWrite(hard_state=HardState(5, B, 9)))
    later = raft_record(RaftWrite(entries_from=10, entries=(Entry(term=5, index=10),), hard_state=HardState(5, B, 10)))
    for replayed, reason in (
        (first, "the term goes back from 5 to 4"),
        (raft_record(RaftWrite(hard_state=HardState(5, A, 10))), "the vote of term 5 changes"),
        (raft_record(RaftWrite(hard_state=HardState(5, B, 9))), "the commit point goes back from 10 to 9"),
        (raft_record(RaftWrite(entries_from=10, entries=(Entry(term=5, index=10),))), "entry 10 is written again"),
        (raft_record(RaftWrite(snapshot=Snapshot(2, 1, Membership.of([A], [B]), STATE))), "the snapshot goes back"),
    ):
        with pytest.raises(CorruptDisk, match="cannot follow the ones before it: " + reason):
            load_raft(first + vote + later + replayed)


def test_configuration_changes_that_cannot_follow_one_another_are_a_corrupt_disk() -> None:
    stranger = MemberId("c" * 8, "x:3")
    data = raft_record(RaftWrite(snapshot=SNAPSHOT, hard_state=HardState(4, A, 9))) + raft_record(
        RaftWrite(entries_from=10, entries=(Entry(term=4, index=10, change=ConfChange(remove=(stranger,))),))
    )
    with pytest.raises(CorruptDisk, match="holds what no Raft server could have written: entry 10"):
        load_raft(data)


def test_a_log_longer_than_one_write_holds_is_rewritten_in_several() -> None:
    from shardgrid.core.limits import MAX_ENTRIES_PER_RAFT_WRITE
    from shardgrid.core.raft.storage import RaftStorage

    count = MAX_ENTRIES_PER_RAFT_WRITE + 5
    entries = [Entry(term=4, index=10 + i) for i in range(count)]
    storage = RaftStorage(HardState(4, A, 9 + count), SNAPSHOT, entries)
    again, scan = load_raft(storage_record(storage))
    assert len(scan.records) == 3  # two of entries, then the hard state
    assert (again.hard_state, again.entries) == (storage.hard_state, entries)
