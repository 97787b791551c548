"""Invariants: those checked after every step, the 'cluster is safe' predicate, and the verdict.

A violation raises ``SimulationFailure`` with what was seen, so a failing seed stops at the first
step that broke a rule and the seed replays it.

After every step of a member:
- at most one leader per term;
- every member applies the same entry at every log index (Raft's state machine safety);
- every member holding the log lists the same members at every applied index, the founding
  snapshot's index 0 included (two foundings grown into one log agree on every entry and still
  diverge: found by an outside tester, the second founder's list lacked the first founder);
- no member takes part in more than ``max_parallel_migrations`` migrations, as the leader counts
  them and as the member itself holds them.
At every write a member acknowledges: no other member would take a write to that partition at
that moment (leases keep a cut-off owner from serving alongside its successor).
"""

from __future__ import annotations

from typing import Any

from shardgrid.core.disk_records import scan_records
from shardgrid.core.effects import DiskFile
from shardgrid.core.hashing import partition_id_of_serialized
from shardgrid.core.member import Member
from shardgrid.core.messages import MapReply, ReplyCode
from shardgrid.core.placement import replica_count_for
from shardgrid.core.replica_disk import load_replicas
from shardgrid.core.store import ReplicaView
from shardgrid.sim.cluster import Simulation
from shardgrid.sim.workload import ASYNC_MAP_NAME, CACHE_MAP_NAME, IDLE_MAP_NAME, MAP_NAME, TTL_MAP_NAME

# How long after its expiry an entry may still be held by a replica of a settled cluster.
EXPIRED_GRACE_MS = 10_000
WORKLOAD_MAPS = (MAP_NAME, ASYNC_MAP_NAME, CACHE_MAP_NAME, TTL_MAP_NAME, IDLE_MAP_NAME)


class SimulationFailure(AssertionError):
    """A simulated run broke an invariant."""


class LogChecker:
    """Remembers every applied entry's term and command by index, across all members."""

    def __init__(self) -> None:
        self.applied: dict[int, tuple[int, Any]] = {}
        self.checked: dict[str, int] = {}  # member uuid -> highest index compared
        self.leaders: dict[int, str] = {}  # term -> leader uuid
        self._load_checked: dict[str, tuple[int, int]] = {}  # leader uuid -> (state id, proposals)
        self._configurations: dict[str, int] = {}  # leader uuid -> index of the last configuration seen
        self.member_lists: dict[int, tuple[str, Any]] = {}  # applied index -> (first member's uuid, its list)
        self._lists_checked: dict[str, int] = {}  # member uuid -> applied index whose list was compared

    def __call__(self, sim: Simulation, address: str) -> None:
        member = sim.nodes[address].member
        consensus = member.consensus
        raft = consensus.raft
        me = member.identity.uuid
        if raft.is_leader:
            holder = self.leaders.setdefault(raft.term, me)
            if holder != me:
                raise SimulationFailure(f"t={sim.now_ms}: two leaders in term {raft.term}: {holder[:8]} and {me[:8]}")
            self._check_configuration(sim, member)
        log = raft.log
        start = max(self.checked.get(me, 0), log.snapshot_index) + 1
        for index in range(start, consensus.applied_index + 1):
            entry = log.entry(index)
            known = self.applied.setdefault(index, (entry.term, entry.command))
            if known != (entry.term, entry.command):
                raise SimulationFailure(
                    f"t={sim.now_ms}: {member.identity} applied entry {index} of term {entry.term}, "
                    f"another member applied one of term {known[0]} there"
                )
        self.checked[me] = max(self.checked.get(me, 0), consensus.applied_index)
        if consensus.has_state and self._lists_checked.get(me) != consensus.applied_index:
            self._check_member_list(sim, member)
        limit = member.config.max_parallel_migrations
        held = len(member.migrations.partitions_involved())
        if held > limit:
            raise SimulationFailure(f"t={sim.now_ms}: {member.identity} holds {held} migrations, limit {limit}")
        if raft.is_leader:
            version = (id(consensus.state), len(member.migration_leader._proposed_starts))
            if self._load_checked.get(me) == version:
                return
            self._load_checked[me] = version
            for participant, load in member.migration_leader.in_flight_load().items():
                if load > limit:
                    raise SimulationFailure(f"t={sim.now_ms}: {participant} in {load} migrations, limit {limit}")

    def _check_member_list(self, sim: Simulation, member: Member) -> None:
        """Members that applied the log up to one index list the same members there."""
        consensus = member.consensus
        index = consensus.applied_index
        me = member.identity.uuid
        self._lists_checked[me] = index
        members = consensus.state.members
        first, known = self.member_lists.setdefault(index, (me, members))
        if known != members:
            raise SimulationFailure(
                f"t={sim.now_ms}: {member.identity} lists members {_addresses(members)} at index {index}, "
                f"member {first[:8]} listed {_addresses(known)} there"
            )

    def _check_configuration(self, sim: Simulation, member: Member) -> None:
        """A configuration this leader just made must have a live majority of voters: otherwise
        the log could never commit again (members crash on their own, not at the leader's call)."""
        raft = member.consensus.raft
        index = raft.log.membership_index()
        me = member.identity.uuid
        if self._configurations.get(me, -1) == index:
            return
        first_seen = me not in self._configurations
        self._configurations[me] = index
        if first_seen or index <= raft.term_start_index:
            return  # inherited, not made by this leader
        alive = {n.member.identity for n in sim.nodes.values() if n.alive and not n.paused}
        voters = raft.membership.voters
        living = sum(1 for v in voters if v in alive)
        if living * 2 <= len(voters):
            raise SimulationFailure(
                f"t={sim.now_ms}: {member.identity} made a configuration with {living} of {len(voters)} voters alive"
            )


def _addresses(records: Any) -> list[str]:
    return [f"{r.id.address}/{r.id.uuid[:8]}" for r in records]


def check_single_writer(sim: Simulation, address: str, client_address: str, reply: Any) -> None:
    """A member acknowledged a write: nobody else may have been taking writes to that partition."""
    client = sim.clients.get(client_address)
    call = client.call if client is not None else None
    if call is None or call.write is None or not isinstance(reply, MapReply) or reply.call_id != call.call_id:
        return
    if reply.codes[:1] != bytes([ReplyCode.OK]):
        return
    for other_address, node in sim.nodes.items():
        if (
            other_address != address
            and node.alive
            and node.member.serves_writes(call.partition_id, sim.now_ms, call.map_name)
        ):
            raise SimulationFailure(
                f"t={sim.now_ms}: {address} acknowledged a write to partition {call.partition_id} "
                f"while {node.member.identity} also takes writes to it"
            )


def install_checks(sim: Simulation) -> None:
    sim.checks.append(LogChecker())
    sim.reply_checks.append(check_single_writer)


def unsafe_reason(sim: Simulation) -> str:
    """Why the cluster is not safe yet, or '' when it is (the end state every check needs)."""
    members = sim.live_members()
    if any(node.paused for node in sim.nodes.values() if node.alive):
        return "a member is paused"
    if sim.network.groups:
        return "the network is split"  # the cut-off side looks healthy until its lease runs out
    if not members or not all(m.joined for m in members):
        return "a member has not joined"
    leaders = [m for m in members if m.is_leader]
    if len(leaders) != 1:
        return f"{len(leaders)} leaders"
    leader = leaders[0]
    consensus = leader.consensus
    if not consensus.leader_ready:
        return "the leader is catching up with the log"
    state = consensus.state
    if {m.identity for m in members} != set(state.member_ids):
        return "member lists differ from the live members"
    if any(m.consensus.applied_index != consensus.applied_index for m in members):
        return "a member has not applied the whole log"
    if any(m.consensus.state.members != state.members for m in members):
        return "members applied the whole log and list different members"
    if leader.membership.joiners or any(r.leaving for r in state.members):
        return "members are joining or leaving"
    data_members = [r.id for r in state.members if not r.lite]
    if len(consensus.raft.membership.voters) != leader.config.voter_target(len(data_members)):
        return "the voters are being adjusted"
    if state.migrations or not leader.migration_leader.idle:
        return "the leader is migrating"
    if state.table is None:
        return "" if not sim.ledger.writes else "the partitions are not assigned"
    for member in members:
        if member.migrations.partitions_involved() or member.data.busy():
            return f"{member.identity} has migrations, syncs or writes in progress"
    wanted = replica_count_for(len(data_members), len(data_members), leader.config.table_backup_count)
    by_identity = {m.identity: m for m in members}
    for pid, slots in enumerate(state.table.replicas):
        holders = [r for r in slots if r is not None]
        if len(holders) != wanted or slots[0] is None:
            return f"partition {pid} has {len(holders)} of {wanted} replicas"
        owner_sequence = by_identity[slots[0]].data.sequence_of(pid)
        for backup in holders[1:]:
            if by_identity[backup].data.sequence_of(pid) != owner_sequence:
                return f"partition {pid}: backup {backup} is behind its owner"
    return ""


def final_violations(sim: Simulation) -> list[str]:
    """On a safe cluster: no lost acknowledged write, no stale read, replicas equal to owners."""
    count = sim.config.partition_count
    problems = [
        why
        for key, why in sim.ledger.read_violations
        if partition_id_of_serialized(key, count) not in sim.stats.partitions_lost  # reported lost
    ]
    leader = sim.leader()
    state = leader.consensus.state if leader is not None else None
    if leader is None or state is None or state.table is None:
        return [*problems, "no leader with a table at the end"]
    table = state.table
    by_identity: dict[object, Member] = {m.identity: m for m in sim.live_members()}
    views: dict[tuple[object, int], ReplicaView | None] = {}
    for key in sorted(sim.ledger.writes):
        pid = partition_id_of_serialized(key, leader.config.partition_count)
        if pid in sim.stats.partitions_lost:
            continue  # lost with every replica: reported by a PartitionLost event, checked elsewhere
        owner = table.owner(pid)
        if owner not in by_identity:
            data = None
        elif (owner, pid) in views:
            data = views[(owner, pid)]
        else:
            data = views[(owner, pid)] = by_identity[owner].data.view(pid)
        # A key is written in one map only (the workload's ledger, its async twin or the cache).
        value = next((v for name in WORKLOAD_MAPS if (v := data.get(name, key)) is not None), None) if data else None
        allowed = sim.ledger.allowed_final_values(key)
        if value not in allowed:
            problems.append(f"key {key!r} in partition {pid} holds {value!r}; allowed {sorted(map(repr, allowed))}")
    for pid, slots in enumerate(table.replicas):
        holders = [r for r in slots if r is not None]
        if not holders:
            continue
        reference = by_identity[holders[0]].data.view(pid)
        config = leader.config
        for index, backup in enumerate(slots[1:], start=1):
            if backup is None:
                continue
            data = by_identity[backup].data.view(pid)
            # A backup keeps a copy of exactly the maps whose backup count reaches its slot, with
            # the same values and expiry times.
            expected = {
                name: records
                for name, records in (reference.entries if reference else {}).items()
                if config.keeps_copy(name, index)
            }
            if expected != (data.entries if data else {}):
                problems.append(f"partition {pid}: backup {backup} at index {index} differs from its owner")
            elif reference is not None and data is not None:
                # Equal copies carry equal versions: a later sync of just the maps changed since
                # relies on them.
                versions = {name: reference.versions[name] for name in expected}
                if versions != {name: data.versions[name] for name in expected}:
                    problems.append(f"partition {pid}: backup {backup} holds other map versions than its owner")
    for member in sim.live_members():
        # The owners' active expiry removes expired entries within a few ticks of their expiry,
        # and the removes reach the backups: on a settled cluster none is left much older.
        now_ms = member.ctx.records_ms
        for pid in member.data.held_partitions():
            view = member.data.view(pid)
            stale = [
                key
                for records in (view.entries.values() if view else ())
                for key, (_, expire_at_ms) in records.items()
                if expire_at_ms and expire_at_ms + EXPIRED_GRACE_MS < now_ms
            ]
            if stale:
                problems.append(
                    f"{member.identity} still holds {len(stale)} entries of partition {pid} that expired over "
                    f"{EXPIRED_GRACE_MS} ms ago (e.g. {stale[0]!r})"
                )
        extra = [pid for pid in member.data.held_partitions() if member.identity not in table.replicas[pid]]
        if extra:
            problems.append(f"{member.identity} keeps data of partitions it does not replicate: {extra[:5]}")
    for address in sorted(sim.disks):
        problems.extend(disk_differences(sim, address))
    return problems


def disk_differences(sim: Simulation, address: str) -> list[str]:
    """How a persistent member's disk, read back as a restart would read it, differs from the
    copies the member holds ('' for none): a change the data path did not tell its journal of."""
    node = sim.nodes[address]
    disk = sim.disks.get(address)
    if disk is None or not node.alive:
        return []
    member = node.member
    held = load_replicas(
        scan_records(disk.read(DiskFile.REPLICAS.value)), hash_seed=0, max_idle_ms=sim.config.max_idle_ms
    )
    # A member moved to another address holds its disk's copies apart until it is renamed.
    apart = member.data.held_apart() if member.moving else None
    in_memory_pids = set(apart) if apart is not None else set(member.data.held_partitions())
    problems = []
    for pid in sorted(set(held.copies) | in_memory_pids):
        on_disk = held.copies[pid].view() if pid in held.copies else None
        in_memory = apart.get(pid) if apart is not None else member.data.view(pid)
        if on_disk is None or in_memory is None:
            problems.append(
                f"{member.identity}: partition {pid} is {'only on disk' if in_memory is None else 'not on disk'}"
            )
        elif (on_disk.sequence, on_disk.lineage, on_disk.entries, on_disk.versions, on_disk.copy_index) != (
            in_memory.sequence,
            in_memory.lineage,
            in_memory.entries,
            in_memory.versions,
            in_memory.copy_index,
        ):
            problems.append(
                f"{member.identity}: partition {pid} on disk (sequence {on_disk.sequence}, lineage "
                f"{on_disk.lineage!r}) differs from its copy (sequence {in_memory.sequence}, "
                f"lineage {in_memory.lineage!r})"
            )
    return problems


def check_disk(sim: Simulation, address: str) -> None:
    """A per-step check for persistent runs (slow: it reads the whole file back every step)."""
    problems = disk_differences(sim, address)
    if problems:
        raise SimulationFailure(f"{sim.now_ms} ms: {problems[0]}")
