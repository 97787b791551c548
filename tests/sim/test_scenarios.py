"""The named fault scenarios. Each is a schedule file in ``scenarios/`` (so anyone can replay it with
``shardgrid sim --schedule``); the test runs it, requires the full verdict (safe at the end, no
acknowledged write lost, no stale read, replicas equal to their owners, one writer per partition
at every acknowledgement, Raft's safety after every step), then checks what is particular to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shardgrid.core import events
from shardgrid.core import messages as m
from shardgrid.core.effects import ReplyToClient
from shardgrid.core.hashing import partition_id_of_serialized
from shardgrid.core.inputs import Receive
from shardgrid.core.limits import MAX_REPLICA_COUNT
from shardgrid.core.member.lifecycle import Lifecycle
from shardgrid.core.metadata import ClusterState
from shardgrid.sim.schedule import load_schedule, parse_schedule
from shardgrid.sim.vopr import Run, SimResult, params_of
from shardgrid.sim.workload import ACKED, ASYNC_MAP_NAME, FAILED, MAYBE
from tests.wire import codes, map_request

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def run_scenario(name: str, prepare: Any = None) -> tuple[Run, SimResult]:
    schedule = load_schedule(SCENARIOS / f"{name}.toml")
    seed, params = params_of(schedule)
    run = Run(seed, params, schedule)
    if prepare is not None:
        prepare(run)
    return run, run.run()


def passed(name: str, prepare: Any = None) -> Run:
    run, result = run_scenario(name, prepare)
    assert result.passed, f"{name}: {result.problems[:5]}; steps {result.faults_injected}"
    return run


def emitted(run: Run, kind: type, at: str | None = None) -> list[tuple[int, str, Any]]:
    return [(t, a, e) for t, a, e in run.sim.events if isinstance(e, kind) and (at is None or a == at)]


def step_time(run: Run, number: int) -> int:
    line = next(f for f in run.faults if f"step {number}:" in f)
    return int(line.split(":", 1)[0])


def remembering_the_table_at_step_1(before: dict[str, Any]) -> Any:
    """A scenario preparation that keeps, in ``before``, the table, the third and fourth members
    started (the victims of the crash steps) and the time, just before step 1."""

    def remember_table(run: Run) -> None:
        original = run.faults_log

        def log(line: str) -> None:
            if "step 1:" in line:
                leader = run.sim.leader()
                assert leader is not None
                before["table"] = leader.consensus.state.table
                before["victims"] = {run.sim.started_addresses[2], run.sim.started_addresses[3]}
                before["ms"] = run.sim.now_ms
            original(line)

        assert run.runner is not None
        run.runner.on_step = log

    return remember_table


def test_every_scenario_file_is_a_valid_schedule() -> None:
    files = sorted(SCENARIOS.glob("*.toml"))
    assert len(files) >= 25
    for path in files:
        schedule = load_schedule(path)
        assert schedule.steps, path.name


# --- the scenarios carried over, now on the log -------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "owner-crashes-under-load",
        "backups-crash-at-once",
        "restart-refill-crash-again",
        "destination-dies-mid-transfer",
        "destination-dies-after-commit",
        "source-dies-after-commit",
        "leader-dies-with-outcome-on-one-follower",
        "leader-dies-during-commit-sent",
        "leader-dies-during-commit-lost",
        "leader-and-another-die",
        "commits-dropped-and-duplicated",
        "joins-at-once",
    ],
)
def test_fault_during_migrations_loses_nothing(name: str) -> None:
    run = passed(name)
    assert run.sim.ledger.counts()["acked"] > 100
    assert run.runner is not None
    assert run.runner.done, run.runner.waiting_for()


def test_one_crash_more_than_the_backups_reports_exactly_the_partitions_lost() -> None:
    before: dict[str, Any] = {}
    remember_table = remembering_the_table_at_step_1(before)
    run = passed("one-crash-too-many", remember_table)
    table, victims = before["table"], before["victims"]
    expected = {
        pid for pid, slots in enumerate(table.replicas) if {r.address for r in slots if r is not None} <= victims
    }
    assert expected, "the seed should put some partition on exactly the two victims"
    assert {e.partition_id for _, _, e in emitted(run, events.PartitionLost)} == expected
    # A lost partition restarts empty: whatever it holds now was written after the crash.
    later = {w.value for writes in run.sim.ledger.writes.values() for w in writes if w.issued_ms > before["ms"]}
    leader = run.sim.leader()
    assert leader is not None
    state = leader.consensus.state
    for pid in expected:
        owner = state.table.owner(pid)
        data = run.sim.nodes[owner.address].member.data.view(pid)
        values = {v for records in (data.maps.values() if data else ()) for v in records.values()}
        assert values <= later


def test_the_migration_source_dies_mid_transfer() -> None:
    run = passed("source-dies-mid-transfer")
    assert run.sim.stats.migrations_failed >= 1  # the interrupted transfer was rolled back


def test_a_request_reaching_the_old_owner_after_the_commit_is_redirected() -> None:
    run, result = run_scenario("joins-at-once")
    assert result.passed
    leader = run.sim.leader()
    assert leader is not None
    table = leader.consensus.state.table
    nodes = run.sim.nodes
    # A finished move whose source still runs and no longer owns the partition (a partition can
    # move back to its old owner later: the first move is not always such a one).
    moved = next(
        (
            e
            for _, _, e in emitted(run, events.MigrationEvent)
            if e.phase == "finished"
            and e.kind == "move"
            and e.source.address in nodes
            and nodes[e.source.address].member.joined
            and nodes[e.source.address].member.identity == e.source
            and table.owner(e.partition_id) != e.source
        ),
        None,
    )
    if moved is None:
        pytest.skip("no old owner of a move is still running")
    old_owner = nodes[moved.source.address].member
    pid = moved.partition_id
    count = run.sim.config.partition_count
    key = next(k for k in (f"k{i}".encode() for i in range(100_000)) if partition_id_of_serialized(k, count) == pid)
    request = map_request(call_id=1, kind=m.PUT, map_name="m", keys=(key,), values=(b"v",))
    effects = old_owner.handle(run.sim.now_ms, Receive("client-x", None, None, request))
    (reply,) = [e.message for e in effects if isinstance(e, ReplyToClient)]
    assert codes(reply) == (m.ReplyCode.WRONG_OWNER,)
    assert [r.owner_address for r in reply.redirects] == [table.owner(pid).address]


def test_a_member_paused_past_the_failure_timeout_is_removed_and_joins_again() -> None:
    run = passed("paused-member-removed")
    victim = run.sim.started_addresses[2]
    assert [e for _, _, e in emitted(run, events.RemovedFromCluster) if e.old_identity.address == victim]


def test_members_that_list_only_the_others_form_a_cluster() -> None:
    """Each founder's join list names only the two others (fails without a founding order every
    process computes alike: each judged another one first and none proposed)."""
    run = passed("members-that-list-only-the-others-form-a-cluster")
    assert run.sim.ledger.counts()["acked"] > 100


def test_a_write_held_past_its_deadline_is_not_applied() -> None:
    """A client cut off with one member: its requests, held by the network, arrive up to 30 s
    after the heal and are refused (EXPIRED); without deadlines one overwrote a newer write."""
    run = passed("a-write-held-past-its-deadline-is-not-applied")
    assert run.sim.ledger.counts()["acked"] > 300


def test_a_retried_write_is_not_applied_twice() -> None:
    """At-least-once clients whose attempts are held and delivered after their retries and newer
    writes: the partition recognises each repeat (without write ids a stale value was read)."""
    run = passed("a-retried-write-is-not-applied-twice")
    assert run.sim.ledger.counts()["acked"] > 1000


def test_a_split_off_pair_keeps_its_partitions() -> None:
    """Two members of five cut off six times, one backup: the partitions they both held are
    unavailable while they are away and served whole after (with partition_lost_timeout_ms 0,
    as before, seven were reported lost and served empty)."""
    run = passed("a-split-off-pair-keeps-its-partitions")
    unavailable = {pid for _, _, e in emitted(run, events.PartitionsUnavailable) for pid in e.partition_ids}
    available = {pid for _, _, e in emitted(run, events.PartitionsAvailable) for pid in e.partition_ids}
    assert unavailable
    assert unavailable == available
    assert not emitted(run, events.PartitionLost)


def test_scale_one_to_seven_to_one() -> None:
    run = passed("scale-one-to-seven-to-one")
    joined = {e.member.address for _, _, e in emitted(run, events.MemberAdded)}
    assert len(joined) == 6  # six joined the one that formed the cluster alone
    assert len(run.sim.started_addresses) == 7
    assert len(run.sim.member_addresses()) == 1


def test_a_leader_cut_off_alone_steps_down_and_nothing_is_lost() -> None:
    run = passed("leader-cut-off-alone")
    assert run.sim.stats.partitions_lost == set()
    terms = {e.term for _, _, e in emitted(run, events.LeaderChanged)}
    assert len(terms) >= 2  # the majority elected a new leader


# --- the failures this issue set out to close ----------------------------------------------------------


def test_a_seed_member_restarted_cut_off_forms_no_second_cluster() -> None:
    acknowledged_by_isolated: list[int] = []

    def watch(run: Run) -> None:
        def check(sim: Any, address: str, client: str, reply: Any) -> None:
            there = address == sim.started_addresses[0] and sim.network.groups
            if there and isinstance(reply, m.MapReply) and m.ReplyCode.OK in codes(reply):
                acknowledged_by_isolated.append(sim.now_ms)

        run.sim.reply_checks.append(check)

    run = passed("seed-member-restarts-cut-off", watch)
    first = run.sim.started_addresses[0]
    restarted_at, healed_at = step_time(run, 2), step_time(run, 3)
    leaders_there = [t for t, a, e in emitted(run, events.LeaderChanged, at=first) if restarted_at <= t < healed_at]
    assert leaders_there == [], "the restarted process found no leader while cut off"
    assert acknowledged_by_isolated == []
    assert run.sim.nodes[first].member.joined  # it joined the cluster once the network healed


def test_a_cut_off_minority_commits_nothing_and_stops_acknowledging() -> None:
    late_acks: list[tuple[int, str]] = []

    def watch(run: Run) -> None:
        config = run.sim.config

        def check(sim: Any, address: str, client: str, reply: Any) -> None:
            groups = sim.network.groups
            if not groups or not isinstance(reply, m.MapReply) or groups.get(address) != 0:
                return  # side 0 of the split is the minority: the old leader and the new member
            split_at = step_time(run, 2)
            if sim.now_ms > split_at + config.lease_ms + config.clock_drift_margin_ms:
                calls = sim.clients[client].call
                if calls is not None and calls.write is not None and codes(reply) == (m.ReplyCode.OK,):
                    late_acks.append((sim.now_ms, address))

        run.sim.reply_checks.append(check)

    run = passed("minority-leader-with-new-member", watch)
    split_at = step_time(run, 2)
    old_leader = next(
        a for t, a, e in reversed(emitted(run, events.LeaderChanged)) if t <= split_at and e.leader.address == a
    )
    # Entries the majority acknowledged before the split may still commit as those answers land.
    in_flight_ms = 20
    finished_late = [
        t
        for t, _, e in emitted(run, events.MigrationEvent, at=old_leader)
        if t > split_at + in_flight_ms and e.phase == "finished"
    ]
    assert finished_late == []
    assert late_acks == []
    assert any(e.term > 1 for _, _, e in emitted(run, events.LeaderChanged))  # the majority moved on


def test_a_removed_member_serves_no_stale_reads() -> None:
    served_late: list[int] = []

    def watch(run: Run) -> None:
        config = run.sim.config

        def check(sim: Any, address: str, client: str, reply: Any) -> None:
            if not sim.network.groups or not isinstance(reply, m.MapReply):
                return
            cut_off = next((a for a, side in sim.network.groups.items() if side == 1), None)
            split_at = step_time(run, 1) if run.faults else sim.now_ms
            late = sim.now_ms > split_at + config.lease_ms + config.clock_drift_margin_ms
            if address == cut_off and late and m.ReplyCode.OK in codes(reply):
                served_late.append(sim.now_ms)

        run.sim.reply_checks.append(check)

    run = passed("removed-member-serves-no-stale-reads")
    assert run.sim.ledger.reads_checked > 100
    assert served_late == []


def test_members_that_missed_the_log_still_elect_a_leader_after_the_leader_crashes() -> None:
    run = passed("lagging-members-elect-after-leader-crash")
    crashed_at = step_time(run, 3)
    elected = [t for t, _, e in emitted(run, events.LeaderChanged) if t > crashed_at]
    assert elected
    assert min(elected) - crashed_at < 5_000


def test_a_removed_member_rejoins_through_the_members_it_last_knew() -> None:
    run = passed("removed-member-rejoins-without-its-seeds")
    joiner = run.sim.started_addresses[5]
    assert [e for _, _, e in emitted(run, events.RemovedFromCluster) if e.old_identity.address == joiner]
    assert run.sim.nodes[joiner].member.joined


# --- graceful shutdown, cluster states, promotion --------------------------------------------------------


def test_graceful_shutdowns_down_to_one_member_lose_nothing_without_backups() -> None:
    run = passed("graceful-shutdown-to-one")
    assert len(run.sim.member_addresses()) == 1
    assert run.sim.stats.stops == 3
    assert run.sim.stats.partitions_lost == set()
    assert all(reply.result == m.ADMIN_OK for reply in run.sim.admin_replies.values() if reply.call_id <= 3)


def test_the_cluster_shuts_down_passive_first() -> None:
    run = passed("cluster-shutdown")
    assert run.sim.member_addresses() == []
    states = [e.state for _, _, e in emitted(run, events.ClusterStateChanged)]
    assert ClusterState.PASSIVE in states
    assert run.sim.admin_replies[1].result == m.ADMIN_OK
    assert all(n.member.lifecycle is Lifecycle.STOPPED for n in run.sim.nodes.values())


def test_a_member_signalled_during_a_cluster_shutdown_is_told_it_stops_with_the_others() -> None:
    """Found by an outside tester: a member given SIGTERM during shutdown --cluster logged that it
    could not leave now and advised 'rebalance resume', which would undo the shutdown."""
    schedule = parse_schedule(
        {
            "run": {"seed": 27, "members": 3, "ops": 100, "drop_rate": 0.0, "duplicate_rate": 0.0},
            "step": [
                {"action": "shutdown-cluster", "after_ms": 3000, "target": "m2"},
                {"action": "shutdown", "after_ms": 150, "target": "m3", "signal": True},  # once PASSIVE
            ],
            "expect": {"cluster_stopped": True},
        },
        "signal-during-cluster-shutdown",
    )
    seed, params = params_of(schedule)
    run = Run(seed, params, schedule)
    result = run.run()
    assert result.passed, result.problems[:5]
    refusals = [e.reason for _, _, e in emitted(run, events.LeaveRefused)]
    assert refusals == ["the cluster is shutting down: this member stops with the others, nothing to do"]
    assert not any("rebalance resume" in r.reason for r in run.sim.admin_replies.values())
    assert all(n.member.lifecycle is Lifecycle.STOPPED for n in run.sim.nodes.values())


def test_no_migration_promotes_a_backup_but_refills_nothing_until_active() -> None:
    run = passed("no-migration-promotes-but-does-not-refill")
    crashed_at, active_at = step_time(run, 2), step_time(run, 3)
    started = [t for t, _, e in emitted(run, events.MigrationEvent) if e.phase == "started"]
    assert not [t for t in started if crashed_at < t < active_at], "nothing migrates in NO_MIGRATION"
    assert [t for t in started if t > active_at], "refilling starts once ACTIVE"
    assert run.sim.stats.partitions_lost == set()


def test_a_pause_during_a_leave_is_refused_and_the_leave_finishes() -> None:
    """Found by an outside tester on real processes: ``rebalance pause`` was taken while a member
    was leaving, which then waited, holding its replicas, until the state came back or
    graceful_shutdown_timeout_ms passed."""
    run = passed("a-pause-during-a-leave-is-refused")
    leave, pause = run.sim.admin_replies[1], run.sim.admin_replies[2]
    assert leave.result == m.ADMIN_OK
    assert pause.result == m.ADMIN_FAILED
    assert "is leaving" in pause.reason
    assert "no-migration" in pause.reason
    states = [e.state for _, _, e in emitted(run, events.ClusterStateChanged)]
    assert ClusterState.NO_MIGRATION not in states
    assert run.sim.stats.stops == 1
    assert run.sim.stats.partitions_lost == set()


def test_a_leaving_lite_member_is_not_promoted() -> None:
    """Found by an outside tester on real processes: a lite member asked to leave and to be
    promoted at once, in a frozen cluster, became a leaving data member no migration could free;
    the data members stopped on the core's invariant and the cluster had no majority left."""
    run = passed("a-leaving-lite-member-is-not-promoted")
    leave, promotion = run.sim.admin_replies[2], run.sim.admin_replies[3]
    assert leave.result == m.ADMIN_OK
    assert promotion.result == m.ADMIN_FAILED
    assert "not promoted" in promotion.reason
    assert run.sim.stats.stops == 1
    assert len(run.sim.member_addresses()) == 3


def test_a_removed_member_finds_a_cluster_whose_members_all_changed() -> None:
    """Found by an outside tester in the simulator: removed while paused, a member looked for the
    cluster only at its seeds and the members it last knew, all gone (two left, one joined later);
    it stayed discovering for good."""
    run = passed("a-removed-member-finds-a-cluster-that-moved-on")
    first = run.sim.started_addresses[0]
    assert emitted(run, events.RemovedFromCluster, at=first)
    live = {m.identity.address: m for m in run.sim.live_members()}
    assert set(live) == {first, run.sim.started_addresses[3]}
    assert all(m.joined for m in live.values())
    assert run.sim.stats.partitions_lost == set()


def test_a_frozen_cluster_refuses_a_joiner_until_it_is_active() -> None:
    run = passed("frozen-refuses-joins")
    joiner = run.sim.started_addresses[3]
    active_at = step_time(run, 3)
    added = [t for t, _, e in emitted(run, events.MemberAdded) if e.member.address == joiner]
    assert added
    assert min(added) > active_at


def test_a_state_change_waits_for_every_member_to_hold_the_table_and_fails_when_one_does_not() -> None:
    run, result = run_scenario("state-change-needs-the-same-table-everywhere")
    assert result.passed, result.problems
    reply = run.sim.admin_replies[1]
    assert reply.result == m.ADMIN_FAILED
    assert "has not reported its table" in reply.reason
    leader = run.sim.leader()
    assert leader is not None
    assert not [e for _, _, e in emitted(run, events.ClusterStateChanged) if e.state is ClusterState.NO_MIGRATION]


def test_promoting_a_data_member_fails_and_changes_nothing() -> None:
    run = passed("promote-a-data-member")
    reply = run.sim.admin_replies[1]
    assert reply.result == m.ADMIN_FAILED
    assert "already a data member" in reply.reason


def test_a_lite_member_is_promoted_and_given_partitions() -> None:
    run = passed("promote-a-lite-member")
    lite = run.sim.started_addresses[3]
    assert run.sim.admin_replies[1].result == m.ADMIN_OK
    assert [e for _, _, e in emitted(run, events.MemberPromoted) if e.member.address == lite]
    leader = run.sim.leader()
    assert leader is not None
    table = leader.consensus.state.table
    assert any(slots[0] is not None and slots[0].address == lite for slots in table.replicas)


def test_a_promotion_during_an_election_fails_clearly() -> None:
    run = passed("promote-during-an-election")
    reply = run.sim.admin_replies[1]
    assert reply.result == m.ADMIN_UNAVAILABLE  # nothing changed; asking again is right
    assert "no leader" in reply.reason or "election" in reply.reason or "leader changed" in reply.reason


def test_a_promotion_fails_when_the_leader_changes_before_it_commits() -> None:
    run = passed("promote-while-the-leader-changes")
    reply = run.sim.admin_replies[1]
    assert reply.result == m.ADMIN_UNAVAILABLE
    assert "leader changed" in reply.reason


def test_an_operator_recovers_a_cluster_that_lost_a_majority_of_voters() -> None:
    run = passed("recover-from-a-lost-majority")
    crashed_at, recovered_at = step_time(run, 3), step_time(run, 4)
    leaders_meanwhile = [t for t, _, e in emitted(run, events.LeaderChanged) if crashed_at < t < recovered_at]
    assert leaders_meanwhile == [], "no leader without a majority"
    reply = run.sim.admin_replies[1]
    assert reply.result == m.ADMIN_OK
    assert "leads alone" in reply.reason
    assert len(run.sim.member_addresses()) == 2
    assert run.sim.stats.partitions_lost  # three of five members held every replica of some


def test_an_operator_recovers_from_a_learner_when_every_voter_is_gone() -> None:
    run = passed("recover-at-a-learner")
    reply = run.sim.admin_replies[1]
    assert reply.result == m.ADMIN_OK, reply.reason
    assert len(run.sim.member_addresses()) == 2


def test_recovery_is_refused_by_a_member_that_heard_from_a_leader_lately() -> None:
    run = passed("recover-refused-while-a-leader-was-heard")
    reply = run.sim.admin_replies[1]
    assert reply.result == m.ADMIN_FAILED
    assert "heard" in reply.reason or "leads" in reply.reason


def test_a_cluster_shutdown_waits_for_a_member_cut_off_for_a_moment() -> None:
    stops_while_cut_off: list[int] = []

    def watch(run: Run) -> None:
        def check(sim: Any, address: str) -> None:
            if sim.network.groups and sim.stats.stops:
                stops_while_cut_off.append(sim.now_ms)

        run.sim.checks.append(check)

    run = passed("cluster-shutdown-waits-for-every-member", watch)
    assert run.sim.admin_replies[1].result == m.ADMIN_OK
    assert stops_while_cut_off == []
    assert run.sim.stats.stops == 4


def test_the_last_data_member_is_refused_a_graceful_shutdown() -> None:
    run = passed("the-last-data-member-is-not-shut-down")
    assert [run.sim.admin_replies[i].result for i in (1, 2)] == [m.ADMIN_OK, m.ADMIN_OK]
    last = run.sim.admin_replies[3]
    assert last.result == m.ADMIN_FAILED
    assert "last data member" in last.reason
    assert len(run.sim.member_addresses()) == 1


def test_members_asked_to_leave_at_once_keep_the_last_one_and_every_write() -> None:
    run = passed("every-member-asked-to-leave-at-once")
    replies = [run.sim.admin_replies[i] for i in (1, 2, 3)]
    assert sorted(r.result for r in replies) == sorted([m.ADMIN_OK, m.ADMIN_OK, m.ADMIN_FAILED])
    assert any("last data member" in r.reason for r in replies)
    assert len(run.sim.member_addresses()) == 1


def test_every_member_signalled_stops_within_seconds() -> None:
    run = passed("every-member-signalled-to-stop")
    last_signal_ms = step_time(run, 3)
    stops = emitted(run, events.MemberStopped)
    assert len(stops) == 3
    assert all("every data member is leaving" in e.reason for _, _, e in stops)
    assert max(t for t, _, _ in stops) - last_signal_ms < 2_000
    # Each was recorded leaving (no "last data member" refusal), and none handed anything over: a
    # leave that stops without doing so is answered failed, whatever stopped it.
    answers = [run.sim.admin_replies[i] for i in (1, 2, 3)]
    assert all(r.result == m.ADMIN_FAILED and "nobody is left to take its replicas" in r.reason for r in answers)


def test_members_removed_just_before_everyone_stops_are_told_and_stop() -> None:
    run = passed("removed-members-told-when-all-stop")
    stops = emitted(run, events.MemberStopped)
    assert len(stops) == 5
    assert any("handing its replicas over" in e.reason for _, _, e in stops)


def test_a_leader_crash_during_a_leave_of_three_leaves_a_majority_alive() -> None:
    run = passed("leader-crash-during-a-leave-of-three")
    live = run.sim.live_members()
    assert [m.lifecycle for m in live] == [Lifecycle.ACTIVE]
    assert live[0].consensus.leader == live[0].identity
    stops = emitted(run, events.MemberStopped)
    assert [e.reason for _, _, e in stops] == ["left the cluster after handing its replicas over"]


def test_leaving_members_keep_their_data_when_the_last_to_stay_crashes() -> None:
    run = passed("leaving-members-outlive-a-crash-of-the-last-to-stay")
    join_ms = step_time(run, 6)
    stops = emitted(run, events.MemberStopped)
    assert len(stops) == 3
    assert all(e.reason == "left the cluster after handing its replicas over" for _, _, e in stops)
    assert all(t > join_ms for t, _, _ in stops)  # they waited, holding their data, for the joiner
    (joiner,) = run.sim.live_members()
    assert joiner.consensus.leader == joiner.identity
    assert run.sim.stats.partitions_lost == set()


def test_a_lite_member_stops_once_every_data_member_asked_to_leave() -> None:
    run = passed("lite-member-stops-with-every-data-member")
    lite = run.sim.started_addresses[3]
    (reason,) = [e.reason for _, a, e in emitted(run, events.MemberStopped) if a == lite]
    assert reason == "every data member left the cluster: a lite member has nothing to serve"


def test_a_short_pause_demotes_no_voter() -> None:
    run = passed("a-short-pause-demotes-no-voter")
    assert len(run.sim.member_addresses()) == 3


def test_backups_converge_after_their_messages_were_lost_with_no_user_action() -> None:
    summaries: list[Any] = []
    asked: list[tuple[str, int]] = []
    corrupted: list[tuple[str, int]] = []

    def watch(run: Run) -> None:
        def hook(address: str, sender: str, message: Any) -> None:
            if isinstance(message, m.ReplicaSummary):
                summaries.append(message)
            elif isinstance(message, m.ReplicaSyncRequest):
                asked.append((sender, message.partition_id))

        def lose_a_backups_data() -> None:
            # A backup silently loses what it held of one partition (nothing tells its owner).
            for address in sorted(run.sim.member_addresses()):
                member = run.sim.nodes[address].member
                table = member.consensus.state.table
                for pid in member.data.held_partitions():
                    if (
                        table is not None
                        and member.identity in table.replicas[pid][1:]
                        and member.data.sequence_of(pid)
                    ):
                        member.data.lose(pid)
                        corrupted.append((address, pid))
                        return

        run.sim.after_delivery.append(hook)
        run.sim.at(20_000, lose_a_backups_data)

    _run, result = run_scenario("backup-messages-dropped", watch)
    # The verdict checks every backup holds exactly its owner's data at the end.
    assert result.passed, result.problems[:5]
    assert result.writes["maybe"] > 0  # the lost batches made writes indeterminate
    assert summaries, "owners told their backups where they stand"
    assert corrupted
    assert corrupted[0] in asked, "anti-entropy found the backup behind and it asked for a sync"


def test_a_promoted_async_backup_reports_how_many_replicas_were_lost_and_keeps_its_map() -> None:
    before: dict[str, Any] = {}
    remember_table = remembering_the_table_at_step_1(before)
    run = passed("async-backup-survives-two-crashes", remember_table)
    table, victims = before["table"], before["victims"]
    lost = {e.partition_id: e.lost_replica_count for _, _, e in emitted(run, events.PartitionLost)}
    hottest_gone = {}
    for pid, slots in enumerate(table.replicas):
        addresses = [r.address if r is not None else None for r in slots[:3]]
        if addresses[0] in victims and addresses[1] in victims:
            hottest_gone[pid] = 2 if addresses[2] not in victims else MAX_REPLICA_COUNT
    assert 2 in hottest_gone.values(), "the seed should leave some partition with only its async backup"
    assert lost == hottest_gone
    # The async map survived where its async backup did: the new owner holds its keys.
    leader = run.sim.leader()
    assert leader is not None
    kept = 0
    for pid, count in hottest_gone.items():
        if count == 2:
            owner = leader.consensus.state.table.owner(pid)
            data = run.sim.nodes[owner.address].member.data.view(pid)
            kept += len(data.maps.get(ASYNC_MAP_NAME, {})) if data else 0
    assert kept > 0


# --- memory limits --------------------------------------------------------------------------------


def test_members_at_their_memory_limit_refuse_writes_lose_nothing_and_take_writes_once_members_join() -> None:
    before: dict[str, Any] = {}
    run = passed("members-at-their-memory-limit", refused_before_the_crash(before))
    assert before["refused"] > 0  # full before the crash
    assert run.sim.stats.writes_refused_memory_full > before["refused"]  # and full after it
    joined_ms = step_time(run, 3)
    later = [
        w for writes in run.sim.ledger.writes.values() for w in writes if w.issued_ms > joined_ms and w.outcome == ACKED
    ]
    assert later, "no write was taken once members joined"


def refused_before_the_crash(before: dict[str, Any]) -> Any:
    def remember(run: Run) -> None:
        original = run.faults_log

        def log(line: str) -> None:
            if "step 1:" in line:
                before["refused"] = run.sim.stats.writes_refused_memory_full
            original(line)

        assert run.runner is not None
        run.runner.on_step = log

    return remember


def test_a_full_cache_evicts_to_take_writes_while_the_other_maps_refuse_them() -> None:
    run = passed("a-full-cache-evicts")
    evicted = sum(node.member.data.entries_evicted for node in run.sim.nodes.values())
    assert evicted > 0
    assert run.sim.stats.writes_refused_memory_full > 0  # the maps that evict nothing were full
    cache_keys = run.sim.ledger.cache_keys
    acked_cache = [w for key in cache_keys for w in run.sim.ledger.writes.get(key, []) if w.outcome == ACKED]
    assert len(acked_cache) > 100


def test_every_member_killed_at_once_comes_back_from_its_disk_with_every_acknowledged_write() -> None:
    run = passed("every-member-killed-and-restarted-from-disk")
    restored = emitted(run, events.MemberRestored)
    assert len(restored) == 3
    assert sum(event.entries for _, _, event in restored) > 0
    # The same members, not new ones: the cluster re-formed with the identities it had.
    leader = run.sim.leader()
    assert leader is not None
    assert {r.id for r in leader.consensus.state.members} == {event.member for _, _, event in restored}
    assert run.sim.ledger.counts()["acked"] > 1_000


def test_a_member_returning_late_from_disk_rejoins_as_a_new_member() -> None:
    run = passed("a-member-returning-late-from-disk")
    restored = emitted(run, events.MemberRestored)
    assert len(restored) == 1  # it read its disk back
    old = restored[0][2].member
    removed = [e for _, _, e in emitted(run, events.MemberRemoved) if e.member == old]
    assert removed, "the member that stayed away was not removed"
    leader = run.sim.leader()
    assert leader is not None
    state = leader.consensus.state
    assert not state.is_member(old)
    assert any(r.id.address == old.address for r in state.members)  # back, as another member
    assert run.sim.ledger.counts()["acked"] > 1_000


def test_a_rolling_restart_from_disk_moves_no_partition() -> None:
    run = passed("a-rolling-restart-from-disk")
    first_kill_ms = step_time(run, 1)
    started = [e for t, _, e in emitted(run, events.MigrationEvent) if t > first_kill_ms]
    assert not started, f"migrations after the first kill: {started[:3]}"
    assert len(emitted(run, events.MemberRestored)) == 3
    assert run.sim.ledger.counts()["acked"] > 1_000


def test_members_whose_disks_fill_up_refuse_writes_before_their_disks_end_and_take_them_again() -> None:
    run = passed("members-whose-disks-fill-up")
    stats = run.sim.stats
    assert stats.disk_full_stops == 0  # no write reached the end of a disk
    joined_ms = step_time(run, 1)
    writes = [w for keyed in run.sim.ledger.writes.values() for w in keyed]
    refused_before = [w for w in writes if w.issued_ms < joined_ms and w.outcome == FAILED]
    assert refused_before, "no write was refused for want of disk before members joined"
    assert stats.writes_refused_disk_full >= len(refused_before)
    taken_after = [w for w in writes if w.issued_ms > step_time(run, 2) and w.outcome == ACKED]
    assert len(taken_after) > 100, "writes were not taken again once members joined"
    assert max(len(disk.read(name)) for disk in run.sim.disks.values() for name in ("raft", "replicas")) < 100_000


def test_a_member_restarted_at_a_new_address_is_renamed_and_moves_no_partition() -> None:
    run = passed("a-member-restarted-at-a-new-address")
    (moving,) = [e for _, _, e in emitted(run, events.MemberMoving)]
    assert moving.partitions > 0
    assert moving.old.uuid == moving.new.uuid
    assert moving.old.address != moving.new.address
    (moved,) = [e for _, _, e in emitted(run, events.MemberMoved)]
    assert (moved.old, moved.new) == (moving.old, moving.new)
    leader = run.sim.leader()
    assert leader is not None
    state = leader.consensus.state
    assert state.is_member(moving.new)
    assert not state.is_member(moving.old)
    assert not any(moving.old in slots for slots in state.table.replicas)
    assert sum(moving.new in slots for slots in state.table.replicas) == moving.partitions
    # Renamed, not removed: no member left, none joined, no partition moved.
    assert not emitted(run, events.MemberRemoved)
    assert not emitted(run, events.MemberAdded)
    move_ms = step_time(run, 2)
    assert not [e for t, _, e in emitted(run, events.MigrationEvent) if t > move_ms]
    assert run.sim.ledger.counts()["acked"] > 1_000


def test_a_hot_restart_waits_for_a_slow_member_and_moves_nothing() -> None:
    run = passed("a-hot-restart-waits-for-a-slow-member")
    assert len(emitted(run, events.MemberRestored)) == 4  # the slow one too, as itself
    assert not emitted(run, events.MemberRemoved)
    assert not emitted(run, events.MigrationEvent)
    (incomplete,) = {e for _, _, e in emitted(run, events.HotRestartIncomplete)}
    assert incomplete.policy == "full_recovery_only"
    assert len(incomplete.members) == 1
    assert run.sim.ledger.counts()["acked"] > 1_000


def test_a_partial_restart_most_recent_removes_the_members_away_and_reports_their_partitions_lost() -> None:
    run = passed("a-partial-restart-keeps-the-most-recent")
    (incomplete,) = {e for _, _, e in emitted(run, events.HotRestartIncomplete)}
    assert incomplete.policy == "partial_recovery_most_recent"
    away = set(incomplete.members)
    assert len(away) == 2
    gave_up_ms = min(t for t, _, _ in emitted(run, events.HotRestartIncomplete))
    assert {e.member for t, _, e in emitted(run, events.MemberRemoved) if t < gave_up_ms + 1_000} >= away
    lost = {e.partition_id for _, _, e in emitted(run, events.PartitionLost)}
    assert lost
    assert lost == set(run.sim.stats.partitions_lost)
    # The one that came back later was removed: it joins as a new member, its replicas dropped.
    (rejoined,) = [e for _, _, e in emitted(run, events.RemovedFromCluster)]
    assert rejoined.old_identity in away


def test_a_partial_restart_most_complete_keeps_what_only_the_members_away_hold_until_they_return() -> None:
    run = passed("a-partial-restart-keeps-the-most-complete")
    (incomplete,) = {e for _, _, e in emitted(run, events.HotRestartIncomplete)}
    assert incomplete.policy == "partial_recovery_most_complete"
    (unavailable,) = [e for _, _, e in emitted(run, events.PartitionsUnavailable)][:1]
    back = {e.partition_ids for _, _, e in emitted(run, events.PartitionsAvailable)}
    assert unavailable.partition_ids in back  # served whole again once they answered
    assert not emitted(run, events.PartitionLost)
    assert not run.sim.stats.partitions_lost
    assert not emitted(run, events.RemovedFromCluster)


def test_a_moved_member_killed_as_it_is_renamed_comes_back_moving_again() -> None:
    run = passed("a-moved-member-killed-as-it-is-renamed")
    moving = [e for _, _, e in emitted(run, events.MemberMoving)]
    assert len(moving) == 2  # moved, and again after the kill: its member file still named the old address
    assert len(emitted(run, events.MemberMoved)) >= 1
    assert not [e for _, _, e in emitted(run, events.MemberRestored) if e.member.uuid == moving[0].old.uuid]
    assert run.sim.ledger.counts()["acked"] > 1_000


def test_a_mover_removed_once_it_took_part_of_the_log_rejoins_as_a_new_member() -> None:
    run = passed("a-mover-removed-once-it-took-part-of-the-log")
    (moving,) = [e for _, _, e in emitted(run, events.MemberMoving)]
    (rejoined,) = [e for _, _, e in emitted(run, events.RemovedFromCluster)]
    assert rejoined.old_identity.uuid == moving.new.uuid
    assert rejoined.new_identity.address == moving.new.address
    assert not emitted(run, events.MemberMoved)
    state = run.sim.leader().consensus.state
    assert rejoined.new_identity in state.member_ids
    assert run.sim.ledger.counts()["acked"] > 1_000


def test_a_write_told_settling_then_refused_ends_as_maybe_applied() -> None:
    run = passed("a-write-settling-when-the-cluster-shuts-down")
    settled = [w for keyed in run.sim.ledger.writes.values() for w in keyed if w.outcome == MAYBE]
    assert settled
