"""The named fault scenarios: each places a fault at an exact step and checks nothing was lost.

Every scenario ends with ``Scenario.verdict()``: the cluster becomes safe, every acknowledged
write is still there (only its value or a later maybe-applied one), no read saw a value never
written, and every backup holds exactly its owner's data.
"""

from __future__ import annotations

import dataclasses

import pytest

from shardgrid.core import events
from shardgrid.core.effects import Receive, ReplyToClient
from shardgrid.core.messages import (
    NOT_OWNER,
    ClientReply,
    ClientRequest,
    MastershipClaimReply,
    MigrationChunk,
    MigrationCommit,
    MigrationCommitAck,
    MigrationDataDone,
    Operation,
    PartitionUpdate,
)
from shardgrid.sim.scenario import Scenario
from shardgrid.sim.vopr import SimParams

FAST = SimParams(members=5, ops=300, drop_rate=0.0, duplicate_rate=0.0)


def scenario(seed: int = 1, **overrides: object) -> Scenario:
    params = dataclasses.replace(FAST, **overrides)  # type: ignore[arg-type]
    return Scenario(seed, params)


def emitted(s: Scenario, kind: type) -> list[object]:
    return [e for _, _, e in s.sim.events if isinstance(e, kind)]


def test_the_owner_of_many_partitions_crashes_under_load() -> None:
    s = scenario(seed=2)
    s.start()
    s.load(400)
    s.run_for(1_500)
    s.sim.crash(s.address_of_owner_of_most())
    assert s.verdict() == []
    assert s.sim.ledger.counts()["acked"] > 200


def test_backup_count_members_crash_at_once_and_nothing_is_lost() -> None:
    s = scenario(seed=3, backups=2)
    addresses = s.start()
    s.load(300)
    s.run_for(1_000)
    for address in addresses[1:3]:
        s.sim.crash(address)
    assert s.verdict() == []
    assert emitted(s, events.PartitionLost) == []


def test_one_more_crash_than_backups_reports_exactly_the_partitions_lost() -> None:
    s = scenario(seed=4, backups=1)
    addresses = s.start()
    s.load(300)
    s.run_for(1_000)
    victims = addresses[2:4]
    table = s.master.table
    assert table is not None
    expected = {
        pid for pid, slots in enumerate(table.replicas) if {r.address for r in slots if r is not None} <= set(victims)
    }
    assert expected, "the seed should put some partition on exactly the two victims"
    crashed_ms = s.sim.now_ms
    for address in victims:
        s.sim.crash(address)
    problems = s.verdict()
    assert {e.partition_id for e in emitted(s, events.PartitionLost)} == expected
    assert problems == []  # every key outside the lost partitions kept its acknowledged value
    # A lost partition restarts empty: whatever it holds now was written after the crash.
    later = {w.value for writes in s.sim.ledger.writes.values() for w in writes if w.issued_ms > crashed_ms}
    for pid in expected:
        owner = s.master.table.owner(pid)
        data = s.sim.nodes[owner.address].member.stores.get(pid)
        values = {v for records in (data.maps.values() if data else ()) for v in records.values()}
        assert values <= later


def test_a_member_restarts_refills_and_crashes_again_inside_the_repair_window() -> None:
    """Hazelcast issue 5444: a restarted member crashing again while being refilled lost data."""
    s = scenario(seed=5)
    addresses = s.start(4)
    s.load(300)
    s.run_for(1_000)
    s.sim.crash(addresses[1])
    s.run_for(200)
    s.sim.restart(addresses[1])
    s.once_delivered(
        MigrationChunk,
        lambda address, _: s.sim.crash(address, drop_in_flight=True),
        where=lambda address, _: address == addresses[1],
    )
    assert s.verdict() == []


def test_the_migration_source_dies_mid_transfer() -> None:
    s = scenario(seed=6)
    s.start(4)
    s.load(300)
    s.run_for(500)
    master = s.master.identity.address
    fired = s.once_delivered(
        MigrationChunk,
        lambda _, message: s.sim.crash(_owner_address(s, message), drop_in_flight=True),
        where=lambda _, message: _owner_address(s, message) != master,
    )
    s.sim.start_member()  # a join starts migrations
    s.run_until(lambda: bool(fired))
    assert s.verdict() == []
    assert s.sim.stats.migrations_failed >= 1  # the master rolled the interrupted transfer back


def _owner_address(s: Scenario, chunk: MigrationChunk) -> str:
    table = s.master.table
    assert table is not None
    owner = table.owner(chunk.record.partition_id)
    assert owner is not None
    return owner.address


def _destination_crashes_during_a_join(seed: int, after: type) -> Scenario:
    """A member joins under load; the first member to handle ``after`` crashes at once, and what
    it was about to send dies with it."""
    s = scenario(seed=seed)
    s.start(4)
    s.load(300)
    s.run_for(500)
    fired = s.once_delivered(after, lambda address, _: s.sim.crash(address, drop_in_flight=True))
    s.sim.start_member()
    s.run_until(lambda: bool(fired))
    return s


def test_the_migration_destination_dies_mid_transfer() -> None:
    assert _destination_crashes_during_a_join(7, MigrationChunk).verdict() == []


def test_the_destination_dies_after_applying_the_commit_before_its_ack_arrives() -> None:
    assert _destination_crashes_during_a_join(8, MigrationCommit).verdict() == []


def test_the_source_dies_after_the_commit_before_it_cleaned_up() -> None:
    s = scenario(seed=9)
    s.start(4)
    s.load(300)
    s.run_for(500)
    sources: list[str] = []

    def crash_source(_: str, ack: MigrationCommitAck) -> None:
        record = s.master.completed.get(ack.migration_id)
        if record is not None and record.migration.source is not None:
            sources.append(record.migration.source.address)
            s.sim.crash(record.migration.source.address, drop_in_flight=True)

    fired = s.once_delivered(
        MigrationCommitAck,
        crash_source,
        where=lambda address, ack: _has_source(s, ack) and address != _source_of(s, ack),
    )
    s.sim.start_member()
    s.run_until(lambda: bool(fired))
    assert sources, "a migration with a source committed"
    assert s.verdict() == []


def _has_source(s: Scenario, ack: MigrationCommitAck) -> bool:
    record = s.master.completed.get(ack.migration_id) if s.sim.master() else None
    return record is not None and record.migration.source is not None


def _source_of(s: Scenario, ack: MigrationCommitAck) -> str:
    record = s.master.completed[ack.migration_id]
    assert record.migration.source is not None
    return record.migration.source.address


def test_the_master_dies_right_after_publishing_to_only_some_members() -> None:
    s = scenario(seed=10)
    addresses = s.start(5)
    s.load(300)
    s.run_for(500)
    master = s.master.identity.address
    keep = tuple(a for a in addresses if a != master)[:1]
    fired = s.once_delivered(
        MigrationCommitAck,
        lambda address, _: s.sim.crash(address, drop_in_flight=True, keep_to=keep),
        where=lambda address, _: address == master,
    )
    s.sim.start_member()
    s.run_until(lambda: bool(fired))
    assert s.verdict() == []
    assert any(e.master.address != master for e in emitted(s, events.MasterChanged))


@pytest.mark.parametrize(("seed", "deliver_commit"), [(11, True), (12, False)], ids=["commit-sent", "commit-lost"])
def test_the_master_dies_during_a_migration_commit(seed: int, deliver_commit: bool) -> None:
    s = scenario(seed=seed)
    s.start(5)
    s.load(300)
    s.run_for(500)
    master = s.master.identity.address
    fired = s.once_delivered(
        MigrationDataDone,
        lambda address, _: s.sim.crash(address, drop_in_flight=not deliver_commit),
        where=lambda address, _: address == master,
    )
    s.sim.start_member()
    s.run_until(lambda: bool(fired))
    assert s.verdict() == []


def test_the_master_dies_together_with_another_member() -> None:
    s = scenario(seed=13, backups=2)
    s.start(5)
    s.load(300)
    s.run_for(1_000)
    master = s.master.identity.address
    other = next(a for a in sorted(s.sim.nodes) if a != master)
    s.sim.crash(master)
    s.sim.crash(other)
    assert s.verdict() == []


def test_commits_and_acks_dropped_duplicated_and_delayed_are_applied_once() -> None:
    s = scenario(seed=14, duplicate_rate=0.2)
    s.start(4)
    s.load(300)
    dropped = {"n": 0}

    def drop_some(_: str, __: str, message: object) -> bool:
        if isinstance(message, (MigrationCommit, MigrationCommitAck, PartitionUpdate)) and dropped["n"] < 12:
            dropped["n"] += 1
            return dropped["n"] % 2 == 1
        return False

    s.sim.drop_rules.append(drop_some)
    s.sim.start_member()
    s.sim.start_member()
    assert s.verdict() == []
    assert dropped["n"] == 12


def test_a_request_reaching_the_old_owner_after_the_commit_is_redirected() -> None:
    s = scenario(seed=15)
    s.start(3)
    before = s.master.table
    assert before is not None
    s.sim.start_member()
    s.wait_safe()
    after = s.master.table
    assert after is not None
    moved = next(pid for pid in range(after.partition_count) if before.owner(pid) != after.owner(pid))
    old_owner = s.member_at(before.owner(moved).address)
    request = ClientRequest(1, ((moved, Operation("put", "m", b"k", b"v")),))
    effects = old_owner.handle(s.sim.now_ms, Receive("client-x", None, None, request))
    replies = [e.message for e in effects if isinstance(e, ReplyToClient)]
    assert replies == [ClientReply(1, replies[0].results)]
    assert replies[0].results[0].status == NOT_OWNER
    assert replies[0].results[0].owner_address == after.owner(moved).address


def test_a_member_paused_past_the_failure_timeout_is_removed_and_fenced() -> None:
    s = scenario(seed=16)
    addresses = s.start(4)
    s.load(400)
    s.run_for(800)
    victim = addresses[2]
    s.sim.pause(victim)
    s.run_for(s.params.member_config().failure_timeout_ms + 3_000)
    s.sim.resume(victim)
    assert s.verdict() == []
    rejoined = [e for e in emitted(s, events.RemovedFromCluster) if e.old_identity.address == victim]
    assert rejoined, "the paused member learned it was removed and joined again as a new member"


def test_several_joins_at_once_and_joins_while_migrations_run() -> None:
    s = scenario(seed=17)
    s.start(2)
    s.load(400)
    for _ in range(3):
        s.sim.start_member()
    s.run_for(300)
    s.sim.start_member()  # while the first joins still migrate
    assert s.verdict() == []
    assert len(s.master.members) == 6


def test_scale_one_to_seven_to_one() -> None:
    s = scenario(seed=18)
    s.start(1)
    s.load(600)
    for _ in range(6):
        s.sim.start_member()
        s.wait_safe()
    assert len(s.master.members) == 7
    while len(s.master.members) > 1:
        victim = next(m.address for m in s.master.member_replicas() if m != s.master.identity)
        s.sim.crash(victim)
        s.wait_safe()
    assert s.verdict() == []


def test_a_master_cut_off_alone_removes_nobody_when_the_split_heals() -> None:
    """The majority's election stalls (its claim replies are lost); when the split heals, the old
    master hears a majority again but must not remove members whose first heartbeat is still on
    the way: one fault must not turn into several removals."""
    s = scenario(seed=4, partitions=31)
    addresses = s.start(5)
    s.load(200)
    s.run_for(1_500)
    master = s.master.identity.address
    s.sim.drop_rules.append(lambda _src, _dst, message: isinstance(message, MastershipClaimReply))
    s.sim.split([[master], [a for a in addresses if a != master]])
    s.run_for(7_000)
    s.sim.heal()
    s.run_for(3_000)
    removed_by_old_master = [e for t, a, e in s.sim.events if isinstance(e, events.MemberRemoved) and a == master]
    assert removed_by_old_master == []
    assert s.sim.stats.partitions_lost == set()
    s.sim.drop_rules.clear()
    assert s.verdict() == []
