"""Raft across restarts: a server that crashes and starts again from its disk is the same server.
It keeps its vote, its entries and its commit point; one that crashed while writing a step comes
back without it, and no message of that step was sent. Seeded random runs crash any server (every
voter at once included), now and then in the middle of a write, and restart them."""

from __future__ import annotations

import os
import random

import pytest

from shardgrid.core.errors import InvariantViolation
from shardgrid.core.identity import MemberId
from shardgrid.core.raft import Entry, Membership, RaftNode, Snapshot
from shardgrid.core.raft.messages import VoteReply, VoteRequest
from shardgrid.core.raft.storage import HardState, RaftStorage, RaftWrite
from tests.core.raft_harness import SETTINGS, Cluster, SafetyViolation, replica, run_with_faults
from tests.core.test_raft import committed_everywhere, elected

A, B, C = replica(1), replica(2), replica(3)


def stored(node_disk: RaftStorage) -> RaftStorage:
    return RaftStorage(node_disk.hard_state, node_disk.snapshot, list(node_disk.entries))


def test_every_voter_restarted_at_once_keeps_every_committed_entry() -> None:
    cluster = Cluster(seed=5)
    voters = cluster.bootstrap(3)
    elected(cluster)
    indexes = [cluster.propose(f"c{i}") for i in range(20)]
    assert None not in indexes
    assert committed_everywhere(cluster, indexes[-1])
    before = {i: list(cluster.applied[i]) for i in voters}
    for voter in voters:
        cluster.crash(voter)
    for voter in voters:
        cluster.restart(voter)
    for voter in voters:
        # applied at once from the disk's commit point, before any leader speaks
        assert cluster.applied[voter] == before[voter]
    elected(cluster)
    last = cluster.propose("after")
    assert last is not None
    assert last > indexes[-1]
    assert committed_everywhere(cluster, last)
    for voter in voters:
        assert cluster.applied[voter][: len(before[voter])] == before[voter]


def test_a_restarted_voter_keeps_its_vote_in_its_term() -> None:
    membership = Membership.of([A, B, C], [])
    node = RaftNode(A, SETTINGS, random.Random(1), Snapshot(0, 0, membership, ()))
    node.take_write()
    node.step(0, B, VoteRequest(term=4, last_index=0, last_term=0, pre_vote=False))
    write = node.take_write()
    assert write is not None
    assert write.hard_state == HardState(4, B, 0)
    assert node.take_messages() == [(B, VoteReply(4, True, False))]
    disk = RaftStorage()
    disk.apply(RaftWrite(snapshot=Snapshot(0, 0, membership, ())))
    disk.apply(write)
    again = RaftNode.restored(A, SETTINGS, random.Random(2), disk, now_ms=10_000)
    later_ms = 10_000 + 2 * SETTINGS.election_timeout_ms
    again.tick(later_ms)
    again.take_messages()
    again.step(later_ms, C, VoteRequest(term=4, last_index=0, last_term=0, pre_vote=False))
    assert again.take_messages() == [(C, VoteReply(4, False, False))]  # it voted for B in term 4
    again.step(later_ms, B, VoteRequest(term=4, last_index=0, last_term=0, pre_vote=False))
    assert again.take_messages() == [(B, VoteReply(4, True, False))]  # the same vote, asked again


def test_a_restarted_server_grants_no_vote_for_an_election_timeout() -> None:
    """It cannot know whether it heard from a leader just before it stopped; the leader's lease
    counts on its refusing to vote until an election timeout after that."""
    membership = Membership.of([A, B, C], [])
    disk = RaftStorage()
    disk.apply(RaftWrite(snapshot=Snapshot(0, 0, membership, ()), hard_state=HardState(2, None, 0)))
    node = RaftNode.restored(A, SETTINGS, random.Random(1), disk, now_ms=1_000)
    node.step(1_001, B, VoteRequest(term=3, last_index=0, last_term=0, pre_vote=True))
    node.step(1_001, B, VoteRequest(term=3, last_index=0, last_term=0, pre_vote=False))
    assert node.take_messages() == []
    late_ms = 1_000 + SETTINGS.election_timeout_ms
    node.step(late_ms, B, VoteRequest(term=3, last_index=0, last_term=0, pre_vote=False))
    assert node.take_messages() == [(B, VoteReply(3, True, False))]


def test_the_only_voter_restarted_leads_again_at_its_first_tick_and_one_of_three_waits() -> None:
    """A cluster of one waited out an election timeout for a leader that could only have been
    itself (1.4 s of the 3.4 a restarted member of a million entries took to serve)."""
    for voters, leads_at_once in (([A], True), ([A, B, C], False)):
        disk = RaftStorage()
        membership = Membership.of(voters, [])
        disk.apply(RaftWrite(snapshot=Snapshot(0, 0, membership, ()), hard_state=HardState(2, A, 0)))
        node = RaftNode.restored(A, SETTINGS, random.Random(1), disk, now_ms=1_000)
        node.tick(1_001)
        if leads_at_once:
            assert node.is_leader, "the only voter did not lead again at once"
            assert node.term == 3
        else:
            assert not node.is_leader
            assert node.take_messages() == []  # it waits to hear from a leader


@pytest.mark.parametrize("seed", range(1, 21))
def test_a_voter_restarted_again_and_again_never_lets_a_second_leader_hold_a_lease(seed: int) -> None:
    """The leader's lease leans on F1 (F2 cannot reach the leader, only F1); F1 crashes and
    restarts at once, again and again, while F2 campaigns. Without the vote hold, F1 votes for F2
    while the leader's lease runs (found by an outside tester: the random runs did not notice the
    hold was gone; this did, in 29 of 40 seeds)."""
    cluster = Cluster(seed=seed, max_latency_ms=5)
    voters = cluster.bootstrap(3)
    leader = elected(cluster)
    index = cluster.propose("x")
    assert index is not None
    assert committed_everywhere(cluster, index)
    f1, f2 = [v for v in voters if v != leader.identity]
    cluster.cut_links.add(frozenset((leader.identity, f2)))
    for _ in range(30):
        cluster.run_for(cluster.rng.randint(50, 400))  # the lease check runs after every event
        now = cluster.leader()
        if now is not None and now.identity == leader.identity:
            cluster.crash(f1)
            cluster.restart(f1)


def test_a_write_holds_only_what_changed_since_the_last() -> None:
    cluster = Cluster(seed=9)
    (only,) = cluster.bootstrap(1)
    elected(cluster)
    node = cluster.nodes[only]
    assert node.take_write() is None
    index = node.propose("x")
    assert index is not None
    write = node.take_write()
    assert write is not None
    assert [e.index for e in write.entries] == [index]
    assert write.entries_from == index
    assert write.hard_state is not None
    assert write.hard_state.commit == index
    assert write.snapshot is None
    assert node.take_write() is None


@pytest.mark.parametrize(
    ("storage", "problem"),
    [
        (RaftStorage(HardState(1, None, 0), None, [Entry(term=1, index=1)]), "entries without a snapshot"),
        (
            RaftStorage(HardState(1, None, 0), Snapshot(3, 1, Membership.of([A], []), ()), [Entry(term=1, index=5)]),
            "entry 5 where 4 belongs",
        ),
        (
            RaftStorage(HardState(1, None, 0), Snapshot(0, 0, Membership.of([A], []), ()), [Entry(term=2, index=1)]),
            "entry 1 of term 2 after term 0, with the term at 1",
        ),
        (
            RaftStorage(HardState(3, None, 0), Snapshot(2, 1, Membership.of([A], []), ()), []),
            "commit 0 below the snapshot's 2",
        ),
        (
            RaftStorage(HardState(3, None, 4), Snapshot(2, 1, Membership.of([A], []), ()), [Entry(term=1, index=3)]),
            "commit 4 beyond the log's last entry 3",
        ),
    ],
)
def test_a_storage_no_server_could_have_written_is_refused(storage: RaftStorage, problem: str) -> None:
    assert problem in storage.problem()
    with pytest.raises(InvariantViolation, match="cannot start from this storage"):
        RaftNode.restored(A, SETTINGS, random.Random(1), storage)


# --- seeded random runs ----------------------------------------------------------------------------

SEEDS = range(1, int(os.environ.get("SHARDGRID_RAFT_SEEDS", "40")) + 1)


def restart_run(seed: int, duration_ms: int = 15_000) -> Cluster:
    """Proposals, crashes of any server (a majority, or all, included), crashes in the middle of a
    write, restarts, splits, compactions and transfers; safety is checked after every event. At
    the end every server is restarted and the cluster must commit, holding every entry anyone
    applied."""
    rng = random.Random(seed)
    cluster = Cluster(
        seed=seed,
        drop_rate=rng.choice([0.0, 0.02, 0.1]),
        duplicate_rate=rng.choice([0.0, 0.05]),
        max_latency_ms=20,
        torn_rate=rng.choice([0.0, 0.002, 0.01]),
    )
    members = cluster.bootstrap(rng.choice([1, 3, 5]), learners=rng.randint(0, 1))
    run_with_faults(cluster, rng, duration_ms, 300, (100, 1_000), lambda: _random_fault(cluster, members, rng))
    cluster.heal()
    for member in members:
        if member not in cluster.alive:
            cluster.restart(member)
    cluster.torn_rate = 0.0
    elected(cluster, 20_000)
    # A leader of an older term, its side just healed, may take a proposal and then lose it: Raft
    # promises no more. Proposed again until one commits everywhere.
    committed = False
    deadline = cluster.now_ms + 30_000
    while not committed and cluster.now_ms < deadline:
        final = cluster.propose("final")
        committed = final is not None and committed_everywhere(cluster, final, 2_000)
        cluster.run_for(50)
    assert committed, f"seed {seed}: no final proposal committed everywhere"
    for member in members:
        held = {index: (term, command) for index, term, command in cluster.applied[member]}
        for index, known in cluster.committed.items():
            if held.get(index) != known:
                raise SafetyViolation(f"seed {seed}: {member} lost committed entry {index} {known}")
    return cluster


def _random_fault(cluster: Cluster, members: list[MemberId], rng: random.Random) -> None:
    leader = cluster.leader()
    down = [m for m in members if m not in cluster.alive]
    fault = rng.choice(["crash", "crash-leader", "restart", "restart", "split", "heal", "compact", "transfer"])
    if fault == "crash" and cluster.alive:
        cluster.crash(rng.choice(sorted(cluster.alive)))
    elif fault == "crash-leader" and leader is not None:
        cluster.crash(leader.identity)
    elif fault == "restart" and down:
        cluster.restart(rng.choice(down))
    elif fault == "split":
        cluster.split_at_random(rng)
    elif fault == "heal":
        cluster.heal()
    elif fault == "compact":
        cluster.compact_everywhere()
    elif fault == "transfer" and leader is not None:
        others = [v for v in leader.membership.voters if v != leader.identity and v in cluster.alive]
        if others:
            leader.transfer_leadership(rng.choice(others))
            cluster._flush(leader)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_crashes_and_restarts_keep_raft_safe_and_live(seed: int) -> None:
    cluster = restart_run(seed)
    assert cluster.restarts > 0
    # (How much commits before the end varies: a run may crash every voter early and keep them down
    # for long. restart_run itself requires the final proposal committed on every server.)


def test_a_leader_alone_commits_only_what_its_disk_holds() -> None:
    """A leader that is the only voter counts its own log towards a commit only as far as its
    caller said it is synced (found by an outside tester: alone among the voters, a leader applied
    entries before they were synced, and a crash took them back while another entry took their
    place)."""
    leader = RaftNode(replica(1), SETTINGS, random.Random(1), Snapshot(0, 0, Membership.of([replica(1)]), None), 0)
    leader.durable_index = 0
    for now_ms in range(0, 5_000, 10):
        leader.tick(now_ms)
        if leader.is_leader:
            break
    assert leader.is_leader
    leader.take_write()
    index = leader.propose(("x",))
    assert index is not None
    leader.take_write()
    assert leader.commit_index < index  # written, not yet synced: not committed
    leader.synced(index)
    assert leader.commit_index == index
