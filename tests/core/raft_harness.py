"""A small deterministic network of ``RaftNode``s for the Raft tests: latency, loss, duplication,
partitions, crashes, restarts from each server's disk, configuration changes, and checks of Raft's
safety properties after every event. Kept apart from the member simulator so that Raft is tested
on its own.

Each server has a disk (the simulator's ``SimDisk``) with its Raft file, framed and read as a
member's is (``raft_disk``; the toy commands and states here are pickled, where a member's go
through its codec): after every step its ``take_write`` is appended and synced
before any of its messages is sent, as the runtime does it. With ``torn_rate``, a server now and
then crashes at that moment instead: the write is lost or torn, and the messages never leave."""

from __future__ import annotations

import heapq
import pickle
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shardgrid.core.identity import MemberId
from shardgrid.core.raft import ConfChange, Membership, RaftNode, RaftSettings, Snapshot
from shardgrid.core.raft.storage import RaftWrite
from shardgrid.core.raft_disk import load_raft, raft_record, storage_record
from shardgrid.sim.disk import SimDisk

RAFT_FILE = "raft"


def _encode(write: RaftWrite) -> bytes:
    return pickle.dumps(write)


def _decode(payload: bytes) -> RaftWrite:
    return pickle.loads(payload)  # the test's own file


REWRITE_ABOVE_BYTES = 20_000  # a compaction rewrites a Raft file past this

SETTINGS = RaftSettings(election_timeout_ms=300, heartbeat_interval_ms=50, max_append_entries=8, max_unacked_entries=32)
TICK_MS = 10


def replica(i: int) -> MemberId:
    return MemberId(f"{i:08d}-0000-4000-8000-000000000000", f"127.0.0.1:{5700 + i}")


class SafetyViolation(AssertionError):
    pass


@dataclass
class Cluster:
    seed: int
    drop_rate: float = 0.0
    duplicate_rate: float = 0.0
    max_latency_ms: int = 10
    torn_rate: float = 0.0  # the chance that a server crashes as it writes a step to its disk
    rng: random.Random = field(init=False)
    now_ms: int = 0
    nodes: dict[MemberId, RaftNode] = field(default_factory=dict)
    alive: set[MemberId] = field(default_factory=set)
    applied: dict[MemberId, list[tuple[int, int, Any]]] = field(default_factory=dict)
    committed: dict[int, tuple[int, Any]] = field(default_factory=dict)  # index -> (term, command)
    leaders_by_term: dict[int, MemberId] = field(default_factory=dict)
    groups: dict[MemberId, int] = field(default_factory=dict)
    cut_links: set[frozenset[MemberId]] = field(default_factory=set)  # pairs that cannot reach each other
    queue: list[tuple[int, int, str, Any]] = field(default_factory=list)
    counter: int = 0
    next_id: int = 0
    disks: dict[MemberId, SimDisk] = field(default_factory=dict)
    torn_crashes: int = 0
    restarts: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    # --- building --------------------------------------------------------------------------------

    def bootstrap(self, voters: int, learners: int = 0) -> list[MemberId]:
        members = [self._new_identity() for _ in range(voters + learners)]
        membership = Membership.of(members[:voters], members[voters:])
        for member in members:
            self._add_node(member, Snapshot(0, 0, membership, ()))
        return members

    def start_fresh(self) -> MemberId:
        """A server that is not in any configuration yet (it waits to be added)."""
        identity = self._new_identity()
        self._add_node(identity, None)
        return identity

    def _new_identity(self) -> MemberId:
        self.next_id += 1
        return replica(self.next_id)

    def _add_node(self, identity: MemberId, snapshot: Snapshot | None) -> None:
        node = RaftNode(identity, SETTINGS, random.Random(self.rng.getrandbits(32)), snapshot, self.now_ms)
        self.disks[identity] = SimDisk()
        self._run_node(identity, node)

    def _run_node(self, identity: MemberId, node: RaftNode) -> None:
        self.nodes[identity] = node
        self.alive.add(identity)
        self.applied[identity] = []
        self._flush(node, may_tear=False)  # a bootstrap snapshot reaches the disk first
        self._schedule(self.now_ms + self.rng.randint(1, TICK_MS), "tick", identity)

    # --- faults ----------------------------------------------------------------------------------

    def crash(self, identity: MemberId) -> None:
        self.alive.discard(identity)

    def restart(self, identity: MemberId) -> None:
        """The crashed server starts again from what its disk holds."""
        disk = self.disks[identity]
        storage, scan = load_raft(disk.durable(RAFT_FILE), decode=_decode)
        if scan.torn_bytes:
            disk.truncate(RAFT_FILE, scan.valid_bytes)
        node = RaftNode.restored(identity, SETTINGS, random.Random(self.rng.getrandbits(32)), storage, self.now_ms)
        self.restarts += 1
        self._run_node(identity, node)
        if identity in self.alive:
            self._after(identity)  # what its disk says is committed, applied at once

    def split(self, *sides: list[MemberId]) -> None:
        self.groups = {member: number for number, side in enumerate(sides) for member in side}

    def heal(self) -> None:
        self.groups = {}

    def split_at_random(self, rng: random.Random) -> None:
        """The live servers in two sides, the smaller of at most half of them."""
        alive = sorted(self.alive)
        rng.shuffle(alive)
        cut = rng.randint(1, max(1, len(alive) // 2))
        self.split(alive[:cut], alive[cut:])

    # --- driving ---------------------------------------------------------------------------------

    def leader(self) -> RaftNode | None:
        leaders = [n for i, n in self.nodes.items() if i in self.alive and n.is_leader]
        return max(leaders, key=lambda n: n.term) if leaders else None

    def propose(self, command: Any = None, change: ConfChange | None = None) -> int | None:
        leader = self.leader()
        if leader is None:
            return None
        index = leader.propose(command, change)
        self._flush(leader)
        return index

    def run_for(self, duration_ms: int) -> None:
        self.run_until(lambda: False, duration_ms)

    def run_until(self, condition: Any, limit_ms: int) -> bool:
        deadline = self.now_ms + limit_ms
        while self.queue and self.queue[0][0] <= deadline:
            if condition():
                return True
            time_ms, _, kind, payload = heapq.heappop(self.queue)
            self.now_ms = time_ms
            if kind == "tick":
                if payload in self.alive:
                    self.nodes[payload].tick(self.now_ms)
                    self._after(payload)
                    self._schedule(self.now_ms + TICK_MS, "tick", payload)
            else:
                target, sender, message = payload
                if target in self.alive:
                    self.nodes[target].step(self.now_ms, sender, message)
                    self._after(target)
        self.now_ms = max(self.now_ms, deadline)
        return bool(condition())

    def _after(self, identity: MemberId) -> None:
        node = self.nodes[identity]
        self._flush(node)
        if identity not in self.alive:
            return  # it crashed writing this step: nothing of it was applied or seen
        ready = node.take_ready()
        log = self.applied[identity]
        if ready.snapshot is not None:
            log.clear()
            log.extend(ready.snapshot.state)
        for entry in ready.entries:
            log.append((entry.index, entry.term, entry.command))
            known = self.committed.setdefault(entry.index, (entry.term, entry.command))
            if known != (entry.term, entry.command):
                raise SafetyViolation(f"{identity} applied {entry.index}={entry.term, entry.command}, others {known}")
        if node.is_leader:
            holder = self.leaders_by_term.setdefault(node.term, identity)
            if holder != identity:
                raise SafetyViolation(f"two leaders in term {node.term}: {holder} and {identity}")
        self._check_leases()

    def _check_leases(self) -> None:
        holding = [
            n for i, n in self.nodes.items() if i in self.alive and n.is_leader and n.leader_lease_until() > self.now_ms
        ]
        if len(holding) > 1:
            raise SafetyViolation(f"t={self.now_ms}: {len(holding)} leaders hold a lease at once")
        if holding:
            newest = max(n.term for i, n in self.nodes.items() if i in self.alive and n.is_leader)
            if holding[0].term != newest:
                raise SafetyViolation(f"t={self.now_ms}: a leased leader of term {holding[0].term} < {newest}")

    def _flush(self, node: RaftNode, may_tear: bool = True) -> None:
        write = node.take_write()
        if write is not None:
            disk = self.disks[node.identity]
            disk.append(RAFT_FILE, raft_record(write, _encode))
            # Not the bootstrap's write: a cluster whose founders all lost it never formed (it
            # would be founded again), and the runs would stop with no leader (found by an
            # outside tester at seed 1974).
            if may_tear and self.torn_rate and self.rng.random() < self.torn_rate:
                self.torn_crashes += 1
                disk.crash(self.rng, tear=True)
                self.crash(node.identity)
                node.take_messages()
                return
            disk.sync()
        for target, message in node.take_messages():
            source, destination = node.identity, target
            if self.groups and self.groups.get(source, -1) != self.groups.get(destination, -1):
                continue
            if frozenset((source, destination)) in self.cut_links:
                continue
            if self.rng.random() < self.drop_rate:
                continue
            copies = 2 if self.rng.random() < self.duplicate_rate else 1
            for _ in range(copies):
                latency = self.rng.randint(1, self.max_latency_ms)
                self._schedule(self.now_ms + latency, "deliver", (destination, source, message))

    def _schedule(self, time_ms: int, kind: str, payload: Any) -> None:
        self.counter += 1
        heapq.heappush(self.queue, (time_ms, self.counter, kind, payload))

    def compact_everywhere(self) -> None:
        """Every live node snapshots what it applied (the snapshot's state is its applied list)."""
        for identity in sorted(self.alive):
            node = self.nodes[identity]
            if node.applied_index > node.log.snapshot_index:
                node.compact(node.applied_index, tuple(self.applied[identity]))
                self._flush(node)
                disk = self.disks[identity]
                if identity in self.alive and len(disk.read(RAFT_FILE)) > REWRITE_ABOVE_BYTES:
                    storage, _ = load_raft(disk.read(RAFT_FILE), decode=_decode)
                    disk.replace(RAFT_FILE, storage_record(storage, _encode))
                    disk.sync()


def run_with_faults(
    cluster: Cluster,
    rng: random.Random,
    duration_ms: int,
    first_fault_ms: int,
    fault_gap_ms: tuple[int, int],
    fault: Callable[[], None],
) -> None:
    """Proposals every few milliseconds until ``duration_ms``, and ``fault()`` from ``first_fault_ms``
    on, each after a gap drawn from ``fault_gap_ms``."""
    proposals = 0
    next_fault = first_fault_ms
    while cluster.now_ms < duration_ms:
        cluster.run_for(rng.randint(5, 40))
        if cluster.propose(f"p{proposals}") is not None:
            proposals += 1
        if cluster.now_ms < next_fault:
            continue
        next_fault = cluster.now_ms + rng.randint(*fault_gap_ms)
        fault()
