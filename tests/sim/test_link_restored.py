"""A connection that comes back makes the member resend at once, not a backstop timer later.

Member processes run with a long ``transfer_resend_ms`` (over TCP a chunk is lost only with its
connection): what they lost in a broken connection must go again when the runtime reports the link
back (``LinkRestored``), which the simulator does when a split heals.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from shardgrid.core import messages as m
from shardgrid.core.effects import Send
from shardgrid.core.identity import MemberId
from shardgrid.core.inputs import LinkRestored
from shardgrid.core.member import Member
from shardgrid.sim.scenario import Scenario
from shardgrid.sim.vopr import SimParams

BACKSTOP_MS = 40_000


def _chunks_in_flight(seed: int) -> tuple[Scenario, list[str], str]:
    """Two members with data, and a third that joined and acknowledged some of the chunks now
    streaming to it (before its first acknowledgement, a short timer resends them)."""
    params = SimParams(members=2, partitions=31, ops=0, faults=(), drop_rate=0.0, duplicate_rate=0.0)
    scenario = Scenario(seed, params)
    sim = scenario.sim
    sim.config = replace(
        sim.config, transfer_resend_ms=BACKSTOP_MS, migration_timeout_ms=2 * BACKSTOP_MS, max_chunk_entries=2
    )
    first = scenario.start()
    client = sim.add_client(key_count=400)
    client.give(600)
    scenario.run_until(lambda: client.idle, limit_ms=60_000)  # what follows is the rebalance alone
    joiner = sim.start_member()
    # Polled finely: with a small cluster the window between the first acknowledgement and the
    # last chunk can be shorter than the scenario's 100 ms slice.
    deadline_ms = sim.now_ms + 30_000
    while not _sources_to(scenario, joiner):
        assert sim.now_ms < deadline_ms, "no chunks in flight to the joiner"
        sim.run_until(sim.now_ms + 10)
    return scenario, first, joiner


def _sources_to(scenario: Scenario, joiner: str) -> list[Member]:
    return [
        member
        for member in scenario.sim.live_members()
        for sending in member.migrations.sending()
        if sending.heard and not sending.complete and sending.destination.address == joiner
    ]


def _rebalance_cut_off_and_back(tell_members: bool) -> tuple[int, int]:
    """The joiner is cut off while chunks go to it, and the split heals; returns how long the
    cluster then took to be safe, and the chunks resent."""
    scenario, first, joiner = _chunks_in_flight(11)
    sim = scenario.sim
    sim.split([first, [joiner]])
    sim.run_until(sim.now_ms + 400)
    if tell_members:
        sim.heal()
    else:
        sim.network.heal()  # the split ends but nobody is told: only timers resend
    healed = sim.now_ms
    scenario.wait_safe(limit_ms=3 * BACKSTOP_MS)
    resent = sum(member.migrations.chunks_resent for member in sim.live_members())
    return sim.now_ms - healed, resent


def test_a_member_told_its_link_is_back_resends_at_once() -> None:
    told_ms, told_resent = _rebalance_cut_off_and_back(tell_members=True)
    untold_ms, _ = _rebalance_cut_off_and_back(tell_members=False)
    assert told_resent > 0
    assert told_ms < 5_000, told_ms
    assert untold_ms > BACKSTOP_MS / 2, untold_ms  # without the event only the backstop resends


def test_only_a_link_back_to_the_destination_resends_its_chunks() -> None:
    scenario, _, joiner = _chunks_in_flight(12)
    source = _sources_to(scenario, joiner)[0]
    destination = next(m for m in scenario.sim.live_members() if m.identity.address == joiner)
    stranger = MemberId("00000000-0000-4000-8000-000000000000", "127.0.0.1:1")
    now = scenario.sim.now_ms

    def chunks_after(peer: MemberId) -> list[Any]:
        effects = source.handle(now, LinkRestored(peer))
        return [
            e
            for e in effects
            if isinstance(e, Send) and isinstance(e.message, m.TransferChunk) and e.message.kind is m.MIGRATION
        ]

    assert chunks_after(stranger) == []
    assert chunks_after(source.identity) == []
    resent = chunks_after(destination.identity)
    assert resent
    assert {e.target for e in resent} == {destination.identity}


@pytest.mark.parametrize("value", [0, 60_000])
def test_a_backstop_outside_the_migration_timeout_is_refused(value: int) -> None:
    from shardgrid.core.config import MemberConfig
    from shardgrid.core.errors import ConfigError

    with pytest.raises(ConfigError, match="transfer_resend_ms"):
        MemberConfig(transfer_resend_ms=value, migration_timeout_ms=30_000).validate()
