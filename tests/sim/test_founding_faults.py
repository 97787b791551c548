"""Founding the first cluster when one of its messages is lost, or one of its founders restarts.

Found by an outside tester: a founder that missed its proposer's ``Bootstrap`` (one lost message)
never joined. The other founders answered its join requests with the founding again, which it
refused from anyone but its proposer (and, once it had heard of a cluster, from anyone); the
proposer ignored its repeated promise; and the cluster removed it and still answered it with the
founding. Founders that all missed it waited for it for good, their proposer alone in a cluster of
three voters that never had a leader.

Found by the same tester: a proposer killed once its peers promised it and restarted at its address
(a new identity) proposed for good with no promise, its peers bound for good to the dead one; and a
peer that promised and was restarted at once was listed twice in the founding, with each identity.
"""

from __future__ import annotations

from shardgrid.core import events
from shardgrid.core.messages import Bootstrap, FoundingAnswer, FoundingProposal
from shardgrid.core.raft.messages import RAFT_MESSAGE_TYPES
from shardgrid.sim.vopr import SimParams

THREE = SimParams(members=3, partitions=7, backups=1, faults=(), ops=0, drop_rate=0.0, duplicate_rate=0.0)


def started(seeds: list[tuple[int, ...]], seed: int = 1, gap_ms: int = 100):
    """A simulation whose member i starts at ``gap_ms * i`` knowing the members ``seeds[i]``."""
    sim = THREE.simulation(seed)
    addresses = sim.reserve_addresses(len(seeds))
    for i, listed in enumerate(seeds):
        own = tuple(dict.fromkeys((*(addresses[j] for j in listed), addresses[i])))
        sim.at(gap_ms * i, lambda address=addresses[i], own=own: sim.start_member(address, seeds=own))
    return sim, addresses


def all_joined_by(sim, limit_ms: int) -> int | None:
    """When every live member is a member of one cluster with a leader, by ``limit_ms``."""
    now = sim.now_ms
    while now < limit_ms:
        now += 100
        sim.run_until(now)
        live = [n.member for n in sim.nodes.values() if n.alive]
        if live and all(m.joined for m in live) and any(m.is_leader for m in live):
            lists = {tuple(sorted(r.address for r in m.consensus.state.member_ids)) for m in live}
            if lists == {tuple(sorted(n.address for n in sim.nodes.values() if n.alive))}:
                return now
    return None


def foundings(sim) -> set[Bootstrap]:
    return {n.member.consensus.founding for n in sim.nodes.values()} - {None}


def drop_first(sim, condition) -> list:
    """Drop the first message for which ``condition(source, target, message)`` holds, per target."""
    dropped: list = []

    def rule(source: str, target: str, message: object) -> bool:
        if condition(source, target, message) and target not in [t for _, t in dropped]:
            dropped.append((sim.now_ms, target))
            return True
        return False

    sim.drop_rules.append(rule)
    return dropped


def test_a_founder_that_missed_the_founding_message_joins() -> None:
    """m1 and m2 list all three, m3 lists only m2; the one lost message is m1's Bootstrap to m3.
    Before: m1 and m2 formed, removed m3 at 8.6 s, and m3 was still not joined at 120 s."""
    sim, a = started([(0, 1, 2), (0, 1, 2), (1,)])
    dropped = drop_first(sim, lambda _s, target, m: isinstance(m, Bootstrap) and target == a[2])
    assert all_joined_by(sim, 30_000) is not None
    assert dropped
    assert len(foundings(sim)) == 1


def test_a_founder_the_cluster_removed_for_missing_the_founding_joins_as_a_joiner() -> None:
    """Every founding message and Raft message to m3 is lost for 15 s, past its removal (the others
    remove a voter silent for the failure timeout): then it joins as any joiner does."""
    sim, a = started([(0, 1, 2), (0, 1, 2), (1,)])
    lost = (Bootstrap, *RAFT_MESSAGE_TYPES)
    sim.drop_rules.append(lambda _s, target, m: isinstance(m, lost) and target == a[2] and sim.now_ms < 15_000)
    sim.run_until(15_000)
    assert not sim.nodes[a[2]].member.joined
    removed = [e for _, at, e in sim.events if at == a[0] and isinstance(e, events.MemberRemoved)]
    assert [e.member.address for e in removed][:1] == [a[2]]
    assert all_joined_by(sim, 45_000) is not None
    assert len(foundings(sim)) == 1


def test_founders_that_all_missed_the_founding_message_found_it() -> None:
    """m2 and m3 list only each other and both miss m1's Bootstrap. Before: m1 founded a cluster of
    three voters alone (never a leader), m2 and m3 waited for its founding for good."""
    sim, a = started([(1, 2), (2,), (1,)])
    dropped = drop_first(sim, lambda source, _t, m: isinstance(m, Bootstrap) and source == a[0])
    assert all_joined_by(sim, 30_000) is not None
    assert len(dropped) == 2
    assert len(foundings(sim)) == 1


def crash_proposer_once_promised(sim, a, restart_after_ms: int, promises: int = 2) -> list[int]:
    """Kill m1 (the first by address: the proposer) once ``promises`` promises reached it, before it
    founds (it founds on its next tick), with what it had still on the wire; restart it at the same
    address ``restart_after_ms`` later."""
    crashed: list[int] = []
    seen: list[str] = []

    def hook(address: str, source: str, message: object) -> None:
        if address == a[0] and isinstance(message, FoundingAnswer) and message.promised and not crashed:
            seen.append(source)
            if len(set(seen)) >= promises:
                crashed.append(sim.now_ms)
                sim.crash(a[0], drop_in_flight=True)
                seeds = sim.nodes[a[0]].member.ctx.seed_addresses
                sim.at(sim.now_ms + restart_after_ms, lambda: sim.start_member(a[0], seeds=seeds))

    sim.after_delivery.append(hook)
    return crashed


def test_a_proposer_restarted_at_its_address_after_its_peers_promised_founds_the_cluster() -> None:
    """Before: the new process proposed for good with no promise, the two others waited for good
    for the founding of the dead one ("promised round 1 of 127.0.0.1:5701")."""
    for seed in (1, 2, 3, 4):
        sim, a = started([(0, 1, 2)] * 3, seed=seed)
        crashed = crash_proposer_once_promised(sim, a, restart_after_ms=500)
        assert all_joined_by(sim, 60_000) is not None, f"seed {seed}"
        assert crashed
        assert len(foundings(sim)) == 1


def test_a_founder_that_missed_the_founding_of_a_proposer_that_then_died_joins_its_cluster() -> None:
    """m1 founds with m2 and m3, its Bootstrap to m3 is lost, and m1 dies at once and is restarted:
    m3 must take the founding m2 holds (the cluster m2 started), not be freed to found another."""
    sim, a = started([(0, 1, 2)] * 3)
    drop_first(sim, lambda source, target, m: isinstance(m, Bootstrap) and target == a[2])
    restarted: list[int] = []

    def hook(address: str, source: str, message: object) -> None:
        if address == a[1] and isinstance(message, Bootstrap) and not restarted:
            restarted.append(sim.now_ms)
            sim.crash(a[0], drop_in_flight=True)
            seeds = sim.nodes[a[0]].member.ctx.seed_addresses
            sim.at(sim.now_ms + 300, lambda: sim.start_member(a[0], seeds=seeds))

    sim.after_delivery.append(hook)
    assert all_joined_by(sim, 60_000) is not None
    assert restarted
    assert len(foundings(sim)) == 1


def test_a_founding_counts_each_address_once_with_its_newest_process() -> None:
    """m2 promises, is killed and restarts at once at the same address; m3's answers are lost for
    the first 5 s. Before: the Bootstrap listed 127.0.0.1:5702 twice as voters, with each of its two
    identities (and never m3), a founding of three voters of which one was dead."""
    sim, a = started([(0, 1, 2)] * 3, seed=7, gap_ms=10)
    sim.drop_rules.append(lambda source, _t, m: isinstance(m, FoundingAnswer) and source == a[2] and sim.now_ms < 5_000)
    restarted: list[int] = []

    def hook(address: str, _source: str, message: object) -> None:
        if address == a[1] and isinstance(message, FoundingProposal) and not restarted:
            restarted.append(sim.now_ms)
            sim.at(sim.now_ms + 5, lambda: sim.crash(a[1]))
            sim.at(sim.now_ms + 60, lambda: sim.start_member(a[1], seeds=tuple(a)))

    sim.after_delivery.append(hook)
    joined = all_joined_by(sim, 30_000)
    assert restarted
    [founding] = foundings(sim)
    listed = [r.id for r in founding.members]
    assert sorted(listed) == sorted(n.member.identity for n in sim.nodes.values()), founding
    assert joined is not None
