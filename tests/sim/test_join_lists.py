"""Founding with per-member join lists, as the runtime builds seeds (the ``--join`` list, then the
member's own address unless the list names it already).

Found on real processes (the issue tracker): three members on 127.0.0.1:5991-5993, each with
``--join`` naming only the two others, never formed a cluster and logged nothing: each process
ranked the candidates by its own seed list, where it came last, so each judged another one first
and none proposed. The order is now the same on every process (address, then identity); a process
that sees enough peers but is not first proposes after another ``bootstrap_after_ms`` (the first
may hear too few: a process that only one other lists hears only that one); and a process that has
not formed or joined a cluster says why every ten join retries (``ClusterNotFormed``).
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from shardgrid.core import events
from shardgrid.sim.vopr import SimParams

THREE = SimParams(members=3, partitions=7, backups=1, faults=(), ops=0, drop_rate=0.0, duplicate_rate=0.0)


def start(joins: list[list[int]], params: SimParams = THREE, seed: int = 1, started: int | None = None):
    sim = params.simulation(seed)
    addresses = sim.reserve_addresses(len(joins))
    for i, join in enumerate(joins[:started]):
        seeds = tuple(dict.fromkeys((*(addresses[j] for j in join), addresses[i])))  # as runtime/process.py
        sim.at(300 * i, lambda address=addresses[i], seeds=seeds: sim.start_member(address, seeds=seeds))
    return sim


def formed_by(sim, limit_ms: int) -> int | None:
    now = 0
    while now < limit_ms:
        now += 100
        sim.run_until(now)
        if all(node.member.joined for node in sim.nodes.values()):
            assert len({node.member.consensus.founding for node in sim.nodes.values()} - {None}) == 1
            return now
    return None


def test_three_members_that_each_list_only_the_two_others_form_a_cluster() -> None:
    assert formed_by(start([[1, 2], [0, 2], [0, 1]]), 10_000) is not None


def join_lists(member: int, count: int) -> list[list[int]]:
    """Every list a member could be given: distinct addresses in any order, at least one other
    member among them, its own address or not."""
    return [
        list(p)
        for k in range(1, count + 1)
        for p in itertools.permutations(range(count), k)
        if any(j != member for j in p)
    ]


def test_any_join_lists_that_connect_three_members_form_one_cluster() -> None:
    """All 14**3 = 2744 combinations (1336 never formed before, 186 of them with two proposers
    refusing each other forever, a FoundingProposal/FoundingAnswer exchange at network speed)."""
    never = []
    for joins in itertools.product(*(join_lists(i, 3) for i in range(3))):
        sim = start([list(j) for j in joins])
        if formed_by(sim, 10_000) is None:
            never.append(joins)
    assert never == []


def test_a_member_that_cannot_form_a_cluster_says_why_at_a_bounded_rate() -> None:
    sim = start([[1, 2], [0, 2], [0, 1]], started=2)  # the third never starts
    sim.run_until(61_000)
    reports = [(t, a, e) for t, a, e in sim.events if isinstance(e, events.ClusterNotFormed)]
    for address in sim.nodes:
        times = [t for t, a, _ in reports if a == address]
        assert 5 <= len(times) <= 6  # every 10 s (20 join retries of 500 ms)
        assert all(b - a >= 10_000 for a, b in itertools.pairwise(times))
    _, _, report = reports[-1]
    assert (report.found, report.missing, report.initial_cluster_size) == (2, 1, 3)
    assert (report.seeds_silent, report.seeds_needed) == (("127.0.0.1:5703",), 2)
    assert "2 of the 3" in report.reason


def start_at(joins: list[list[int]], starts: list[int], params: SimParams, seed: int):
    """Members started at the given times (ms), each with its own join list, as runtime/process.py
    builds seeds."""
    sim = params.simulation(seed)
    addresses = sim.reserve_addresses(len(joins))
    for i, join in enumerate(joins):
        seeds = tuple(dict.fromkeys((*(addresses[j] for j in join), addresses[i])))
        sim.at(starts[i], lambda address=addresses[i], seeds=seeds: sim.start_member(address, seeds=seeds))
    return sim


def test_members_that_just_founded_tell_a_later_proposer_so() -> None:
    """Found by an outside tester: six members, sparse join lists (m6 lists everyone). m1, m4 and
    m6 founded; m2's proposal reached m4 and m6 just after, and they ignored it (a member no longer
    looked at founding messages): m2 never heard of their cluster and founded a second one with m3
    and m5. A member now answers a proposal that a cluster exists."""
    params = replace(THREE, members=6, initial_cluster_size=3)
    joins = [[3], [2, 1], [4], [5, 1, 0, 2], [2, 1], [3, 2, 1, 0, 4, 5]]
    sim = start_at(joins, [1176, 1438, 783, 1, 692, 645], params, seed=316)
    assert formed_by(sim, 30_000) is not None
