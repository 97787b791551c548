"""Invariants: those checked after every step, the 'cluster is safe' predicate, and the verdict.

A violation raises ``SimulationFailure`` with what was seen, so a failing seed stops at the first
step that broke a rule and the seed replays it.
"""

from __future__ import annotations

from shardgrid.core.member import Member
from shardgrid.core.placement import replica_count_for
from shardgrid.sim.cluster import Simulation


class SimulationFailure(AssertionError):
    """A simulated run broke an invariant."""


def check_step(sim: Simulation, address: str) -> None:
    """After every event: the master's migrations respect the parallel bound, one per partition."""
    member = sim.nodes[address].member
    if not member.is_master:
        return
    limit = member.config.max_parallel_migrations
    for participant, load in member.in_flight_load().items():
        if load > limit:
            raise SimulationFailure(f"t={sim.now_ms}: {participant} in {load} migrations, limit {limit}")
    for pid, flight in member.in_flight.items():
        if flight.record.partition_id != pid:
            raise SimulationFailure(f"t={sim.now_ms}: in-flight migration filed under partition {pid}")


def unsafe_reason(sim: Simulation) -> str:
    """Why the cluster is not safe yet, or '' when it is (the end state every check needs)."""
    members = sim.live_members()
    if any(node.paused for node in sim.nodes.values() if node.alive):
        return "a member is paused"
    if sim.network.groups:
        return "the network is split"  # the cut-off side looks healthy until the detector fires
    if not members or not all(m.joined for m in members):
        return "a member has not joined"
    masters = [m for m in members if m.is_master]
    if len(masters) != 1:
        return f"{len(masters)} masters"
    master = masters[0]
    listed = set(master.member_replicas())
    if {m.identity for m in members} != listed:
        return "member lists differ from the live members"
    if any(m.member_list_version != master.member_list_version for m in members):
        return "member list versions differ"
    if master.recovery is not None or master.promotions or master.in_flight or master.needs_rebalance:
        return "the master is still repairing or migrating"
    if any(master.pending.values()):
        return "migrations are pending"
    if master.table is None:
        return "" if all(m.table is None for m in members) else "a member has a table the master lacks"
    stamp = master.table.stamp
    for member in members:
        if member.table is None or member.table.stamp != stamp:
            return f"{member.identity} has another table"
        if member.active or member.outgoing_syncs or member.incoming_syncs or member.pending_writes:
            return f"{member.identity} has migrations, syncs or writes in progress"
    data_members = [e.replica for e in master.members if not e.lite]
    wanted = replica_count_for(len(data_members), len(data_members), master.config.backup_count)
    by_identity = {m.identity: m for m in members}
    for pid, slots in enumerate(master.table.replicas):
        holders = [r for r in slots if r is not None]
        if len(holders) != wanted or slots[0] is None:
            return f"partition {pid} has {len(holders)} of {wanted} replicas"
        owner_data = by_identity[slots[0]].stores.get(pid)
        owner_sequence = owner_data.sequence if owner_data else 0
        for backup in holders[1:]:
            data = by_identity[backup].stores.get(pid)
            if (data.sequence if data else 0) != owner_sequence:
                return f"partition {pid}: backup {backup} is behind its owner"
    return ""


def final_violations(sim: Simulation) -> list[str]:
    """On a safe cluster: no lost acknowledged write, no phantom read, replicas equal to owners."""
    problems: list[str] = list(sim.ledger.phantom_reads)
    master = sim.master()
    if master is None or master.table is None:
        return [*problems, "no master with a table at the end"]
    by_identity: dict[object, Member] = {m.identity: m for m in sim.live_members()}
    from shardgrid.core.hashing import partition_id_of_serialized
    from shardgrid.sim.workload import MAP_NAME

    for key in sorted(sim.ledger.writes):
        pid = partition_id_of_serialized(key, master.config.partition_count)
        if pid in sim.stats.partitions_lost:
            continue  # lost with every replica: reported by a PartitionLost event, checked elsewhere
        owner = master.table.owner(pid)
        data = by_identity[owner].stores.get(pid) if owner in by_identity else None
        value = data.maps.get(MAP_NAME, {}).get(key) if data else None
        allowed = sim.ledger.allowed_final_values(key)
        if value not in allowed:
            problems.append(f"key {key!r} in partition {pid} holds {value!r}; allowed {sorted(map(repr, allowed))}")
    for pid, slots in enumerate(master.table.replicas):
        holders = [r for r in slots if r is not None]
        if not holders:
            continue
        reference = by_identity[holders[0]].stores.get(pid)
        for backup in holders[1:]:
            data = by_identity[backup].stores.get(pid)
            if (reference.maps if reference else {}) != (data.maps if data else {}):
                problems.append(f"partition {pid}: backup {backup} differs from its owner")
    for member in sim.live_members():
        extra = sorted(pid for pid in member.stores if master.table.replicas[pid].count(member.identity) == 0)
        if extra:
            problems.append(f"{member.identity} keeps data of partitions it does not replicate: {extra[:5]}")
    return problems
