"""MemberId syncs by per-map versions (seed 002's namespaces): a backup behind gets just the maps
changed since what it holds, writes to the other maps go on meanwhile, and transfers go a window
at a time, or all at once with fragments off."""

from __future__ import annotations

from dataclasses import replace

from shardgrid.core import messages as m
from shardgrid.core.hashing import partition_id_of_serialized
from shardgrid.core.inputs import Receive
from shardgrid.core.member import Member
from shardgrid.core.metadata import MemberRecord, MetadataState
from shardgrid.core.migration import Migration, MigrationRecord
from shardgrid.core.raft import Membership, Snapshot
from shardgrid.core.raft.messages import InstallSnapshot
from shardgrid.core.records import RESERVED_RECORD_BYTES, page_items, page_of
from shardgrid.core.table import PartitionTable
from tests.core.test_member import (
    A_OWNS_B_BACKS,
    B_OWNS_A_BACKS,
    CONFIG,
    A,
    B,
    C,
    _destination_of,
    following,
    grant_lease,
    key_in,
    replies,
    run_ticks,
    sent,
    synced,
)
from tests.wire import codes, map_request, migration_chunk, of_migrations, of_syncs, sync_ack, sync_chunk


def keys_in(pid: int, count: int) -> list[bytes]:
    """``count`` distinct keys of partition ``pid``."""
    keys = (f"key-{i}".encode() for i in range(100_000))
    return [key for key, _ in zip((k for k in keys if _pid(k) == pid), range(count), strict=False)]


def _pid(key: bytes) -> int:
    return partition_id_of_serialized(key, CONFIG.partition_count)


def put(call_id: int, map_name: str, key: bytes, value: bytes = b"v") -> m.MapRequest:
    return map_request(call_id=call_id, kind=m.PUT, map_name=map_name, keys=(key,), values=(value,))


def acked_put(owner: Member, now: int, call_id: int, map_name: str, key: bytes, value: bytes = b"v") -> None:
    """A put the backup (A) acknowledged: the owner answers it."""
    (batch,) = sent(owner.handle(now, Receive("c", None, None, put(call_id, map_name, key, value))), m.BackupBatch)
    ack = m.BackupAckBatch(((batch.runs[0].partition_id, batch.runs[0].last_sequence),))
    (reply,) = replies(owner.handle(now, Receive(A.address, A, B.uuid, ack)))
    assert codes(reply) == (m.ReplyCode.OK,)


def test_a_backup_behind_gets_just_the_maps_changed_since_and_writes_to_the_others_go_on() -> None:
    owner, now = following(B, B_OWNS_A_BACKS)
    now = grant_lease(owner, now)
    first, second = keys_in(0, 2)
    acked_put(owner, now + 1, 1, "a", first)  # sequence 1
    acked_put(owner, now + 2, 2, "b", first)  # sequence 2
    # A third write, to "b", reaches no backup (its batch is lost): A holds sequence 2.
    owner.handle(now + 3, Receive("c", None, None, put(3, "b", second, b"w")))

    effects = owner.handle(now + 4, Receive(A.address, A, B.uuid, m.ReplicaSyncRequest(0, "", 2)))
    (chunk,) = of_syncs(sent(effects, m.TransferChunk))
    assert (chunk.map_name, chunk.map_version, chunk.base_sequence, chunk.replica_sequence) == ("b", 3, 2, 3)
    assert page_items(chunk.records) == {first: b"v", second: b"w"}
    assert chunk.last

    # While "b" is sent, its writes wait; "a" takes writes as usual.
    waits = replies(owner.handle(now + 5, Receive("c", None, None, put(4, "b", first))))
    assert codes(waits[0]) == (m.ReplyCode.MIGRATING,)
    goes = owner.handle(now + 6, Receive("c", None, None, put(5, "a", second)))
    assert [run.map_name for batch in sent(goes, m.BackupBatch) for run in batch.runs] == ["a"]

    # Done: the write it carried is acknowledged, and the later run goes to A at once.
    done = sync_ack(chunk.transfer_id, 0, True, complete=True)
    effects = owner.handle(now + 7, Receive(A.address, A, B.uuid, done))
    assert [r.call_id for r in replies(effects)] == [3]
    assert [run.first_sequence for batch in sent(effects, m.BackupBatch) for run in batch.runs] == [4]
    assert owner.data.settled(0) is False  # sequence 4 still waits for A
    after = owner.handle(now + 8, Receive("c", None, None, put(6, "b", first)))
    assert sent(after, m.BackupBatch)


def test_a_backup_whose_base_is_unknown_or_too_old_gets_the_whole_partition() -> None:
    owner, now = following(B, B_OWNS_A_BACKS)
    now = grant_lease(owner, now)
    first = key_in(0)
    acked_put(owner, now + 1, 1, "a", first)
    acked_put(owner, now + 2, 2, "b", first)
    acked_put(owner, now + 3, 3, "b", first, b"gone")
    owner.handle(
        now + 4,
        Receive(
            "c",
            None,
            None,
            map_request(call_id=4, kind=m.REMOVE, map_name="b", keys=(first,), values=()),
        ),
    )
    assert owner.data.view(0).versions_from == 4  # "b" was emptied: versions before 4 say too little
    for request in (m.ReplicaSyncRequest(0, "", 3), m.ReplicaSyncRequest(0, "other", 9), m.ReplicaSyncRequest(0)):
        effects = owner.handle(now + 5, Receive(A.address, A, B.uuid, request))
        (chunk,) = of_syncs(sent(effects, m.TransferChunk))
        assert (chunk.base_sequence, chunk.map_name, chunk.versions_from) == (-1, "a", 4)
        owner.handle(now + 5, Receive(A.address, A, B.uuid, sync_ack(chunk.transfer_id, 0, True, complete=True)))


def test_a_backup_refuses_a_sync_of_some_maps_it_does_not_hold_the_base_of_and_then_gets_everything() -> None:
    backup, now = following(B, A_OWNS_B_BACKS)
    synced(backup, 0, now, owner=A, maps={"a": {b"k": b"1"}, "b": {b"k": b"2"}}, sequence=5, lineage="L")
    # Based on sequence 6, which this backup does not hold: refused, nothing changes.
    ahead = sync_chunk(
        sync_id="s-1",
        partition_id=0,
        sequence=0,
        map_name="b",
        records=page_of((b"k",), (b"3",)),
        last=True,
        replica_sequence=8,
        lineage="L",
        base_sequence=6,
        map_version=8,
    )
    (ack,) = of_syncs(sent(backup.handle(now + 1, Receive(A.address, A, B.uuid, ahead)), m.TransferAck))
    assert not ack.accepted
    assert backup.data.view(0).maps == {"a": {b"k": b"1"}, "b": {b"k": b"2"}}
    # Based on 4: it holds 5, so every map not sent is already the owner's; "b" is replaced whole.
    based = sync_chunk(
        sync_id="s-2",
        partition_id=0,
        sequence=0,
        map_name="b",
        records=page_of((b"j",), (b"3",)),
        last=True,
        replica_sequence=8,
        lineage="L",
        base_sequence=4,
        map_version=7,
    )
    (ack,) = of_syncs(sent(backup.handle(now + 2, Receive(A.address, A, B.uuid, based)), m.TransferAck))
    assert (ack.accepted, ack.complete) == (True, True)
    store = backup.data.view(0)
    assert store.maps == {"a": {b"k": b"1"}, "b": {b"j": b"3"}}
    assert (store.sequence, store.versions["b"]) == (8, 7)

    # The owner's side: a refused sync of some maps becomes a sync of everything.
    owner, now = following(B, B_OWNS_A_BACKS)
    now = grant_lease(owner, now)
    acked_put(owner, now + 1, 1, "a", key_in(0))
    acked_put(owner, now + 2, 2, "b", key_in(0))
    (partial,) = of_syncs(
        sent(owner.handle(now + 3, Receive(A.address, A, B.uuid, m.ReplicaSyncRequest(0, "", 1))), m.TransferChunk)
    )
    assert (partial.map_name, partial.base_sequence) == ("b", 1)
    refused = sync_ack(partial.transfer_id, -1, False)
    whole = of_syncs(sent(owner.handle(now + 4, Receive(A.address, A, B.uuid, refused)), m.TransferChunk))
    assert [(c.map_name, c.base_sequence) for c in whole] == [("a", -1), ("b", -1)]


def test_a_sync_goes_a_window_at_a_time_or_all_at_once_with_fragments_off() -> None:
    for fragments, expected in ((True, CONFIG.migration_window_chunks), (False, 10)):
        config = replace(CONFIG, max_chunk_entries=1, migration_fragments_enabled=fragments)
        owner, now = following(B, B_OWNS_A_BACKS, config=config)
        now = grant_lease(owner, now)
        for i, key in enumerate(keys_in(0, 10)):
            acked_put(owner, now + 1 + i, 1 + i, "a", key)
        effects = owner.handle(now + 20, Receive(A.address, A, B.uuid, m.ReplicaSyncRequest(0)))
        chunks = of_syncs(sent(effects, m.TransferChunk))
        assert [c.sequence for c in chunks] == list(range(expected))
        assert chunks[-1].last is not fragments


def test_a_migration_destination_keeps_each_maps_version_from_its_chunks() -> None:
    record = MigrationRecord(
        migration_id="m-1",
        partition_id=0,
        migration=Migration(
            source=B,
            source_current_index=1,
            source_new_index=-1,
            destination=C,
            destination_current_index=-1,
            destination_new_index=1,
        ),
        version_before=1,
    )
    destination, now = _destination_of(record)
    chunks = [
        migration_chunk(
            record=record,
            sequence=0,
            map_name="a",
            records=page_of((b"k",), (b"1",)),
            last=False,
            replica_sequence=9,
            lineage="L",
            map_version=4,
            versions_from=2,
        ),
        migration_chunk(
            record=record,
            sequence=1,
            map_name="b",
            records=page_of((b"k",), (b"2",)),
            last=True,
            replica_sequence=9,
            lineage="L",
            map_version=9,
            versions_from=2,
        ),
    ]
    for chunk in chunks:
        destination.handle(now + 1, Receive(A.address, A, C.uuid, chunk))
    staged = destination.migrations.staged(0)
    assert (staged.versions, staged.versions_from, staged.sequence) == ({"a": 4, "b": 9}, 2, 9)


def test_a_backup_answers_a_resent_chunk_of_a_sync_it_finished_and_refuses_one_it_never_started() -> None:
    """A multi-chunk sync whose final acknowledgement was lost: the owner resends its last chunk,
    and without an answer it would resend it forever (the partition never settling)."""
    backup, now = following(B, A_OWNS_B_BACKS)
    chunks = [
        sync_chunk(
            sync_id="s-1",
            partition_id=0,
            sequence=0,
            map_name="a",
            records=page_of((b"k",), (b"1",)),
            last=False,
            replica_sequence=6,
            lineage="L",
            base_sequence=-1,
            map_version=6,
        ),
        sync_chunk(
            sync_id="s-1",
            partition_id=0,
            sequence=1,
            map_name="b",
            records=page_of((b"k",), (b"2",)),
            last=True,
            replica_sequence=6,
            lineage="L",
            base_sequence=-1,
            map_version=6,
        ),
    ]
    for chunk in chunks:
        backup.handle(now + 1, Receive(A.address, A, B.uuid, chunk))
    assert backup.data.view(0).maps == {"a": {b"k": b"1"}, "b": {b"k": b"2"}}
    (ack,) = of_syncs(sent(backup.handle(now + 2, Receive(A.address, A, B.uuid, chunks[1])), m.TransferAck))
    assert (ack.accepted, ack.complete) == (True, True)
    newer = sync_chunk(
        sync_id="s-2",
        partition_id=0,
        sequence=1,
        map_name="b",
        records=page_of((b"k",), (b"3",)),
        last=True,
        replica_sequence=9,
        lineage="L",
        base_sequence=-1,
        map_version=9,
    )
    (ack,) = of_syncs(sent(backup.handle(now + 3, Receive(A.address, A, B.uuid, newer)), m.TransferAck))
    assert not ack.accepted  # its first chunk never came: the owner starts over
    assert backup.data.sequence_of(0) == 6


def test_an_owner_starts_a_refused_whole_sync_over_at_the_next_retry() -> None:
    owner, now = following(B, B_OWNS_A_BACKS)
    now = grant_lease(owner, now)
    acked_put(owner, now + 1, 1, "a", key_in(0))
    (first,) = of_syncs(
        sent(owner.handle(now + 2, Receive(A.address, A, B.uuid, m.ReplicaSyncRequest(0))), m.TransferChunk)
    )
    owner.handle(now + 3, Receive(A.address, A, B.uuid, sync_ack(first.transfer_id, -1, False)))
    effects, _ = run_ticks(owner, now + 3, now + 3 + CONFIG.retry_interval_ms + CONFIG.tick_ms)
    (again,) = [c for c in of_syncs(sent(effects, m.TransferChunk)) if c.partition_id == 0]
    assert again.transfer_id != first.transfer_id
    assert again.sequence == 0


def _snapshot_makes_b_owner(backup: Member, now: int) -> list:
    """A snapshot (B lagged behind the log) in which B was promoted: A is gone from every partition."""
    table = PartitionTable.from_lists([[B, C]] * 4, [2, 2, 2, 2])
    state = MetadataState(CONFIG.partition_count, (MemberRecord(A), MemberRecord(B), MemberRecord(C)), table)
    snapshot = Snapshot(20, 1, Membership.of([A], [B, C]), state)
    return backup.handle(now, Receive(A.address, A, B.uuid, InstallSnapshot(1, snapshot, now)))


def test_a_backup_promoted_inside_a_snapshot_starts_a_new_lineage_and_syncs_its_backups() -> None:
    """Found by an outside tester: a promotion that reached a member inside a snapshot kept the old
    owner's lineage, so a backup holding a write this member missed would take another write at
    the same sequence as one it already held, and acknowledge it."""
    backup, now = following(B, A_OWNS_B_BACKS)
    synced(backup, 0, now, maps={"m": {b"k": b"1"}}, sequence=5, lineage="L")
    effects = _snapshot_makes_b_owner(backup, now + 1)
    store = backup.data.view(0)
    assert store.lineage not in ("L", "")
    assert (store.copy_index, store.maps, store.sequence) == (0, {"m": {b"k": b"1"}}, 5)
    chunks = [chunk for chunk in of_syncs(sent(effects, m.TransferChunk)) if chunk.partition_id == 0]
    assert [(chunk.base_sequence, chunk.lineage) for chunk in chunks] == [(-1, store.lineage)]


def test_a_backup_promoted_in_the_middle_of_a_sync_drops_it() -> None:
    """Found by an outside tester: the old owner's half-taken sync stayed forever (the member was
    busy, so the cluster never counted as safe)."""
    backup, now = following(B, A_OWNS_B_BACKS)
    first = sync_chunk(
        sync_id="s-1",
        partition_id=0,
        sequence=0,
        map_name="a",
        records=page_of((b"k",), (b"1",)),
        last=False,
        replica_sequence=6,
        lineage="L",
        base_sequence=-1,
        map_version=6,
    )
    backup.handle(now + 1, Receive(A.address, A, B.uuid, first))
    assert backup.data.receiving(0)
    _snapshot_makes_b_owner(backup, now + 2)
    assert not backup.data.receiving(0)


def test_a_migration_chunk_of_records_that_name_no_map_is_refused() -> None:
    """Found by an outside tester: it was staged as a map named ''."""
    record = MigrationRecord(
        migration_id="m-2",
        partition_id=0,
        migration=Migration(
            source=B,
            source_current_index=1,
            source_new_index=-1,
            destination=C,
            destination_current_index=-1,
            destination_new_index=1,
        ),
        version_before=1,
    )
    destination, now = _destination_of(record)
    bad = migration_chunk(
        record=record,
        sequence=0,
        map_name="",
        records=page_of((b"k",), (b"v",)),
        last=True,
        replica_sequence=9,
        lineage="L",
    )
    (ack,) = of_migrations(sent(destination.handle(now + 1, Receive(A.address, A, C.uuid, bad)), m.TransferAck))
    assert not ack.accepted
    assert destination.migrations.staged(0).maps == {}


def test_a_member_promoted_inside_a_snapshot_that_also_sends_a_migration_streams_the_new_lineage() -> None:
    """Found by an outside tester: a member that had taken a migration's copy (to become a backup)
    and then learned from one snapshot that the copy committed, that it owns the partition by
    promotion and that it sends a migration of it kept the old owner's lineage, and streamed it."""
    moving_in = MigrationRecord(
        migration_id="m-1",
        partition_id=0,
        migration=Migration(
            source=B,
            source_current_index=1,
            source_new_index=-1,
            destination=C,
            destination_current_index=-1,
            destination_new_index=1,
        ),
        version_before=1,
    )
    member, now = _destination_of(moving_in)
    chunk = migration_chunk(
        record=moving_in,
        sequence=0,
        map_name="m",
        records=page_of((b"k",), (b"v1",)),
        last=True,
        replica_sequence=5,
        lineage="L",
    )
    member.handle(now + 1, Receive(A.address, A, C.uuid, chunk))
    member.handle(now + 2, Receive(A.address, A, C.uuid, m.MigrationCommit(moving_in, 1)))
    moving_out = MigrationRecord(
        migration_id="m-2",
        partition_id=0,
        migration=Migration(
            source=None,
            source_current_index=-1,
            source_new_index=-1,
            destination=B,
            destination_current_index=-1,
            destination_new_index=1,
        ),
        version_before=3,
    )
    table = PartitionTable.from_lists([[C]] + [[A, B]] * 3, [3, 1, 1, 1])
    records = (MemberRecord(A), MemberRecord(B), MemberRecord(C))
    state = MetadataState(4, records, table, migrations={0: moving_out})
    snapshot = Snapshot(30, 1, Membership.of([A], [B, C]), state)
    effects = member.handle(now + 3, Receive(A.address, A, C.uuid, InstallSnapshot(1, snapshot, now + 3)))
    store = member.data.view(0)
    assert (store.copy_index, store.sequence, store.maps) == (0, 5, {"m": {b"k": b"v1"}})
    assert store.lineage not in ("L", "")
    streamed = [c.lineage for c in of_migrations(sent(effects, m.TransferChunk)) if c.partition_id == 0]
    assert set(streamed) <= {store.lineage}


def test_a_cache_map_emptied_under_its_sync_ends_that_sync_and_starts_another() -> None:
    """Found by an outside tester: an owner streaming a sync of a serve_when_unavailable map
    installed a snapshot, which empties such maps (clear_serving_maps) under the stream; the sync
    then sent empty pages forever, never its last, and the map's writes were answered MIGRATING
    for good. Now the sync ends and a new one starts, of what the partition holds after."""
    from shardgrid.core.config import MapConfig

    config = replace(
        CONFIG,
        maps=(("cache", MapConfig(1, serve_when_unavailable=True)),),
        max_chunk_entries=1,
        migration_window_chunks=1,
    )
    table = PartitionTable.from_lists([[B, C]] * 4, [1, 1, 1, 1])
    owner, now = following(B, table, config=config)
    now = grant_lease(owner, now)
    keys = [k for k in (key_in(0) + b"-%d" % i for i in range(200)) if partition_id_of_serialized(k, 4) == 0][:4]
    request = map_request(call_id=1, kind=m.PUT, map_name="cache", keys=tuple(keys), values=(b"v",) * 4)
    owner.handle(now + 1, Receive("c", None, None, request))
    owner.handle(now + 2, Receive(C.address, C, B.uuid, m.BackupAckBatch(((0, 4),))))
    (first,) = of_syncs(
        sent(owner.handle(now + 3, Receive(C.address, C, B.uuid, m.ReplicaSyncRequest(0, "", -1))), m.TransferChunk)
    )
    assert not first.last  # one record a chunk: the sync of the cache map is under way
    state = MetadataState(CONFIG.partition_count, (MemberRecord(A), MemberRecord(B), MemberRecord(C)), table)
    snapshot = InstallSnapshot(1, Snapshot(50, 1, Membership.of([A], [B, C]), state), now + 4)
    effects = owner.handle(now + 4, Receive(A.address, A, B.uuid, snapshot))
    (fresh,) = of_syncs(sent(effects, m.TransferChunk))
    assert fresh.transfer_id != first.transfer_id
    assert fresh.last  # the map is empty now: the new sync is one chunk
    late = owner.handle(now + 5, Receive(C.address, C, B.uuid, sync_ack(first.transfer_id, 0, True)))
    assert not of_syncs(sent(late, m.TransferChunk))  # the old sync is over
    write = map_request(call_id=2, kind=m.PUT, map_name="cache", keys=(keys[0],), values=(b"w",))
    assert all(
        codes(reply) != (m.ReplyCode.MIGRATING,)
        for reply in replies(owner.handle(now + 6, Receive("c", None, None, write)))
    )


def test_room_made_ahead_by_every_sync_together_stays_within_the_members_memory() -> None:
    """Senders' counts size a backup's tables ahead only as far as the member's memory takes the
    room of every transfer at once (found by an outside tester: each map asked alone)."""
    limit = 16 * 1024 * 1024
    backup, now = following(B, A_OWNS_B_BACKS, config=replace(CONFIG, max_memory_bytes=limit))
    claimed = 100_000  # records each sync says it sends: about 7 MB of room each

    def chunk(pid: int, sequence: int, keys: tuple[bytes, ...]) -> m.TransferChunk:
        return sync_chunk(
            sync_id=f"s-{pid}",
            partition_id=pid,
            sequence=sequence,
            map_name="m",
            records=page_of(keys, (b"v",) * len(keys)),
            last=sequence == 1,
            replica_sequence=1,
            lineage="L",
            base_sequence=-1,
            map_version=1,
            map_entries=claimed,
        )

    for pid in range(4):
        backup.handle(now, Receive(A.address, A, B.uuid, chunk(pid, 0, (key_in(pid),))))
    ahead = backup.data.room_ahead_bytes()
    assert ahead == 2 * (claimed - 1) * RESERVED_RECORD_BYTES  # two fit in 16 MB together; not three
    assert not backup.data.room_to_size(limit - ahead + 1)
    for pid in range(4):
        backup.handle(now, Receive(A.address, A, B.uuid, chunk(pid, 1, ())))
    assert backup.data.room_ahead_bytes() == 0  # whole: the room not filled was given back
    assert all(backup.data.view(pid).maps == {"m": {key_in(pid): b"v"}} for pid in range(4))
