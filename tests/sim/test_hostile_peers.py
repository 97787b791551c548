"""Messages no member of the cluster would send, each found by an outside tester to do harm: sent
into a formed cluster, they must change nothing that matters."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shardgrid.core import messages as m
from shardgrid.core.effects import SendToAddress
from shardgrid.core.identity import MemberId
from shardgrid.core.inputs import Receive
from shardgrid.core.member.lifecycle import Lifecycle
from shardgrid.core.metadata.commands import MemberRecord
from shardgrid.core.migration import Migration, MigrationRecord
from shardgrid.sim.scenario import Scenario
from shardgrid.sim.vopr import SimParams

STRANGER = MemberId("eeeeeeee-0000-4000-8000-00000000dead", "10.6.6.6:6666")


def formed() -> Scenario:
    params = SimParams(members=3, partitions=16, ops=0, faults=(), drop_rate=0.0, duplicate_rate=0.0)
    scenario = Scenario(1, params)
    scenario.start()
    return scenario


def identities(scenario: Scenario) -> set[MemberId]:
    return {member.identity for member in scenario.sim.live_members()}


def test_a_join_at_a_live_members_address_does_not_evict_it() -> None:
    scenario = formed()
    sim, leader = scenario.sim, scenario.leader
    before = identities(scenario)
    for i, victim in enumerate(x for x in sim.live_members() if x is not leader):
        impostor = MemberId(f"f00d{i:04d}-0000-4000-8000-000000000000", victim.identity.address)
        sim._send(
            "evil-client:1",
            impostor,  # as a member session would name it, where no secret proves identities
            leader.identity.address,
            None,
            m.JoinRequest(impostor, settings_digest=leader.config.settings_digest),
        )
    sim.run_until(sim.now_ms + 30_000)
    assert identities(scenario) == before
    assert {r.id for r in scenario.leader.consensus.state.members} == before
    assert not sim.stats.partitions_lost


def test_an_outsider_cannot_tell_a_member_it_was_removed() -> None:
    scenario = formed()
    sim = scenario.sim
    for member in sim.live_members():
        sim._send(STRANGER.address, STRANGER, member.identity.address, member.identity.uuid, m.NotAMember(2**40))
    sim.run_until(sim.now_ms + 5_000)
    assert all(member.lifecycle is Lifecycle.ACTIVE for member in sim.live_members())
    assert not scenario.sim.stats.partitions_lost


def test_only_a_voter_fences_a_destination_against_a_commit() -> None:
    """A learner (it can never lead) asked a member whether it committed a migration, with a term
    far ahead: the member refused every commit from then on, and migrations to it never ended."""
    params = SimParams(members=4, partitions=16, ops=0, faults=(), drop_rate=0.0, duplicate_rate=0.0)
    scenario = Scenario(1, params)
    scenario.start()
    sim = scenario.sim
    voters = scenario.leader.consensus.raft.membership.voters
    learner = next(x for x in sim.live_members() if x.identity not in voters)
    member = next(x for x in sim.live_members() if x.identity in voters and not x.is_leader)
    record = MigrationRecord(
        migration_id="forged",
        partition_id=0,
        migration=Migration(
            source=None,
            source_current_index=-1,
            source_new_index=-1,
            destination=member.identity,
            destination_current_index=-1,
            destination_new_index=1,
        ),
        version_before=1,
    )
    query = m.MigrationOutcomeQuery(record, 2**40)
    sim._send(learner.identity.address, learner.identity, member.identity.address, member.identity.uuid, query)
    sim.run_until(sim.now_ms + 1_000)
    assert member.migrations._fence_term < 2**40


def test_a_bootstrap_from_a_process_it_never_found_does_not_found_a_cluster() -> None:
    params = SimParams(members=1, partitions=16, ops=0, faults=(), drop_rate=0.0, duplicate_rate=0.0)
    scenario = Scenario(1, params)
    sim = scenario.sim
    (address,) = sim.reserve_addresses(1)
    sim.start_member(address)
    sim.run_until(sim.now_ms + 500)
    member = sim.nodes[address].member
    bootstrap = m.Bootstrap((MemberRecord(member.identity),), ())
    sim._send("evil-client:1", None, address, None, bootstrap)
    sim._send(STRANGER.address, STRANGER, address, None, m.Bootstrap((MemberRecord(member.identity),), (STRANGER,)))
    sim.run_until(sim.now_ms + 1_000)
    assert member.lifecycle is Lifecycle.DISCOVERING
    assert not member.consensus.has_state


def test_a_join_request_counts_only_from_the_process_it_names() -> None:
    """Found by an outside tester: a client session (no identity) sent JoinRequests naming
    phantom members, and the leader added them."""
    scenario = formed()
    leader = scenario.leader
    phantom = MemberId("efefefef-0000-4000-8000-000000000009", "127.0.0.1:1")
    request = m.JoinRequest(phantom, settings_digest=leader.config.settings_digest)
    for sender in (None, scenario.sim.live_members()[1].identity):
        leader.handle(scenario.sim.now_ms, Receive("client-1", sender, None, request))
    scenario.sim.run_until(scenario.sim.now_ms + 2_000)
    assert not leader.consensus.state.is_member(phantom)
    assert phantom not in leader.membership.joiners


def test_a_cluster_at_its_member_limit_turns_a_new_joiner_away(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by an outside tester: nothing stopped a 1,001st member, whose member list the codec's
    bounds would then refuse in every snapshot."""
    from shardgrid.core import limits

    scenario = formed()
    monkeypatch.setattr(limits, "MAX_MEMBER_COUNT", 3)
    leader = scenario.leader
    newcomer = MemberId("abababab-0000-4000-8000-000000000009", "127.0.0.1:5799")
    effects = leader.handle(
        scenario.sim.now_ms,
        Receive(
            newcomer.address, newcomer, None, m.JoinRequest(newcomer, settings_digest=leader.config.settings_digest)
        ),
    )
    (rejected,) = [e.message for e in effects if isinstance(e, SendToAddress) and isinstance(e.message, m.JoinRejected)]
    assert "3 members" in rejected.reason
    # A restart at a member's address replaces it: it is not turned away.
    restarted = MemberId("cdcdcdcd-0000-4000-8000-000000000009", scenario.sim.live_members()[1].identity.address)
    effects = leader.handle(
        scenario.sim.now_ms,
        Receive(
            restarted.address, restarted, None, m.JoinRequest(restarted, settings_digest=leader.config.settings_digest)
        ),
    )
    assert not [e for e in effects if isinstance(e, SendToAddress) and isinstance(e.message, m.JoinRejected)]


def test_a_process_with_other_replication_settings_neither_joins_nor_founds() -> None:
    """Found by review: nothing checked that members share the map configuration; one that
    disagreed would keep or drop copies the others do not."""
    from shardgrid.core.config import MapConfig

    scenario = formed()
    sim = scenario.sim
    other = replace(sim.config, maps=(("m", MapConfig(backup_count=2)),))
    assert other.settings_digest != sim.config.settings_digest
    sim.config = other
    address = sim.start_member()
    sim.run_until(sim.now_ms + 10_000)
    stranger = sim.nodes[address].member
    assert stranger.lifecycle is Lifecycle.DISCOVERING
    assert "settings differ" in stranger.discovery.rejected_reason
    assert stranger.identity not in {r.id for r in scenario.leader.consensus.state.members}


def test_joiners_asking_together_at_the_limit_are_admitted_only_up_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by review: the limit counted neither admissions on their way through the log nor
    several incarnations at one address; past it, the leader's planner raised."""
    from shardgrid.core import limits

    scenario = formed()
    sim = scenario.sim
    monkeypatch.setattr(limits, "MAX_MEMBER_COUNT", 4)
    leader = scenario.leader
    digest = leader.config.settings_digest
    for i in range(3):
        joiner = MemberId(f"abababab-0000-4000-8000-00000000001{i}", f"127.0.0.1:58{i:02d}")
        sim._send(joiner.address, joiner, leader.identity.address, None, m.JoinRequest(joiner, settings_digest=digest))
    # Two incarnations at a crashed member's address: only the newer one may replace it.
    victim = next(x for x in sim.live_members() if x is not leader)
    sim.crash(victim.identity.address)
    for i in range(2):
        again = MemberId(f"cdcdcdcd-0000-4000-8000-00000000002{i}", victim.identity.address)
        sim._send(again.address, again, leader.identity.address, None, m.JoinRequest(again, settings_digest=digest))
    most, most_at_address = 0, 0
    for _ in range(75):  # every 200 ms for 15 s: the silent joiners are removed after a while
        sim.run_until(sim.now_ms + 200)
        members = scenario.leader.consensus.state.members
        most = max(most, len(members))
        most_at_address = max(most_at_address, sum(1 for r in members if r.id.address == victim.identity.address))
    assert most == 4
    assert most_at_address == 1
