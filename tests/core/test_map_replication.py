"""Seed 001's per-map replication: sync and async backups, reads from backups, maps kept per slot."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shardgrid.core import messages as m
from shardgrid.core.config import MapConfig, MemberConfig
from shardgrid.core.effects import Send
from shardgrid.core.errors import ConfigError
from shardgrid.core.inputs import Receive
from shardgrid.core.store import PartitionData
from shardgrid.core.table import PartitionTable
from tests.core.test_member import CONFIG, A, B, C, following, grant_lease, key_in, replies, run_ticks, sent, synced
from tests.wire import codes, map_request, of_syncs, run_keys, sync_ack, values, write_run

# B owns every partition; A is the first backup, C the second.
B_A_C = PartitionTable.from_lists([[B, A, C]] * 4, [1, 1, 1, 1])
MAPS = replace(
    CONFIG,
    maps=(
        ("wide", MapConfig(backup_count=1, async_backup_count=1, read_backup_data=True)),
        ("two", MapConfig(backup_count=2)),
        ("none", MapConfig(backup_count=0)),
    ),
)


def put(call_id: int, map_name: str, pid: int = 0, value: bytes = b"v") -> m.MapRequest:
    return map_request(call_id=call_id, kind=m.PUT, map_name=map_name, keys=(key_in(pid),), values=(value,))


def batches_to(effects: list, target: object) -> list[m.BackupBatch]:
    return [
        e.message
        for e in effects
        if isinstance(e, Send) and e.target == target and isinstance(e.message, m.BackupBatch)
    ]


@pytest.mark.parametrize(
    ("maps", "problem"),
    [
        ((("a", MapConfig(backup_count=4, async_backup_count=3)),), "at most 6"),
        ((("a", MapConfig()), ("a", MapConfig(2))), "configured twice"),
        ((("", MapConfig()),), "1 to 256"),
        ((("a", MapConfig(backup_count=-1)),), "out of range"),
    ],
)
def test_a_map_configuration_out_of_bounds_is_refused_by_name(maps: tuple, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        MemberConfig(maps=maps).validate()


def test_the_table_has_as_many_backup_slots_as_the_widest_map() -> None:
    assert MAPS.table_backup_count == 2
    assert MemberConfig(backup_count=0).table_backup_count == 0
    assert MAPS.keeps_copy("m", 1)
    assert not MAPS.keeps_copy("m", 2)
    assert MAPS.keeps_copy("wide", 2)
    assert MAPS.keeps_copy("none", 0)
    assert not MAPS.keeps_copy("none", 1)


def test_the_owner_waits_for_sync_backups_only_and_tells_the_others_the_sequence_without_the_data() -> None:
    owner, now = following(B, B_A_C, config=MAPS)
    now = grant_lease(owner, now)
    # The default map: one sync backup (A). C, the second slot, gets the sequence only.
    effects = owner.handle(now + 1, Receive("c", None, None, put(1, "m")))
    assert replies(effects) == []
    (to_a,) = batches_to(effects, A)
    (to_c,) = batches_to(effects, C)
    assert run_keys(to_a.runs[0]) == (key_in(0),)
    assert (run_keys(to_c.runs[0]), to_c.runs[0].skipped, to_c.runs[0].first_sequence) == ((), 1, 1)
    (reply,) = replies(owner.handle(now + 2, Receive(A.address, A, B.uuid, m.BackupAckBatch(((0, 1),)))))
    assert codes(reply) == (m.ReplyCode.OK,)

    # "wide": A is sync, C async: both get the data, the answer waits for A alone.
    effects = owner.handle(now + 3, Receive("c", None, None, put(2, "wide")))
    assert run_keys(batches_to(effects, C)[0].runs[0]) == (key_in(0),)
    (reply,) = replies(owner.handle(now + 4, Receive(A.address, A, B.uuid, m.BackupAckBatch(((0, 2),)))))
    assert codes(reply) == (m.ReplyCode.OK,)

    # "two": both are sync; one ack is not enough.
    owner.handle(now + 5, Receive("c", None, None, put(3, "two")))
    assert replies(owner.handle(now + 6, Receive(A.address, A, B.uuid, m.BackupAckBatch(((0, 3),))))) == []
    (reply,) = replies(owner.handle(now + 7, Receive(C.address, C, B.uuid, m.BackupAckBatch(((0, 3),)))))
    assert codes(reply) == (m.ReplyCode.OK,)

    # "none": no backup is waited on, every backup still follows the sequence.
    effects = owner.handle(now + 8, Receive("c", None, None, put(4, "none")))
    assert codes(replies(effects)[0]) == (m.ReplyCode.OK,)
    assert [b.runs[0].skipped for b in (*batches_to(effects, A), *batches_to(effects, C))] == [1, 1]


def test_a_write_resent_to_a_lagging_backup_still_leaves_out_the_maps_it_keeps_no_copy_of() -> None:
    owner, now = following(B, B_A_C, config=MAPS)
    now = grant_lease(owner, now)
    owner.handle(now + 1, Receive("c", None, None, put(1, "m")))
    owner.handle(now + 2, Receive("c", None, None, put(2, "two", pid=0, value=b"w")))
    effects, _ = run_ticks(owner, now + 2, now + 2 + MAPS.retry_interval_ms + 200)
    runs = [run for batch in batches_to(effects, C) for run in batch.runs]
    assert [(run.map_name, run.skipped, len(run_keys(run))) for run in runs] == [("m", 1, 0), ("two", 0, 1)]


def test_a_backup_follows_the_sequence_of_a_map_it_keeps_no_copy_of_and_never_creates_it() -> None:
    backup, now = following(C, B_A_C, config=MAPS)
    synced(backup, 0, now, owner=B)
    skip = write_run(
        partition_id=0, lineage="", first_sequence=1, kind=m.PUT, map_name="m", keys=(), values=(), skipped=3
    )
    data = write_run(
        partition_id=0, lineage="", first_sequence=4, kind=m.PUT, map_name="two", keys=(b"k",), values=(b"v",)
    )
    acks = sent(backup.handle(now + 1, Receive(B.address, B, C.uuid, m.BackupBatch((data, skip)))), m.BackupAckBatch)
    assert acks == [m.BackupAckBatch(((0, 4),))]
    assert backup.data.view(0).maps == {"two": {b"k": b"v"}}


@pytest.mark.parametrize(
    "run",
    [
        write_run(
            partition_id=0,
            lineage="",
            first_sequence=1,
            kind=m.PUT,
            map_name="m",
            keys=(b"k",),
            values=(b"v",),
            skipped=1,
        ),  # data and a skip at once
        write_run(
            partition_id=0, lineage="", first_sequence=1, kind=m.PUT, map_name="m", keys=(), values=(b"v",), skipped=1
        ),
        write_run(
            partition_id=0, lineage="", first_sequence=1, kind=m.GET, map_name="m", keys=(), values=(), skipped=1
        ),
    ],
)
def test_a_malformed_skip_changes_nothing(run: m.WriteRun) -> None:
    backup, now = following(C, B_A_C, config=MAPS)
    synced(backup, 0, now, owner=B)
    assert sent(backup.handle(now + 1, Receive(B.address, B, C.uuid, m.BackupBatch((run,)))), m.BackupAckBatch) == []
    assert backup.data.sequence_of(0) == 0


def test_a_backup_answers_reads_only_of_maps_that_allow_it_and_that_it_keeps() -> None:
    backup, now = following(C, B_A_C, config=MAPS)
    now = grant_lease(backup, now)
    synced(backup, 0, now, owner=B, maps={"wide": {key_in(0): b"w"}, "two": {key_in(0): b"t"}, "m": {key_in(0): b"m"}})
    assert "m" not in backup.data.view(0).maps  # a sync to slot 2 leaves out what slot 2 does not keep

    def get(map_name: str) -> m.MapReply:
        request = map_request(call_id=9, kind=m.GET, map_name=map_name, keys=(key_in(0),))
        (reply,) = replies(backup.handle(now + 1, Receive("c", None, None, request)))
        return reply

    assert (codes(get("wide")), values(get("wide"))) == ((m.ReplyCode.OK,), (b"w",))
    assert codes(get("two")) == (m.ReplyCode.WRONG_OWNER,)  # kept here, but not readable from a backup
    assert codes(get("m")) == (m.ReplyCode.WRONG_OWNER,)


def test_a_copy_installed_at_a_colder_slot_drops_the_maps_that_slot_does_not_keep() -> None:
    backup, _ = following(C, B_A_C, config=MAPS)
    backup.data.install(0, PartitionData.holding({"m": {b"k": b"1"}, "wide": {b"k": b"2"}, "two": {b"k": b"3"}}), 2)
    assert set(backup.data.view(0).maps) == {"wide", "two"}
    # The same sequence again for a hotter slot (a shift up): the staged copy is whole, it is taken.
    backup.data.install(0, PartitionData.holding({"m": {b"k": b"1"}, "wide": {b"k": b"2"}, "two": {b"k": b"3"}}), 1)
    assert set(backup.data.view(0).maps) == {"m", "wide", "two"}


def test_a_lost_batch_to_an_async_backup_is_resent_and_does_not_stall_the_next_sync_write() -> None:
    """Found by an outside tester: the run of an async-only write was never kept for resending, so
    a backup that missed it held every later run behind the gap, and the next write of a sync map
    came back INDETERMINATE after the ack timeout."""
    config = replace(CONFIG, maps=(("async-only", MapConfig(backup_count=0, async_backup_count=1)),))
    owner, now = following(B, PartitionTable.from_lists([[B, A]] * 4, [1, 1, 1, 1]), config=config)
    now = grant_lease(owner, now)
    effects = owner.handle(now + 1, Receive("c", None, None, put(1, "async-only")))
    assert codes(replies(effects)[0]) == (m.ReplyCode.OK,)  # nobody waited on
    # Its batch to A is lost; the next write, to the default map, waits for A.
    effects = owner.handle(now + 2, Receive("c", None, None, put(2, "m", value=b"w")))
    assert replies(effects) == []
    effects, now = run_ticks(owner, now + 2, now + 2 + config.retry_interval_ms + 200)
    resent = [run.first_sequence for batch in batches_to(effects, A) for run in batch.runs]
    assert resent[:2] == [1, 2]  # the lost run again, then the waiting one
    (reply,) = replies(owner.handle(now + 1, Receive(A.address, A, B.uuid, m.BackupAckBatch(((0, 2),)))))
    assert codes(reply) == (m.ReplyCode.OK,)
    assert owner.data.settled(0)  # A holds everything: nothing is kept for it any more


def test_a_backup_whose_owner_moved_it_to_a_hotter_slot_first_takes_that_maps_writes_only_with_its_copy() -> None:
    """Found by review: the owner applied a shift up (C from slot 2 to slot 1) before C did; C took
    a write of a map slot 2 does not keep into a copy the migration's outcome then replaced, after
    acknowledging it: the only sync backup of an acknowledged write no longer had it."""
    maps = replace(CONFIG, maps=(("wide", MapConfig(backup_count=1, async_backup_count=1)),))
    old = PartitionTable.from_lists([[B, A, C]] * 4, [1, 1, 1, 1])
    new = PartitionTable.from_lists([[B, C, A]] * 4, [2, 2, 2, 2])
    owner, now = following(B, new, config=maps)
    now = grant_lease(owner, now)
    effects = owner.handle(now + 1, Receive("c", None, None, put(1, "m", value=b"new")))
    (to_c,) = batches_to(effects, C)
    backup, then = following(C, old, config=maps)  # it has not applied the outcome yet
    synced(backup, 0, then, owner=B, maps={"m": {b"old": b"1"}, "wide": {b"w": b"2"}})
    acks = sent(backup.handle(then + 1, Receive(B.address, B, C.uuid, to_c)), m.BackupAckBatch)
    assert all(sequence == 0 for batch in acks for _, sequence in batch.acks)  # not taken, not acknowledged
    assert replies(owner.handle(now + 2, Receive(C.address, C, B.uuid, m.BackupAckBatch(((0, 0),))))) == []
    # The outcome: the staged copy, whole for slot 1; then the owner's resend is taken.
    backup.data.install(0, PartitionData.holding({"m": {b"old": b"1"}, "wide": {b"w": b"2"}}), 1)
    assert backup.data.view(0).maps["m"] == {b"old": b"1"}


def test_a_held_copy_newer_than_the_staged_one_keeps_its_writes_and_takes_the_maps_it_lacked() -> None:
    backup, _ = following(C, B_A_C, config=MAPS)
    held = PartitionData.holding({"wide": {b"k": b"newer"}, "two": {b"k": b"t"}}, sequence=5)
    backup.data.install(0, held, 2)
    backup.data.install(0, PartitionData.holding({"m": {b"k": b"1"}, "wide": {b"k": b"older"}}, sequence=4), 1)
    store = backup.data.view(0)
    assert store.maps == {"wide": {b"k": b"newer"}, "two": {b"k": b"t"}, "m": {b"k": b"1"}}
    assert (store.sequence, store.copy_index) == (5, 1)


def test_a_backup_that_never_acknowledges_what_nobody_waits_for_gets_a_sync() -> None:
    """Found by review: an async backup without a store skipped every run without acknowledging;
    the partition never settled, so its migrations never started."""
    config = replace(CONFIG, maps=(("async-only", MapConfig(backup_count=0, async_backup_count=1)),))
    owner, now = following(B, PartitionTable.from_lists([[B, A]] * 4, [1, 1, 1, 1]), config=config)
    now = grant_lease(owner, now)
    owner.handle(now + 1, Receive("c", None, None, put(1, "async-only")))
    assert not owner.data.settled(0)
    effects, now = run_ticks(owner, now + 1, now + 1 + config.backup_ack_timeout_ms + 200)
    (chunk,) = of_syncs(sent(effects, m.TransferChunk))
    assert chunk.partition_id == 0
    ack = sync_ack(chunk.transfer_id, 0, True, complete=True)
    owner.handle(now + 1, Receive(A.address, A, B.uuid, ack))
    assert owner.data.settled(0)


def test_the_settings_digest_covers_what_decides_the_copies_and_nothing_else() -> None:
    base = MemberConfig()
    assert MemberConfig(maps=(("a", MapConfig()),)).settings_digest == base.settings_digest  # the default's counts
    assert MemberConfig(read_backup_data=True).settings_digest == base.settings_digest  # each member's own business
    assert MemberConfig(backup_count=True).settings_digest == MemberConfig(backup_count=1).settings_digest
    assert MemberConfig(maps=(("a", MapConfig(2)),)).settings_digest != base.settings_digest
    assert MemberConfig(partition_count=7).settings_digest != base.settings_digest
    two = (("a", MapConfig(2)), ("b", MapConfig(0, 1)))
    assert MemberConfig(maps=two).settings_digest == MemberConfig(maps=two[::-1]).settings_digest


def test_a_map_with_a_max_idle_is_read_from_its_owner_even_with_read_backup_data() -> None:
    """Found by an outside tester: a backup, which sees no reads, answered entries the owner's
    reads kept alive as idle (absent)."""
    idle = replace(
        MAPS,
        maps=(
            *MAPS.maps,
            ("idle", MapConfig(backup_count=1, async_backup_count=1, read_backup_data=True, max_idle_seconds=1)),
        ),
    )
    backup, now = following(C, B_A_C, config=idle)
    now = grant_lease(backup, now)
    synced(backup, 0, now, owner=B, maps={"idle": {key_in(0): b"i"}})
    request = map_request(call_id=9, kind=m.GET, map_name="idle", keys=(key_in(0),))
    (reply,) = replies(backup.handle(now + 1, Receive("c", None, None, request)))
    assert codes(reply) == (m.ReplyCode.WRONG_OWNER,)
