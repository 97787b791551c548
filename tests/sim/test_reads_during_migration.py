"""Reads of a partition while its owner streams it to a new member (seed 002's stale reads)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shardgrid.core import messages as m
from shardgrid.core.effects import ReplyToClient
from shardgrid.core.hashing import partition_id_of_serialized
from shardgrid.core.inputs import Receive
from shardgrid.core.member import Member
from shardgrid.sim.scenario import Scenario
from shardgrid.sim.vopr import SimParams
from tests.wire import codes, map_request


def _key_of(pid: int, partitions: int) -> bytes:
    return next(k for k in (b"key-%d" % i for i in range(100_000)) if partition_id_of_serialized(k, partitions) == pid)


@pytest.mark.parametrize(("stale_read_disabled", "expected"), [(False, m.ReplyCode.OK), (True, m.ReplyCode.MIGRATING)])
def test_a_read_while_the_owner_streams_the_partition(stale_read_disabled: bool, expected: m.ReplyCode) -> None:
    params = SimParams(members=2, partitions=31, ops=0, faults=(), drop_rate=0.0, duplicate_rate=0.0)
    scenario = Scenario(3, params)
    scenario.sim.config = replace(scenario.sim.config, stale_read_disabled=stale_read_disabled)
    scenario.start()
    sim = scenario.sim
    sim.start_member()  # a third member: partitions start moving to it

    def sending() -> tuple[Member, int] | None:
        for member in sim.live_members():
            for sending in member.migrations.sending():
                if not sending.complete:
                    return member, sending.partition_id
        return None

    scenario.run_until(lambda: sending() is not None, limit_ms=30_000)
    found = sending()
    assert found is not None
    owner, pid = found
    request = map_request(call_id=1, kind=m.GET, map_name="m", keys=(_key_of(pid, 31),))
    effects = owner.handle(sim.now_ms, Receive("client", None, None, request))
    (reply,) = [e.message for e in effects if isinstance(e, ReplyToClient)]
    assert codes(reply) == (expected,)
    put = map_request(call_id=2, kind=m.PUT, map_name="m", keys=(_key_of(pid, 31),), values=(b"v",))
    effects = owner.handle(sim.now_ms, Receive("client", None, None, put))
    (reply,) = [e.message for e in effects if isinstance(e, ReplyToClient)]
    assert codes(reply) == (m.ReplyCode.MIGRATING,)  # writes wait either way
