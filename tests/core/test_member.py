"""The member state machine driven by hand: events in, effects out, no simulator."""

from __future__ import annotations

import random

import pytest

from shardgrid.core import events
from shardgrid.core.config import MemberConfig
from shardgrid.core.effects import Emit, Receive, ReplyToClient, Send, SendToAddress, SetTimer, Start, TimerFired
from shardgrid.core.errors import InvariantViolation
from shardgrid.core.identity import Replica
from shardgrid.core.member import Member
from shardgrid.core.messages import (
    NOT_OWNER,
    OK,
    BackupAck,
    BackupOperation,
    ClientReply,
    ClientRequest,
    JoinRequest,
    MemberListUpdate,
    MigrationDataDone,
    MigrationRecord,
    MigrationRequest,
    Operation,
    TableEntry,
)
from shardgrid.core.migration import Migration
from shardgrid.core.table import PartitionTable

A = Replica("aaaaaaaa-0000-4000-8000-000000000001", "127.0.0.1:5701")
B = Replica("bbbbbbbb-0000-4000-8000-000000000002", "127.0.0.1:5702")
C = Replica("cccccccc-0000-4000-8000-000000000003", "127.0.0.1:5703")
CONFIG = MemberConfig(partition_count=4, backup_count=1)


def bootstrapped_master() -> tuple[Member, int]:
    member = Member(A, CONFIG, (A.address, B.address), random.Random(1))
    now = 0
    member.handle(now, Start())
    while not member.is_master:
        now += CONFIG.tick_ms
        member.handle(now, TimerFired("tick"))
    return member, now


def test_the_first_seed_starts_the_cluster_alone_after_the_bootstrap_delay() -> None:
    member = Member(A, CONFIG, (A.address, B.address), random.Random(1))
    effects = member.handle(0, Start())
    assert SendToAddress(B.address, JoinRequest(A, False)) in effects
    assert SetTimer("tick", CONFIG.tick_ms) in effects
    master, now = bootstrapped_master()
    assert now >= CONFIG.bootstrap_after_ms
    assert master.members[0].replica == A
    assert master.table is not None  # a data member assigns the partitions when it starts the cluster
    assert {e.event.__class__ for e in master.handle(now, TimerFired("tick")) if isinstance(e, Emit)} <= {
        events.MigrationEvent
    }


def test_the_master_admits_a_joiner_and_publishes_the_member_list() -> None:
    master, now = bootstrapped_master()
    effects = master.handle(now + 1, Receive(B.address, None, None, JoinRequest(B)))
    lists = [e.message for e in effects if isinstance(e, Send) and isinstance(e.message, MemberListUpdate)]
    assert lists
    assert lists[0].version == 2
    assert [m.replica for m in lists[0].members] == [A, B]
    assert Emit(events.MemberAdded(B, 2)) in effects


def test_time_never_goes_backwards() -> None:
    master, now = bootstrapped_master()
    with pytest.raises(InvariantViolation, match="backwards"):
        master.handle(now - 1, TimerFired("tick"))


def _member_with_table(identity: Replica, versions: tuple[int, ...]) -> Member:
    """A joined member of [A, B, C] whose table has A owning every partition, B backing it up."""
    member = Member(identity, CONFIG, (A.address,), random.Random(2))
    member.handle(0, Start())
    from shardgrid.core.messages import MemberEntry

    listing = MemberListUpdate(3, A, (MemberEntry(A), MemberEntry(B), MemberEntry(C)))
    member.handle(1, Receive(A.address, A, identity.uuid, listing))
    member.table = PartitionTable.from_lists([[A, B]] * 4, versions)
    member.handle(2, Receive(A.address, A, identity.uuid, ClientRequest(0, ())))
    return member


def test_a_migration_expecting_another_partition_version_is_refused() -> None:
    owner = _member_with_table(A, (5, 5, 5, 5))
    owner.master = B  # pretend B is master so the request is from the master
    record = MigrationRecord("m-1", 0, Migration(None, -1, -1, C, -1, 1), version_before=4)
    request = MigrationRequest(3, record, TableEntry(0, (A, B), 4))
    effects = owner.handle(10, Receive(B.address, B, A.uuid, request))
    done = [e.message for e in effects if isinstance(e, Send) and isinstance(e.message, MigrationDataDone)]
    assert len(done) == 1
    assert not done[0].success
    assert "partition version 5 is not 4" in done[0].reason
    assert owner.active == {}


def test_a_write_from_a_member_that_is_not_the_owner_here_is_not_applied_or_acked() -> None:
    backup = _member_with_table(B, (1, 1, 1, 1))
    backup.stores[0] = backup.stores.get(0) or __import__("shardgrid.core.store").core.store.PartitionData()
    stale_owner_op = BackupOperation(0, 1, Operation("put", "m", b"k", b"v"), "")
    effects = backup.handle(10, Receive(C.address, C, B.uuid, stale_owner_op))
    assert not [e for e in effects if isinstance(e, Send) and isinstance(e.message, BackupAck)]
    assert backup.stores[0].maps == {}
    effects = backup.handle(11, Receive(A.address, A, B.uuid, stale_owner_op))
    assert [e.message for e in effects if isinstance(e, Send)] == [BackupAck(0, 1)]
    assert backup.stores[0].maps == {"m": {b"k": b"v"}}


def test_a_client_is_sent_to_the_owner_and_the_owner_answers_after_its_backup() -> None:
    backup = _member_with_table(B, (1, 1, 1, 1))
    request = ClientRequest(7, ((0, Operation("put", "m", b"k", b"v")),))
    effects = backup.handle(10, Receive("client-1", None, None, request))
    reply = next(e.message for e in effects if isinstance(e, ReplyToClient))
    assert reply.results[0].status == NOT_OWNER
    assert reply.results[0].owner_address == A.address

    owner = _member_with_table(A, (1, 1, 1, 1))
    batch = ClientRequest(8, tuple((pid, Operation("put", "m", bytes([pid]), b"v")) for pid in range(4)))
    effects = owner.handle(10, Receive("client-1", None, None, batch))
    assert not [e for e in effects if isinstance(e, ReplyToClient)]  # waiting for B's acks
    sent = [e.message for e in effects if isinstance(e, Send) and e.target == B]
    assert len(sent) == 4
    for i, op in enumerate(sent):
        effects = owner.handle(11 + i, Receive(B.address, B, A.uuid, BackupAck(op.partition_id, op.sequence)))
    replies = [e.message for e in effects if isinstance(e, ReplyToClient)]
    assert replies == [ClientReply(8, replies[0].results)]
    assert [r.status for r in replies[0].results] == [OK] * 4
    get_all = ClientRequest(9, tuple((pid, Operation("get", "m", bytes([pid]))) for pid in range(4)))
    effects = owner.handle(20, Receive("client-1", None, None, get_all))
    reply = next(e.message for e in effects if isinstance(e, ReplyToClient))
    assert [r.value for r in reply.results] == [b"v"] * 4


def test_a_late_copy_of_an_old_replica_sync_does_not_roll_a_backup_back() -> None:
    from shardgrid.core.messages import Entry, ReplicaSyncAck, ReplicaSyncChunk
    from shardgrid.core.store import PartitionData

    backup = _member_with_table(B, (1, 1, 1, 1))
    backup.stores[0] = PartitionData({"m": {b"k": b"new"}}, sequence=5, lineage="L")
    old = ReplicaSyncChunk("a-s1", 0, 0, (Entry("m", b"k", b"old"),), True, 3, "L")
    effects = backup.handle(10, Receive(A.address, A, B.uuid, old))
    assert [e.message for e in effects if isinstance(e, Send)] == [ReplicaSyncAck("a-s1", 0, True)]
    assert backup.stores[0].sequence == 5
    assert backup.stores[0].maps == {"m": {b"k": b"new"}}
    newer = ReplicaSyncChunk("a-s2", 0, 0, (Entry("m", b"k", b"newer"),), True, 6, "L")
    backup.handle(11, Receive(A.address, A, B.uuid, newer))
    assert backup.stores[0].sequence == 6
    assert backup.stores[0].maps == {"m": {b"k": b"newer"}}


def test_a_resent_commit_is_acknowledged_even_after_its_record_was_forgotten() -> None:
    from shardgrid.core.messages import MigrationCommit, MigrationCommitAck, PartitionUpdate

    destination = _member_with_table(C, (1, 1, 1, 1))
    record = MigrationRecord("m-9", 2, Migration(B, 1, -1, C, -1, 1), version_before=1, status="committed")
    committed = TableEntry(2, (A, C, None, None, None, None, None), 2)
    destination.apply_entries((committed,))  # it applied the commit; its ack to the master was lost
    destination.completed[record.migration_id] = record
    stale_full = PartitionUpdate(3, tuple(TableEntry(p, (A, B), 1) for p in range(4)), (), full=True)
    destination.handle(12, Receive(A.address, A, C.uuid, stale_full))
    assert record.migration_id in destination.completed  # the master has not reflected it yet
    destination.completed.clear()  # even forgotten, the table says it is done here
    effects = destination.handle(13, Receive(A.address, A, C.uuid, MigrationCommit(3, record, committed)))
    assert [e.message for e in effects if isinstance(e, Send)] == [MigrationCommitAck("m-9", True)]
