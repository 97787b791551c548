"""The simulated cluster: one virtual clock, an event queue, members, clients and faults.

Events are ordered by (time, insertion number), so two runs of one seed process the same events
in the same order. A crashed member's pending timers and messages die with its incarnation; a
paused member's events wait and are delivered, in order, when it resumes.
"""

from __future__ import annotations

import hashlib
import heapq
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shardgrid.core import codec
from shardgrid.core.call_policy import CallSettings
from shardgrid.core.config import MemberConfig
from shardgrid.core.disk_records import scan_records
from shardgrid.core.effects import (
    DiskFile,
    Emit,
    KeepIdentity,
    Persist,
    ReplyToClient,
    Send,
    SendToAddress,
    SetTimer,
    Stop,
)
from shardgrid.core.identity import MemberId
from shardgrid.core.inputs import LinkRestored, Receive, Start, StopSignalled, Synced, TimerFired
from shardgrid.core.member import Member
from shardgrid.core.member_disk import read_member_disk, read_moved_disk
from shardgrid.core.messages import AdminReply, AdminRequest, MapReply, ReplyCode, TableRequest
from shardgrid.sim.disk import SimDisk
from shardgrid.sim.network import Network, NetworkConfig
from shardgrid.sim.workload import ASYNC_MAP_NAME, CACHE_MAP_NAME, IDLE_MAP_NAME, TTL_MAP_NAME, Ledger, SimClient

FIRST_PORT = 5701
ADMIN_ADDRESS = "admin"
MAX_HELD_MESSAGES = 100_000  # what one split may hold; beyond it, as lost


@dataclass(slots=True, kw_only=True)
class Node:
    address: str
    member: Member
    incarnation: int
    alive: bool = True  # False once crashed or stopped
    stopped: bool = False  # shut down gracefully (or with the cluster), not crashed
    exit_code: int | None = None  # what its process would exit with, once its member stopped
    paused: bool = False
    held: list[tuple[str, Any]] = field(default_factory=list)  # events waiting for a resume
    # A persistent member's sends and replies waiting for its disk's sync (group commit), in order.
    unsynced_sends: list[Callable[[], None]] = field(default_factory=list)
    persisted: int = 0  # Persist effects carried out for this incarnation (what Synced counts)
    timed_sync: bool = False  # fsync = every_ms: a sync of writes that did not wait is on its way
    synced_ms: int = 0  # when its disk was last synced (or read back at its start)


@dataclass(slots=True, kw_only=True)
class Stats:
    events: int = 0
    messages_sent: int = 0
    messages_dropped: int = 0
    migrations_finished: int = 0
    migrations_failed: int = 0
    partitions_lost: set[int] = field(default_factory=set)
    crashes: int = 0
    restarts: int = 0
    joins: int = 0
    splits: int = 0
    pauses: int = 0
    stops: int = 0
    writes_refused_memory_full: int = 0  # keys of writes owners refused at max_memory_bytes
    writes_refused_disk_full: int = 0  # keys of writes owners refused for want of disk (DISK_FULL)
    disk_full_stops: int = 0  # members stopped by a write past their disk's size
    restored: int = 0  # members restarted as themselves from their disks
    syncs: int = 0


# The simulated wall clock at time 0 (2026-01-01T00:00:00Z): records' times are on it.
SIM_EPOCH_MS = 1_767_225_600_000


class Simulation:
    def __init__(
        self,
        seed: int,
        config: MemberConfig,
        network: NetworkConfig | None = None,
        *,
        encode_messages: bool = True,
        trace_events: bool = True,
        call_settings: CallSettings | None = None,
        attempt_timeout_ms: int = SimClient.ATTEMPT_TIMEOUT_MS,
        clock_skew_ms: int = 0,
        compare_and_set: bool = False,
    ) -> None:
        self.seed = seed
        # A persistent member's disk, per address: it outlives the member's crashes. A step's
        # sends wait for its writes' sync, ``disk_sync_ms`` later (a crash may come first).
        self.disks: dict[str, SimDisk] = {}
        self.disk_sync_ms = 1
        # Each disk's size (0: no limit): a member is told its free space with each sync, and a
        # write past it stops the member, as a process stops at a write its disk refuses (exit 74).
        self.disk_capacity_bytes = 0
        # Each member's record clock is off the simulated time by up to this much either way (its
        # own wall clock at start): an expiry or a record's times set by one owner are read by the
        # next on another clock.
        self.clock_skew_ms = clock_skew_ms
        self.attempt_timeout_ms = attempt_timeout_ms  # the workload clients' (SimClient)
        self.compare_and_set = compare_and_set  # the clients' writes include compare-and-sets
        # How the workload's clients treat answers (seed 001's call semantics, core.call_policy).
        self.call_settings = call_settings or CallSettings(
            operation_call_timeout_ms=10_000, fail_on_indeterminate_operation_state=True
        )
        self.rng = random.Random(seed)
        self.config = config
        self.network = Network(network or NetworkConfig(), random.Random(self.rng.getrandbits(64)))
        self.now_ms = 0
        self.queue: list[tuple[int, int, str, Any]] = []
        self.counter = 0
        self.nodes: dict[str, Node] = {}
        self.seed_addresses: tuple[str, ...] = ()
        self.clients: dict[str, SimClient] = {}
        self.ledger = Ledger()
        self.stats = Stats()
        self.events: list[tuple[int, str, Any]] = []  # (time, address, event) members emitted
        self.encode_messages = encode_messages
        self.trace_events = trace_events
        self._trace = hashlib.sha256()
        self.checks: list[Callable[[Simulation, str], None]] = []
        # Called for every reply a member sends a client: (simulation, member address, reply).
        self.reply_checks: list[Callable[[Simulation, str, str, Any], None]] = []
        self.held: list[tuple[str, Any]] = []  # messages a split holds until it heals (Network.hold_ms)
        # (client, member) connections the client found lost in the current split: it reset them
        # (as the smart client resets a connection it gives up on), so nothing it sent on them is
        # held for later, and what it sends to that member until the heal finds no connection.
        self._reset: set[tuple[str, str]] = set()
        self.admin_replies: dict[int, AdminReply] = {}
        self._admin_calls = 0
        # Scenario hooks: called after a member handled a delivered message (its address, the
        # sender's address, the message), and on every send (returning True drops the message).
        # They let a test crash a member at an exact step.
        self.after_delivery: list[Callable[[str, str, Any], None]] = []
        self.started_addresses: list[str] = []  # in start order: a schedule's m1, m2, ...
        self.drop_rules: list[Callable[[str, str, Any], bool]] = []
        self.next_port = FIRST_PORT

    # --- building the cluster ------------------------------------------------------------------

    def new_address(self) -> str:
        address = f"127.0.0.1:{self.next_port}"
        self.next_port += 1
        return address

    def reserve_addresses(self, count: int) -> list[str]:
        """Addresses for the first members, all of them in every member's seed list (as deployed)."""
        addresses = [self.new_address() for _ in range(count)]
        self.seed_addresses = (*self.seed_addresses, *(a for a in addresses if a not in self.seed_addresses))
        self.started_addresses.extend(a for a in addresses if a not in self.started_addresses)
        return addresses

    def start_member(
        self,
        address: str | None = None,
        lite: bool = False,
        seeds: tuple[str, ...] | None = None,
        *,
        as_itself: bool = False,
    ) -> str:
        """Start a member process (a new identity, no data) at ``address`` or a new address. It
        knows every address the cluster has used (as a deployment's member list does), or only
        ``seeds`` when given. With ``as_itself`` (a persistent member), it reads its disk and comes
        back as the member that left it, when the disk holds one."""
        address = address or self.new_address()
        if address not in self.seed_addresses:
            self.seed_addresses = (*self.seed_addresses, address)
        if address not in self.started_addresses:
            self.started_addresses.append(address)
        identity = MemberId(str(uuid.UUID(int=self.rng.getrandbits(128), version=4)), address)
        member_rng = random.Random(self.rng.getrandbits(64))
        previous = self.nodes.get(address)
        disk_state = None
        if self.config.persistent:
            disk = self.disks.setdefault(address, SimDisk())
            disk.restarted()
            kept = disk.identity
            if as_itself and kept is not None:
                files = {file: scan_records(disk.read(file.value)) for file in DiskFile}
                hash_seed = uuid.UUID(kept.uuid).int & (2**64 - 1)
                if kept.address != address:  # a directory brought to another address
                    disk_state = read_moved_disk(
                        files, kept, hash_seed=hash_seed, max_idle_ms=self.config.max_idle_ms, now_ms=self.now_ms
                    )
                else:
                    disk_state = read_member_disk(
                        files, hash_seed=hash_seed, max_idle_ms=self.config.max_idle_ms, now_ms=self.now_ms
                    )
                if disk_state is not None:
                    identity = MemberId(kept.uuid, address)
                    for file in DiskFile:  # the torn tails cut off, as the runtime does at open
                        disk.truncate(file.value, disk_state.file_bytes.get(file, 0))
                    self.stats.restored += 1
            if disk_state is None:
                disk.identity = identity  # a new member's file, written at its start
        known = seeds if seeds is not None else self.seed_addresses
        # The record clock: a fixed wall-clock start (2026-01-01), so a seed replays exactly.
        member = Member(
            identity,
            self.config,
            known,
            member_rng,
            lite=lite,
            hash_seed=uuid.UUID(identity.uuid).int & (2**64 - 1),
            clock_offset_ms=SIM_EPOCH_MS + self._skew_of(identity),
        )
        incarnation = previous.incarnation + 1 if previous else 1
        self.nodes[address] = Node(address=address, member=member, incarnation=incarnation, synced_ms=self.now_ms)
        if self.network.groups and address not in self.network.groups:
            self.network.groups[address] = 0  # a process started during a split is on its first side
        self._run_member(self.nodes[address], Start(disk_state))
        return address

    def _skew_of(self, identity: MemberId) -> int:
        """A member's clock skew, from its identity (no draw from the run's generator: a run
        without skew replays as before)."""
        if not self.clock_skew_ms:
            return 0
        return uuid.UUID(identity.uuid).int % (2 * self.clock_skew_ms + 1) - self.clock_skew_ms

    def add_client(self, key_count: int = 20) -> SimClient:
        name = f"client-{len(self.clients) + 1}"
        client = SimClient(
            name,
            random.Random(self.rng.getrandbits(64)),
            self.ledger,
            self.config.partition_count,
            key_count,
            use_async_map=self.config.map_config(ASYNC_MAP_NAME).async_backup_count > 0,
            settings=self.call_settings,
            use_cache_map=CACHE_MAP_NAME in self.config.serving_maps,
            attempt_timeout_ms=self.attempt_timeout_ms,
            use_ttl_map=self.config.map_config(TTL_MAP_NAME).time_to_live_seconds > 0,
            ttl_slack_ms=2 * self.clock_skew_ms,
            compare_and_set=self.compare_and_set,
            use_idle_map=self.config.map_config(IDLE_MAP_NAME).max_idle_seconds > 0,
        )
        self.clients[name] = client
        self._schedule(self.now_ms + 1, "client", name)
        return client

    # --- faults --------------------------------------------------------------------------------

    def crash(self, address: str, drop_in_flight: bool = False, keep_to: tuple[str, ...] = ()) -> None:
        """Kill the process; with ``drop_in_flight`` its messages still on the wire die too
        (except those to ``keep_to``), as when it crashes before its sends leave the machine."""
        node = self.nodes[address]
        node.alive = False
        node.held.clear()
        node.unsynced_sends.clear()  # never sent: the process died before its writes' sync
        if self.config.persistent and self.config.fsync != "always":
            self.ledger.lossy_crash(node.synced_ms, self.now_ms)
        disk = self.disks.get(address)
        if disk is not None:
            disk.crash(self.rng, tear=True)
        if drop_in_flight:
            self.queue = [
                item
                for item in self.queue
                if not (item[2] == "deliver" and item[3][1][0] == address and item[3][0] not in keep_to)
            ]
            heapq.heapify(self.queue)
        self.stats.crashes += 1
        self._record("crash", address)

    def restart(self, address: str, isolated: bool = False, *, as_itself: bool = False) -> None:
        """The process comes back at the same address with a new identity and no data, or with
        ``as_itself`` (a persistent member) from its disk; when ``isolated``, it comes back cut off
        from every other member (until ``heal``)."""
        self.stats.restarts += 1
        self._record("restart", (address, isolated, as_itself) if as_itself else (address, isolated))
        if isolated:
            self.isolate(address)
        self.start_member(address, as_itself=as_itself)

    def move(self, address: str) -> str:
        """A persistent member's process comes back at a new address with its disk (a host that
        took its volume over): its process there, if alive, is killed first. Returns the new address."""
        if self.nodes[address].alive:
            self.crash(address)
        new = self.new_address()
        self.disks[new] = self.disks.pop(address)
        self.stats.restarts += 1
        self._record("move", (address, new))
        self.start_member(new, as_itself=True)
        return new

    def isolate(self, address: str) -> None:
        """Cut ``address`` off from every member (clients still reach it)."""
        groups = {a: self.network.groups.get(a, 0) for a in self.nodes if a != address}
        groups[address] = max(groups.values(), default=0) + 1
        self.network.groups = groups
        self.stats.splits += 1
        self._record("isolate", address)

    def pause(self, address: str) -> None:
        self.nodes[address].paused = True
        self.stats.pauses += 1
        self._record("pause", address)

    def resume(self, address: str) -> None:
        node = self.nodes[address]
        if not node.paused:
            return
        node.paused = False
        self._record("resume", address)
        held, node.held = node.held, []
        for kind, payload in held:
            self._schedule(self.now_ms, kind, payload)

    def split(self, sides: list[list[str]], hold_ms: int = 0) -> None:
        """Cut ``sides`` (members' and clients' addresses) off from each other. With ``hold_ms``,
        what a client and a member send each other across the split is held, not lost, and
        arrives after the heal, up to ``hold_ms`` later: a kernel retransmitting a request its
        client gave up on (found by an outside tester: writes applied 12 to 53 s late)."""
        self.network.split(sides)
        self.network.hold_ms = hold_ms
        self.stats.splits += 1
        self._record("split", sides)
        members = self.member_addresses()
        for name in sorted(self.clients):
            if name in self.network.groups:
                lost = {a for a in self.nodes if self.network.cut(name, a)}
                # Found when a change elsewhere moved seed 19 of the late-writes search: a write
                # the client sent after its connection was lost, held and delivered after its
                # call had ended on that loss, landed over the client's next, acknowledged write.
                # A reset connection carries nothing more, and no new one opens across the split.
                self._reset.update((name, address) for address in lost)
                self.held = [
                    (target, envelope)
                    for target, envelope in self.held
                    if (envelope[0], target) not in self._reset and (target, envelope[0]) not in self._reset
                ]
                for address, message in self.clients[name].connection_lost(self.now_ms, lost, members):
                    self._send(name, None, address, None, message)

    def heal(self) -> None:
        """The split ends. As a member process would on reconnecting, each member is told, a
        latency later, that its links with the members it was cut off from are back; what a split
        held arrives, each message at its own time."""
        groups = self.network.groups
        hold_ms = self.network.hold_ms
        self.network.heal()
        self._reset = set()
        self._record("heal", None)
        held, self.held = self.held, []
        for target, envelope in held:
            delay = self.network.config.max_latency_ms + self.rng.randint(0, hold_ms)
            self._schedule(self.now_ms + delay, "deliver", (target, envelope))
        live = [node for node in self.nodes.values() if node.alive]
        for node in live:
            for peer in live:
                if peer is not node and groups.get(node.address, 0) != groups.get(peer.address, 0):
                    payload = (node.address, node.incarnation, peer.member.identity)
                    self._schedule(self.now_ms + self.network.config.max_latency_ms, "link", payload)

    def admin(self, address: str, command: Any) -> int:
        """Send an administrative command to the member at ``address``; its reply lands in
        ``admin_replies`` under the returned call id."""
        self._admin_calls += 1
        self._send(ADMIN_ADDRESS, None, address, None, AdminRequest(self._admin_calls, command))
        return self._admin_calls

    def signal_stop(self, address: str) -> int:
        """What SIGTERM does to the member process at ``address``: its member is told to stop
        (``StopSignalled``), with no network in between; the outcome lands in ``admin_replies``
        under the returned call id, as an ``admin`` command's does."""
        self._admin_calls += 1
        node = self.nodes[address]
        self._schedule(self.now_ms, "signal", (address, node.incarnation, self._admin_calls))
        return self._admin_calls

    def request_assignment(self) -> None:
        """What a client's first request does: make the leader assign the partitions."""
        for address in self.member_addresses():
            self._send("client-0", None, address, None, TableRequest())

    def at(self, time_ms: int, action: Callable[[], None]) -> None:
        self._schedule(time_ms, "action", action)

    # --- running -------------------------------------------------------------------------------

    def run_until(self, time_ms: int, stop: Callable[[], bool] | None = None) -> bool:
        """Process events up to ``time_ms``; stops early (returns True) when ``stop()`` holds."""
        while self.queue and self.queue[0][0] <= time_ms:
            self.step()
            if stop is not None and stop():
                return True
        self.now_ms = max(self.now_ms, time_ms)
        return stop() if stop is not None else False

    def step(self) -> None:
        time_ms, _, kind, payload = heapq.heappop(self.queue)
        self.now_ms = time_ms
        self.stats.events += 1
        if kind == "deliver":
            address, envelope = payload
            node = self.nodes.get(address)
            if node is not None:
                if not node.alive:
                    return
                if node.paused:
                    node.held.append((kind, payload))
                    return
                sender_address, sender, target_uuid, message, sent_ms = envelope
                self._trace_line("d", address, type(message).__name__)
                # A client's message says when it was sent (a member process works it out from the
                # connection's clock): the simulator knows exactly.
                sent = sent_ms if sender is None else None
                self._run_member(node, Receive(sender_address, sender, target_uuid, message, sent))
                for hook in list(self.after_delivery):
                    hook(address, sender_address, message)
            elif address in self.clients:
                self._client_message(self.clients[address], envelope[3])
            elif address == ADMIN_ADDRESS and isinstance(envelope[3], AdminReply):
                self.admin_replies[envelope[3].call_id] = envelope[3]
        elif kind == "timer":
            address, incarnation, name = payload
            node = self._running(address, incarnation, kind, payload)
            if node is not None:
                self._run_member(node, TimerFired(name))
        elif kind == "link":
            address, incarnation, peer = payload
            node = self._running(address, incarnation, kind, payload)
            if node is not None:
                self._trace_line("l", address, peer.address)
                self._run_member(node, LinkRestored(peer))
        elif kind == "signal":
            address, incarnation, call_id = payload
            node = self._running(address, incarnation, kind, payload)
            if node is not None:
                self._trace_line("s", address, "stop")
                self._run_member(node, StopSignalled(ADMIN_ADDRESS, call_id))
        elif kind == "client":
            client = self.clients[payload]
            for address, message in client.tick(self.now_ms, self._reachable()):
                self._send(client.address, None, address, None, message)
            self._schedule(self.now_ms + 5, "client", payload)
        elif kind == "sync":
            node = self._running(payload[0], payload[1], kind, payload)
            if node is not None:
                if len(payload) > 2:
                    node.timed_sync = False
                self._synced(node)
        elif kind == "action":
            payload()

    def _running(self, address: str, incarnation: int, kind: str, payload: Any) -> Node | None:
        """The incarnation an event was meant for, when it runs now (a paused one holds the event)."""
        node = self.nodes.get(address)
        if node is None or node.incarnation != incarnation or not node.alive:
            return None
        if node.paused:
            node.held.append((kind, payload))
            return None
        return node

    def _run_member(self, node: Node, event: Any) -> None:
        before = node.member.identity
        effects = node.member.handle(self.now_ms, event)
        identity = node.member.identity
        disk = self.disks.get(node.address)
        if disk is not None and identity != before:
            disk.identity = identity  # rejoined as a new member: the process writes its member file
        # A step that wrote what its sends depend on sends them after the sync, as does every step
        # while a sync is pending (a member process's group commit, in order).
        holding = bool(node.unsynced_sends) or any(type(e) is Persist and e.hold_sends for e in effects)
        if holding and not node.unsynced_sends:
            self._schedule(self.now_ms + self.disk_sync_ms, "sync", (node.address, node.incarnation))
        elif (
            not holding
            and not node.timed_sync
            and self.config.fsync == "every_ms"
            and any(type(e) is Persist for e in effects)
        ):
            node.timed_sync = True
            at_ms = self.now_ms + self.config.fsync_interval_ms + self.disk_sync_ms
            self._schedule(at_ms, "sync", (node.address, node.incarnation, "timed"))
        for effect in effects:
            if isinstance(effect, Send | SendToAddress | ReplyToClient):
                if holding:
                    node.unsynced_sends.append(lambda effect=effect: self._carry_out_send(node, identity, effect))
                else:
                    self._carry_out_send(node, identity, effect)
            elif isinstance(effect, Persist):
                disk = self.disks[node.address]
                if self._refused_by_disk(disk, effect):
                    node.exit_code = 74
                    node.unsynced_sends.clear()  # nothing that waited for the write goes out
                    self.stats.disk_full_stops += 1
                    break
                node.persisted += 1
                disk.write(effect.file.value, effect.data, effect.mode)
            elif isinstance(effect, KeepIdentity):
                self.disks[node.address].identity = effect.member  # written whole and synced at once
            elif isinstance(effect, SetTimer):
                self._schedule(max(effect.at_ms, self.now_ms), "timer", (node.address, node.incarnation, effect.name))
            elif isinstance(effect, Emit):
                self._on_emit(node.address, effect.event)
            elif isinstance(effect, Stop):
                node.exit_code = effect.exit_code
        if node.exit_code is not None and node.alive:
            node.alive = False
            node.stopped = True
            if node.address in self.disks and node.exit_code != 74:
                # A process that stops syncs what it wrote, then sends what waited for it (its
                # last answers: found by an outside tester, they were dropped here).
                self._sync_disk(node)
            self.stats.stops += 1
            self._record("stopped", node.address)
        for check in self.checks:
            check(self, node.address)

    def _carry_out_send(self, node: Node, identity: MemberId, effect: Send | SendToAddress | ReplyToClient) -> None:
        if isinstance(effect, Send):
            self._send(node.address, identity, effect.target.address, effect.target.uuid, effect.message)
        elif isinstance(effect, SendToAddress):
            self._send(node.address, identity, effect.address, None, effect.message)
        else:
            if isinstance(effect.message, MapReply) and ReplyCode.MEMORY_FULL in effect.message.codes:
                self.stats.writes_refused_memory_full += effect.message.codes.count(ReplyCode.MEMORY_FULL)
            if isinstance(effect.message, MapReply) and ReplyCode.DISK_FULL in effect.message.codes:
                self.stats.writes_refused_disk_full += effect.message.codes.count(ReplyCode.DISK_FULL)
            for reply_check in self.reply_checks:
                reply_check(self, node.address, effect.client_address, effect.message)
            self._send(node.address, identity, effect.client_address, None, effect.message)

    def _synced(self, node: Node) -> None:
        """A persistent member's disk synced: the sends that waited for it go, in order, and the
        member is told what is durable now."""
        self._sync_disk(node)
        self.stats.syncs += 1
        disk = self.disks[node.address]
        free_bytes = self.disk_capacity_bytes - disk.size_bytes() if self.disk_capacity_bytes else -1
        self._run_member(node, Synced(node.persisted, free_bytes))

    def _sync_disk(self, node: Node) -> None:
        """Sync a member's disk, then send, in order, what waited for it."""
        self.disks[node.address].sync()
        node.synced_ms = self.now_ms
        sends, node.unsynced_sends = node.unsynced_sends, []
        for send in sends:
            send()

    def _refused_by_disk(self, disk: SimDisk, effect: Persist) -> bool:
        """Whether a write would take the disk past its size (a replacement is written beside the
        file it replaces, and needs room for both until then)."""
        if not self.disk_capacity_bytes:
            return False
        return disk.size_bytes() + len(effect.data) > self.disk_capacity_bytes

    def _send(self, source: str, sender: MemberId | None, target: str, target_uuid: str | None, message: Any) -> None:
        self.stats.messages_sent += 1
        if self.encode_messages:
            frames = codec.FrameDecoder().feed(codec.encode(message))
            message = frames[0]
        if any(rule(source, target, message) for rule in self.drop_rules):
            self.stats.messages_dropped += 1
            return
        network = self.network
        if network.hold_ms and network.cut(source, target) and (source in self.clients or target in self.clients):
            if (source, target) in self._reset or (target, source) in self._reset:
                self.stats.messages_dropped += 1
                return
            if len(self.held) < MAX_HELD_MESSAGES:
                self.held.append((target, (source, sender, target_uuid, message, self.now_ms)))
            return
        latencies = self.network.deliveries(source, target)
        if not latencies:
            self.stats.messages_dropped += 1
        for latency in latencies:
            envelope = (source, sender, target_uuid, message, self.now_ms)
            self._schedule(self.now_ms + latency, "deliver", (target, envelope))

    def _client_message(self, client: SimClient, message: Any) -> None:
        for address, reply in client.on_message(self.now_ms, message, self._reachable()):
            self._send(client.address, None, address, None, reply)

    def _on_emit(self, address: str, event: Any) -> None:
        from shardgrid.core import events

        self.events.append((self.now_ms, address, event))
        if isinstance(event, events.MigrationEvent):
            if event.phase == "finished":
                self.stats.migrations_finished += 1
            elif event.phase == "failed":
                self.stats.migrations_failed += 1
        elif isinstance(event, events.PartitionLost) and event.lost_replica_count > self.config.backup_count:
            # The workload's maps keep at least the sync backups: lost only beyond them.
            self.stats.partitions_lost.add(event.partition_id)
        if self.trace_events:
            self._trace_line("e", address, repr(event))

    def _schedule(self, time_ms: int, kind: str, payload: Any) -> None:
        self.counter += 1
        heapq.heappush(self.queue, (time_ms, self.counter, kind, payload))

    def _record(self, what: str, detail: Any) -> None:
        self._trace_line("f", what, repr(detail))

    def _trace_line(self, kind: str, where: str, what: str) -> None:
        self._trace.update(f"{self.now_ms}|{kind}|{where}|{what}\n".encode())

    # --- views ---------------------------------------------------------------------------------

    def _reachable(self) -> list[str]:
        """The addresses a client tries: the running members', or while none runs (every member
        crashed at once) the addresses it was given, where nothing answers."""
        return self.member_addresses() or list(self.started_addresses)

    def member_addresses(self) -> list[str]:
        return [a for a, n in self.nodes.items() if n.alive]

    def live_members(self) -> list[Member]:
        return [n.member for n in self.nodes.values() if n.alive and not n.paused]

    def leader(self) -> Member | None:
        """The leader of the newest term among the live members (an old one may not know yet)."""
        leaders = [m for m in self.live_members() if m.is_leader]
        return max(leaders, key=lambda m: m.consensus.term) if leaders else None

    def trace_hash(self) -> str:
        return self._trace.hexdigest()
