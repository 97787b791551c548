"""A retry is answered, never applied twice (found by an outside tester in network namespaces: a
write acknowledged through a retry was applied again when its first attempt arrived late, over a
newer acknowledged write). Each write names itself (client id, write id) in every attempt; the
partition remembers what it applied, and its backups, migrations and syncs carry that along."""

from __future__ import annotations

import pytest

from shardgrid.core import messages as m
from shardgrid.core.inputs import Receive
from shardgrid.core.records import page_of
from shardgrid.core.table import PartitionTable
from shardgrid.core.transfer import Staging
from shardgrid.core.write_records import WINDOW_IDS, Seen, WriteRecords
from tests.core.test_map_replication import B_A_C, batches_to
from tests.core.test_member import A, B, C, following, grant_lease, key_in, replies, synced
from tests.wire import codes, map_request, sync_chunk, values, write_run


def named(
    call_id: int, value: bytes | None, write_id: int, kind: m.OpKind = m.PUT, previous: bool = True
) -> m.MapRequest:
    return map_request(
        call_id=call_id,
        kind=kind,
        map_name="m",
        keys=(key_in(0),),
        values=(value,) if value is not None else (),
        previous=previous,
        client_id="client-1",
        write_id=write_id,
    )


def ack(owner, now: int, through: int) -> list:
    return replies(owner.handle(now, Receive(A.address, A, B.uuid, m.BackupAckBatch(((0, through),)))))


def held(owner) -> bytes | None:
    return owner.data.view(0).get("m", key_in(0))


def test_a_retry_of_an_applied_write_gets_the_first_answer_and_changes_nothing():
    owner, now = following(B, B_A_C)
    now = grant_lease(owner, now)
    owner.handle(now, Receive("c", None, None, named(1, b"v1", write_id=7)))
    (first,) = ack(owner, now + 1, 1)
    assert (codes(first), values(first)) == ((m.ReplyCode.OK,), (None,))
    owner.handle(now + 2, Receive("c", None, None, named(2, b"v2", write_id=8)))
    ack(owner, now + 3, 2)
    sequence = owner.data.store(0).sequence
    # The first write's first attempt, held up on its way, arrives now: answered, not applied.
    effects = owner.handle(now + 4, Receive("c", None, None, named(3, b"v1", write_id=7)))
    (late,) = replies(effects)
    assert (codes(late), values(late)) == ((m.ReplyCode.OK,), (None,))
    assert held(owner) == b"v2"
    assert owner.data.store(0).sequence == sequence
    assert batches_to(effects, A) == []  # nothing sent to the backups either


@pytest.mark.parametrize("previous", [True, False])
def test_a_retry_while_the_first_attempt_waits_for_its_backups_is_asked_to_come_back(previous):
    """Found by an outside tester (network namespaces, an owner cut off from its backup, attempts
    of 1 s): a put that asked for no previous value kept no answer, so its retry was checked
    against the writer's older writes only and answered OK while the first attempt still waited
    for the backup, which never got it: acknowledged, then lost when the backup took over."""
    owner, now = following(B, B_A_C)
    now = grant_lease(owner, now)
    owner.handle(now, Receive("c", None, None, named(1, b"v1", write_id=7, previous=previous)))
    (settling,) = replies(owner.handle(now + 1, Receive("c", None, None, named(2, b"v1", 7, previous=previous))))
    assert codes(settling) == (m.ReplyCode.SETTLING,)
    assert settling.retry_after_ms > 0
    ack(owner, now + 2, 1)
    (again,) = replies(owner.handle(now + 3, Receive("c", None, None, named(3, b"v1", 7, previous=previous))))
    assert codes(again) == (m.ReplyCode.OK,)


def test_a_put_if_absent_that_wrote_nothing_answers_a_retry_the_same_after_the_key_went():
    owner, now = following(B, B_A_C)
    now = grant_lease(owner, now)
    owner.handle(now, Receive("c", None, None, named(1, b"first", write_id=1)))
    ack(owner, now + 1, 1)
    (kept,) = replies(owner.handle(now + 2, Receive("c", None, None, named(2, b"second", 2, m.PUT_IF_ABSENT))))
    assert values(kept) == (b"first",)
    owner.handle(now + 3, Receive("c", None, None, named(3, None, 3, m.REMOVE)))
    ack(owner, now + 4, 2)
    (again,) = replies(owner.handle(now + 5, Receive("c", None, None, named(4, b"second", 2, m.PUT_IF_ABSENT))))
    assert (codes(again), values(again)) == ((m.ReplyCode.OK,), (b"first",))
    assert held(owner) is None  # the retry wrote nothing


def test_a_write_too_old_to_tell_is_refused_and_not_applied():
    owner, now = following(B, B_A_C)
    now = grant_lease(owner, now)
    owner.handle(now, Receive("c", None, None, named(1, b"new", write_id=WINDOW_IDS + 10)))
    ack(owner, now + 1, 1)
    (refused,) = replies(owner.handle(now + 2, Receive("c", None, None, named(2, b"old", write_id=5))))
    assert codes(refused) == (m.ReplyCode.REJECTED,)
    assert "cannot be told" in refused.reason
    assert held(owner) == b"new"


def test_the_backup_remembers_what_its_owner_applied():
    backup, now = following(C, PartitionTable.from_lists([[B, C, A]] * 4, [1, 1, 1, 1]))
    synced(backup, 0, now, owner=B)
    run = write_run(
        partition_id=0,
        lineage="",
        first_sequence=1,
        kind=m.PUT,
        map_name="m",
        keys=(key_in(0),),
        values=(b"v1",),
        client_id="client-1",
        write_id=7,
        record_ttl_ms=60_000,
        answer=(None,),
    )
    backup.handle(now, Receive(B.address, B, C.uuid, m.BackupBatch((run,))))
    records = backup.data.store(0).writes
    seen, writer = records.seen("client-1", 7, now)
    assert seen.value == "applied"
    assert writer is not None
    assert writer.answers[7].values == (None,)
    assert records.seen("client-1", 7, now + 61_000)[0].value == "new"  # its time is over


def test_a_migration_or_sync_carries_what_the_partition_applied_to_its_new_holder():
    records = WriteRecords()
    records.record("client-1", 7, 3, (b"was",), expires_ms=20_000)
    chunk = sync_chunk(
        sync_id="s",
        partition_id=0,
        sequence=0,
        map_name="m",
        records=page_of((b"k",), (b"v",)),
        last=True,
        replica_sequence=3,
        lineage="L",
        base_sequence=-1,
        writers=records.snapshot(now_ms=10_000),
    )
    staging: Staging = Staging()
    staging.receive(chunk, window=4)
    copy = staging.data(now_ms=50_000)  # the new holder's clock
    seen, writer = copy.writes.seen("client-1", 7, now_ms=59_000)
    assert seen is Seen.APPLIED
    assert writer is not None
    assert writer.answers[7].values == (b"was",)
    assert copy.writes.seen("client-1", 7, now_ms=60_001)[0] is Seen.NEW  # 10 s were left of it
