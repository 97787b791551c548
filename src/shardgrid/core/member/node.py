"""``Member``: the concerns put together, its lifecycle, and the dispatch of inputs to them.

``Member.handle(now_ms, incoming) -> list[Effect]`` is the whole interface. Each concern owns its
state and is reached only through its methods:

- ``discovery``: finding the cluster, or founding one with ``initial_cluster_size`` peers;
- ``consensus``: the Raft node and the metadata applied from its log;
- ``leases``: whether this member may serve, and (leader) the grants;
- ``data``: the stores, client operations, replication to backups;
- ``migrations``: this member's side of migrations (sending or receiving data);
- ``migration_leader`` and ``membership``: the leader's duties (migrations; joins, removals, voters);
- ``admin``: state changes, promotions, shutdowns.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from typing import Any

from shardgrid.core import events
from shardgrid.core import messages as m
from shardgrid.core.config import MemberConfig
from shardgrid.core.effects import DiskFile, Effect, KeepIdentity
from shardgrid.core.errors import invariant
from shardgrid.core.identity import MemberId
from shardgrid.core.inputs import Input, LinkRestored, Receive, Start, StopSignalled, Synced, TimerFired
from shardgrid.core.limits import MAX_STATUS_MAPS, NEVER_MS
from shardgrid.core.member.admin import Admin, Respond
from shardgrid.core.member.consensus import Consensus
from shardgrid.core.member.context import Context
from shardgrid.core.member.data import DataPath
from shardgrid.core.member.discovery import Discovery
from shardgrid.core.member.leases import Leases
from shardgrid.core.member.leaving import NOT_IN_A_CLUSTER, Leaving
from shardgrid.core.member.lifecycle import Lifecycle, check_transition
from shardgrid.core.member.membership import MembershipLeader
from shardgrid.core.member.migration_leader import MigrationLeader
from shardgrid.core.member.migration_participant import MigrationParticipant
from shardgrid.core.member_disk import MemberDisk
from shardgrid.core.metadata import Changes
from shardgrid.core.metadata.commands import ResumeAfterShutdown
from shardgrid.core.placement import replica_count_for
from shardgrid.core.raft import Role
from shardgrid.core.raft.messages import VoteRequest

TICK = "tick"

# Messages from clients (no member identity): the data path and administration.
_FROM_CLIENTS = (m.MapRequest, m.ScanRequest, m.TableRequest, m.MemberStatusRequest, m.AdminRequest)
# Messages of processes looking for a cluster, taken only while this member looks for one too.
_DISCOVERY = (
    m.JoinRedirect,
    m.JoinRejected,
    m.Unjoined,
    m.Bootstrap,
    m.FoundingProposal,
    m.FoundingAnswer,
    m.FoundingWithdrawn,
)


class Member:
    """A shardgrid member: feed it events with the current time, execute the effects it returns.

    Construct it as ``Member(identity, config, seed_addresses, rng, lite=False)``; the rng is the
    member's only source of randomness.
    """

    def __init__(
        self,
        identity: MemberId,
        config: MemberConfig,
        seed_addresses: tuple[str, ...],
        rng: random.Random,
        lite: bool = False,
        *,
        hash_seed: int = 0,
        clock_offset_ms: int = 0,
    ) -> None:
        config.validate()
        self.ctx = Context(
            identity, config, seed_addresses, rng, lite, hash_seed=hash_seed, clock_offset_ms=clock_offset_ms
        )
        self.lifecycle = Lifecycle.DISCOVERING
        self._last_tick_ms = 0
        self._drive_requested = False
        self._shut_down_index: int | None = None  # the entry that shut the cluster down, applied this event
        # Restored from a disk whose log says the cluster shut down: as leader, it resumes it.
        self._resume_after_shutdown = False
        self._resume_proposed_term = -1
        self._restoring = False  # restoring from its disk (Start(disk)), not loading a snapshot
        # (index, term) of the last log entry its disk held when it came back from one (None: it
        # did not): a stop at or before it in both was the restart's, and is resumed; a later one
        # is new (a new leader may write new entries at indexes the disk held, in a later term).
        self._restored_last: tuple[int, int] | None = None
        # Back from its directory at another address: what the directory held, kept apart (not
        # served, not in the log) until the cluster renames this member (``_take_back_moved``).
        self._moved: MemberDisk | None = None
        # Renamed, its member file is to name it here once the log that names it is on its disk:
        # True until this step's writes are numbered, then the number of the last of them.
        self._keep_identity_after: bool | int | None = None
        self._stopping_at = (0, 0)  # (index, term) of the entry from which the cluster is stopping
        self._was_stopping = False
        self._last_assignment_request_ms = NEVER_MS
        self._known_leader: MemberId | None = None
        self._migrations_finished = 0
        self._build(known_addresses=(), cluster_seen=False)
        self.leaving = Leaving(
            self.ctx,
            self.consensus,
            lambda command, respond: self.admin.forward(command, respond),
            lambda: self.lifecycle,
            lambda: self._set_lifecycle(Lifecycle.LEAVING),
            self._halt,
        )

    def _build(self, known_addresses: tuple[str, ...], cluster_seen: bool) -> None:
        ctx = self.ctx
        self.consensus = Consensus(ctx, self)
        self.discovery = Discovery(ctx, known_addresses, cluster_seen)
        self.leases = Leases(ctx, self.consensus)
        self.data = DataPath(
            ctx, self.consensus, self.leases, self._serves, self._unavailable, self._request_assignment
        )
        self.migrations = MigrationParticipant(ctx, self.consensus, self.data, self._to_leader)
        self.data.wire(self.migrations)
        self.migration_leader = MigrationLeader(ctx, self.consensus, self._deliver_to_self)
        self.membership = MembershipLeader(ctx, self.consensus, self.leases, self.migration_leader)
        self.admin = Admin(
            ctx,
            self.consensus,
            self.leases,
            self._begin_leaving,
            self._execute_leave,
            self.membership.remove_now,
            self.membership.give_up,
        )
        self._handlers: dict[type, Callable[[MemberId, Any], None]] = {
            m.LeaseRequest: self.leases.on_request,
            m.LeaseGrant: self.leases.on_grant,
            m.TransferChunk: self._on_transfer_chunk,
            m.TransferAck: self._on_transfer_ack,
            m.MigrationCommit: self.migrations.on_commit,
            m.MigrationOutcomeQuery: self.migrations.on_outcome_query,
            m.MigrationDataDone: self.migration_leader.on_data_done,
            m.MigrationProgress: self.migration_leader.on_progress,
            m.MigrationCommitAck: self.migration_leader.on_commit_ack,
            m.MigrationOutcomeReply: self.migration_leader.on_outcome_reply,
            m.BackupBatch: self.data.backups.on_backup_batch,
            m.ReplicaSummary: self.data.syncs.on_summary,
            m.BackupAckBatch: self.data.owner.on_backup_acks,
            m.ReplicaSyncRequest: self.data.syncs.on_sync_request,
            m.AssignmentRequest: lambda _sender, _message: self.migration_leader.request_assignment(),
            m.LeaderReply: self.admin.on_leader_reply,
        }

    # --- what others read ------------------------------------------------------------------------

    @property
    def identity(self) -> MemberId:
        return self.ctx.identity

    @property
    def config(self) -> MemberConfig:
        return self.ctx.config

    @property
    def is_leader(self) -> bool:
        return self.lifecycle in (Lifecycle.ACTIVE, Lifecycle.LEAVING) and self.consensus.is_leader

    @property
    def stop_reason(self) -> str:
        return self.leaving.stop_reason

    @property
    def moving(self) -> bool:
        """Back from its directory at another address, not renamed by the cluster yet."""
        return self._moved is not None

    @property
    def joined(self) -> bool:
        return self.lifecycle in (Lifecycle.ACTIVE, Lifecycle.LEAVING)

    def serves_writes(self, pid: int, now_ms: int, map_name: str = "") -> bool:
        """Whether this member would take a write to ``map_name`` in ``pid`` at ``now_ms`` (for
        checkers): as its owner, or as its stand-in for a map that chose availability."""
        state = self.consensus.state
        table = state.table
        stand_ins = self.data.stand_ins
        if not (self.joined and table is not None and self.leases.holds_at(now_ms)):
            return False
        if not state.cluster_state.writes_allowed:
            return False
        if map_name in self.config.serving_maps and state.unavailable(pid):
            return state.stand_in(pid) == self.identity and stand_ins.standing_in(pid, now_ms)
        return (
            table.owner(pid) == self.identity
            and not state.unavailable(pid)
            and not stand_ins.owner_waits(pid, map_name, now_ms)
            and not self.migrations.writes_blocked(pid)
        )

    def status(self, call_id: int) -> m.MemberStatus:
        """This member's own view of where it and the cluster stand (see ``MemberStatus``)."""
        state = self.consensus.state
        table = state.table
        me = self.identity
        leader = self.consensus.leader
        records = state.members
        data_members = [r.id for r in records if not r.lite]
        owned = backups = missing = 0
        if table is not None:
            backup_count = self.config.table_backup_count
            wanted = replica_count_for(len(data_members), len(data_members), backup_count)
            for slots in table.replicas:
                owned += slots[0] == me
                backups += me in slots[1 : backup_count + 1]
                missing += max(0, wanted - sum(1 for r in slots[:wanted] if r is not None))
        is_leader = self.is_leader
        leader_idle = (
            is_leader
            and self.consensus.leader_ready
            and self.migration_leader.idle
            and not self.membership.joiners
            and not any(r.leaving for r in records)
        )
        involved = len(self.migrations.partitions_involved())
        data = self.data
        disk = self.ctx.disk
        quiet = self.joined and involved == 0 and not data.busy()
        return m.MemberStatus(
            call_id=call_id,
            address=me.address,
            uuid=me.uuid,
            lifecycle=self.lifecycle.value,
            lite=self.ctx.lite,
            leader_address=leader.address if leader is not None else "",
            term=self.consensus.term,
            cluster_state=state.cluster_state,
            applied_index=self.consensus.applied_index,
            members=tuple(r.id.address for r in records),
            lite_members=tuple(r.id.address for r in records if r.lite),
            leaving_members=tuple(r.id.address for r in records if r.leaving),
            partition_count=self.config.partition_count,
            table_stamp=table.stamp if table is not None else None,
            owned_partitions=owned,
            backup_replicas=backups,
            missing_replicas=missing,
            migrations_in_log=len(state.migrations),
            migrations_here=involved,
            migrations_planned=sum(len(planned) for planned in self.migration_leader.pending.values())
            if is_leader
            else 0,
            migrations_finished=self._migrations_finished,
            writes_awaiting_backups=data.owner.backlog()[0],
            syncs_in_flight=data.syncs.in_flight(),
            leader_idle=leader_idle,
            quiet=quiet,
            unreachable_members=tuple(m.address for m in state.unreachable_members),
            unavailable_partitions=len(state.unavailable_partitions()),
            entries_migrated=self.migrations.entries_sent,
            bytes_migrated=self.migrations.bytes_sent,
            chunks_resent=self.migrations.chunks_resent,
            entries_synced=data.syncs.entries_sent,
            memory_bytes=data.upkeep.memory_bytes,
            max_memory_bytes=self.ctx.config.max_memory_bytes,
            entries=data.upkeep.entry_count,
            entries_evicted=data.upkeep.entries_evicted,
            maps=self._map_usage(),
            persistent=self.ctx.config.persistent,
            disk_bytes=disk.disk_bytes,
            disk_free_bytes=disk.free_bytes,
            unsynced_writes=disk.unsynced_writes,
            sync_lag_ms=disk.sync_lag_ms(self.ctx.now_ms),
            disk_full=data.upkeep.disk_short(),
            awaited_members=tuple(m.address for m in self.membership.awaited) if is_leader else (),
        )

    def _map_usage(self) -> tuple[m.MapUsage, ...]:
        """The maps this member holds, by name: the MAX_STATUS_MAPS that take the most memory."""
        usage = self.data.upkeep.map_usage
        names = sorted(usage, key=lambda name: (-usage[name][1], name))[:MAX_STATUS_MAPS]
        return tuple(
            m.MapUsage(map_name=name, entries=usage[name][0], memory_bytes=usage[name][1]) for name in sorted(names)
        )

    # --- events ----------------------------------------------------------------------------------

    def handle(self, now_ms: int, incoming: Input) -> list[Effect]:
        ctx = self.ctx
        invariant(now_ms >= ctx.now_ms, lambda: f"time went backwards: {now_ms} < {ctx.now_ms}")
        ctx.now_ms = now_ms
        ctx.out = []
        if self.lifecycle is Lifecycle.STOPPED:
            return []
        if isinstance(incoming, Receive):
            self._receive(incoming)
        elif isinstance(incoming, TimerFired):
            if incoming.name == TICK:
                self._tick()
        elif isinstance(incoming, LinkRestored):
            self._link_restored(incoming.peer)
        elif isinstance(incoming, Start):
            self.discovery.started_ms = now_ms
            if incoming.disk is not None:
                self._restore(incoming.disk)
            self._tick()
        elif isinstance(incoming, StopSignalled):
            self.leaving.on_signal(incoming, self.joined)
        elif isinstance(incoming, Synced):
            self.ctx.disk.reported(incoming.persisted, incoming.free_bytes)
            self.consensus.synced(incoming.persisted)
            after = self._keep_identity_after
            if after is not None and after is not True and incoming.persisted >= after:
                # The log naming this member at its new address is durable: now its member file.
                self._keep_identity_after = None
                self.ctx.out.append(KeepIdentity(self.identity))
        else:
            raise TypeError(f"unknown input {type(incoming).__name__}")
        if self.lifecycle is not Lifecycle.STOPPED:
            self.consensus.flush(self._gather)
            if self._shut_down_index is not None:
                index, self._shut_down_index = self._shut_down_index, None
                if self.consensus.state.shut_down:
                    self.admin.on_cluster_shut_down()
                    self.leaving.on_cluster_shut_down(index)
        else:
            self.consensus.persist()  # what it learned last (a cluster's shutdown) is kept
        self.data.persist()
        if self._keep_identity_after is True:
            self._keep_identity_after = ctx.disk.written  # this step's writes, the log's among them
        out, ctx.out = ctx.out, []
        return out

    def _restore(self, disk: MemberDisk) -> None:
        """Come back as the member that left ``disk``: its copies and the data it committed to as a
        migration's destination first, then its log, whose state they are reconciled with as with
        a snapshot's (copies the table no longer names it for are dropped, missing ones asked for)."""
        invariant(self.ctx.config.persistent, "only a persistent member restores from its disk")
        self.ctx.disk.restored(dict(disk.file_bytes))
        if disk.moved_from is not None:
            self._hold_moved(disk, disk.moved_from)
            return
        self.data.restore(disk.replicas.copies, disk.file_bytes.get(DiskFile.REPLICAS, 0))
        self.migrations.restore_staged(disk.replicas.staged)
        raft_disk = disk.raft
        if raft_disk.entries:
            self._restored_last = (raft_disk.entries[-1].index, raft_disk.entries[-1].term)
        elif raft_disk.snapshot is not None:
            self._restored_last = (raft_disk.snapshot.index, raft_disk.snapshot.term)
        else:
            self._restored_last = (0, 0)
        self._restoring = True
        self.membership.restarted()
        try:
            self.consensus.restore(disk.raft, disk.file_bytes.get(DiskFile.RAFT, 0))
        finally:
            self._restoring = False
        owned: list[int] = []
        fsync = self.ctx.config.fsync
        if fsync != "always":
            table = self.consensus.state.table
            owned = [pid for pid in disk.replicas.copies if table is not None and table.owner(pid) == self.identity]
            self.data.sync_after_promotion(sorted(owned), restarted=True)
        self.ctx.emit(
            events.MemberRestored(
                self.identity,
                self.consensus.applied_index,
                len(disk.replicas.copies),
                sum(data.size() for data in disk.replicas.copies.values()),
                sum(disk.torn_bytes.values()),
                fsync,
                len(owned),
            )
        )

    def _hold_moved(self, disk: MemberDisk, old: MemberId) -> None:
        """Back from ``old``'s directory at another address: this member looks for its cluster and
        asks to be renamed (``JoinRequest.moved_from``); its copies wait apart, its log is taken
        afresh from the cluster once renamed. Its replicas file goes on from where it ends (a
        fresh one would be rewritten empty at the first step); its Raft file is replaced by the
        first write of the log it takes, and its member file only once it is renamed, so that a
        crash on the way comes back here the same way."""
        invariant(old.uuid == self.identity.uuid and old.address != self.identity.address, "a move keeps the uuid")
        self.data.hold_apart(disk.replicas.copies, disk.file_bytes.get(DiskFile.REPLICAS, 0))
        self._moved = disk
        self.discovery.moved(old, disk.known_addresses)
        copies = disk.replicas.copies
        self.ctx.emit(
            events.MemberMoving(
                old,
                self.identity,
                len(copies),
                sum(data.size() for data in copies.values()),
                sum(disk.torn_bytes.values()),
            )
        )

    def _take_back_moved(self, available_again: list[int] | None) -> None:
        """The cluster renamed this member (the log names it at its new address): its copies and
        staged data are taken back, reconciled with the log as a restart's are, and the member
        file names it here once that log is durable."""
        disk, self._moved = self._moved, None
        invariant(disk is not None and disk.moved_from is not None, "only a moved member takes its data back")
        # Its member file names it here only once the log that names it here is durable: a crash
        # before then comes back moving again, not as a member its log does not list (found by an
        # outside tester: it came back at applied index 0 and dropped the copies it owned).
        self._keep_identity_after = True
        self.data.take_back()
        self.migrations.restore_staged(disk.replicas.staged)
        self.on_state_loaded(available_again)
        if self.ctx.config.fsync != "always":
            table = self.consensus.state.table
            owned = [pid for pid in disk.replicas.copies if table is not None and table.owner(pid) == self.identity]
            self.data.sync_after_promotion(sorted(owned), restarted=True)
        self.ctx.emit(events.MemberMoved(disk.moved_from, self.identity, self.consensus.applied_index))

    def _moved_and_named(self) -> bool:
        return self._moved is not None and self.consensus.state.is_member(self.identity)

    def _note_stopping(self, index: int, term: int) -> None:
        """Where the log began to say the cluster is stopping; when that entry was on this
        member's disk before it came back from it, the stop was before the restart: resumed.
        Decided again at every entry (a resumption and a new shutdown may come in one batch)."""
        stopping = self.consensus.state.stopping
        if stopping and not self._was_stopping:
            self._stopping_at = (index, term)
        self._was_stopping = stopping
        restored = self._restored_last
        self._resume_after_shutdown = (
            stopping
            and restored is not None
            and self._stopping_at[0] <= restored[0]
            and self._stopping_at[1] <= restored[1]
        )

    def _resume(self) -> None:
        """A member back from its disk after a cluster shutdown: as leader, once a term, it
        proposes the cluster's resumption (ACTIVE again); its members came back with their data.
        (Asked only while the flag says so: ``_note_stopping`` clears it once the log no longer
        says the cluster is stopping.)"""
        term = self.consensus.term
        if (
            self.consensus.is_leader
            and self._resume_proposed_term != term
            and self.consensus.propose(ResumeAfterShutdown())
        ):
            self._resume_proposed_term = term

    def _link_restored(self, peer: MemberId) -> None:
        if not self.joined or peer == self.identity or not self.consensus.state.is_member(peer):
            return
        self.data.resend_to(peer)
        self.migrations.resend_to(peer)
        if self.consensus.leader == self.identity:
            self.migration_leader.resend_to(peer)

    def _gather(self) -> None:
        """The leader's proposals of this event, gathered into the entry about to be proposed."""
        if self._resume_after_shutdown:
            self._resume()
        if self._drive_requested:
            self._drive_requested = False
            self.migration_leader.drive()
        self.migration_leader.propose_outcomes()

    def _receive(self, event: Receive) -> None:
        message = event.message
        kind = type(message)
        if event.target_uuid is not None and event.target_uuid != self.identity.uuid:
            return  # meant for an earlier incarnation at this address
        if kind in _FROM_CLIENTS:
            self._client_message(event.sender_address, message, event.sent_ms)
            return
        if kind is m.JoinRequest:
            if event.sender == message.member:  # only a process asks for itself (not a client)
                self._on_join_request(message)
            return
        if kind in _DISCOVERY:
            if event.sender is not None and (kind is not m.Unjoined or event.sender == message.member):
                self._discovery_message(event.sender, message)
            return
        sender = event.sender
        if sender is None:
            return
        if Consensus.is_raft_message(message):
            if self.consensus.takes_raft_from(sender):
                self.membership.heard_from(sender)
                self.consensus.step(sender, message)
            if isinstance(message, VoteRequest):
                self._not_a_member(sender)  # a removed voter that still campaigns learns it here
            return
        if kind is m.NotAMember:
            # An outsider cannot talk a member out; a moved member hears it from a member its log
            # listed or the leader one named (not from any process at an address it asked: found
            # by an outside tester, a stranger made it drop its copies).
            moved = self._moved
            told = moved is not None and (
                sender in moved.known_members or sender.address == self.discovery.leader_address
            )
            if self.consensus.state.is_member(sender) or told:
                self._on_not_a_member(message)
            return
        if not self.joined:
            return
        if kind is m.LeaderRequest:
            self.admin.on_leader_request(sender, message)  # it says so when the sender is unknown
            return
        if not self.consensus.state.is_member(sender):
            self._not_a_member(sender)
            return
        self.membership.heard_from(sender)
        handler = self._handlers.get(kind)
        if handler is not None:
            handler(sender, message)

    def _on_transfer_chunk(self, sender: MemberId, message: m.TransferChunk) -> None:
        """A chunk of a migration goes to the migration participant, one of a sync to the syncs."""
        if message.kind is m.MIGRATION:
            self.migrations.on_chunk(sender, message)
        else:
            self.data.syncs.on_sync_chunk(sender, message)

    def _on_transfer_ack(self, sender: MemberId, message: m.TransferAck) -> None:
        if message.kind is m.MIGRATION:
            self.migrations.on_chunk_ack(sender, message)
        else:
            self.data.syncs.on_sync_ack(sender, message)

    def _client_message(self, client: str, message: Any, sent_ms: int | None) -> None:
        if isinstance(message, m.MapRequest):
            self.data.requests.on_map_request(client, message, sent_ms)
        elif isinstance(message, m.ScanRequest):
            self.data.requests.on_scan_request(client, message)
        elif isinstance(message, m.TableRequest):
            self.data.requests.on_table_request(client, message)
        elif isinstance(message, m.MemberStatusRequest):
            self.ctx.reply(client, self.status(message.call_id))
        elif self.joined:
            self.admin.on_admin_request(client, message)
        else:
            self.ctx.reply(client, m.AdminReply(message.call_id, m.ADMIN_FAILED, NOT_IN_A_CLUSTER))

    def _deliver_to_self(self, message: Any) -> None:
        handler = self._handlers[type(message)]
        handler(self.identity, message)

    def _to_leader(self, message: Any) -> None:
        leader = self.consensus.leader
        if leader == self.identity:
            self._deliver_to_self(message)
        elif leader is not None:
            self.ctx.send(leader, message)

    # --- finding the cluster ---------------------------------------------------------------------

    def _on_join_request(self, message: m.JoinRequest) -> None:
        if message.member == self.identity:
            return
        if self.lifecycle is Lifecycle.DISCOVERING and not self.consensus.has_state:
            self.discovery.on_join_request(message)
            return
        if self._founder_in_cluster(message.member):
            # A founder that missed the founding message (lost on the way) asks around: send it again.
            self.ctx.send(message.member, self.consensus.founding)
            return
        if self.consensus.is_leader:
            raft = self.consensus.raft
            if not raft.membership.contains(message.member):
                self.membership.on_join_request(message)
            return
        leader = self.consensus.leader
        self.ctx.send_to_address(message.member.address, m.JoinRedirect(leader.address if leader else None))

    def _founder_in_cluster(self, member: MemberId) -> bool:
        """Whether ``member`` is named by this member's founding and still in the cluster: one that
        missed the founding message is sent it again. One the cluster removed since joins as any
        joiner does (found by an outside tester: the founders answered a founder removed for
        missing the founding with the founding again, for good, and it never joined)."""
        founding = self.consensus.founding
        return (
            founding is not None
            and any(r.id == member for r in founding.members)
            and self.consensus.raft.membership.contains(member)
        )

    def _discovery_message(self, sender: MemberId, message: Any) -> None:
        if self.lifecycle is not Lifecycle.DISCOVERING or self.consensus.has_state:
            self._answer_as_member(sender, message)
            return
        discovery = self.discovery
        if isinstance(message, m.JoinRedirect):
            discovery.on_redirect(sender.address, message, self.consensus.admitted_by)
        elif isinstance(message, m.JoinRejected):
            discovery.on_rejected(sender.address, message)
        elif isinstance(message, m.Unjoined):
            discovery.on_unjoined(message)
        elif isinstance(message, m.FoundingProposal):
            discovery.on_proposal(sender, message)
        elif isinstance(message, m.FoundingAnswer):
            discovery.on_answer(sender, message)
        elif isinstance(message, m.FoundingWithdrawn):
            discovery.on_withdrawn(sender, message)
        elif (
            isinstance(message, m.Bootstrap) and discovery.accepts(sender, message) and self.consensus.founding is None
        ):
            discovery.founded(own=False)
            self.consensus.bootstrap(message)

    def _answer_as_member(self, sender: MemberId, message: Any) -> None:
        """A process still founding, or promised to a founding, asks a member of a cluster: it is
        told what this member knows (that a cluster exists, its founding, where its leader is), so
        it founds no second cluster. (Found by an outside tester: members that had just founded
        ignored a proposal that reached them; their proposer never heard of their cluster and
        founded a second one with other processes.)"""
        if isinstance(message, m.FoundingProposal):
            self.ctx.send(sender, m.FoundingAnswer(message.round, False, None, heard_of_cluster=True))
        elif isinstance(message, m.FoundingAnswer) and message.promised:
            founding = self.consensus.founding
            if (
                founding is not None
                and founding.proposer == self.identity
                and founding.round == message.round
                and self._founder_in_cluster(sender)
            ):
                # A founder that missed the founding message tells its proposer it is still
                # promised: send it again (whether or not it lists the other founders to ask).
                self.ctx.send(sender, founding)
                return
            # A promise to a round this member never founded (or founded without it, or one whose
            # founder the cluster removed since): let it go, and say where the cluster is.
            self.ctx.send(sender, m.FoundingWithdrawn(message.round))
            leader = self.consensus.leader
            self.ctx.send_to_address(sender.address, m.JoinRedirect(leader.address if leader else None))

    def _not_a_member(self, sender: MemberId) -> None:
        """Tell a sender the cluster does not list that it was removed (it decides by the commit index)."""
        if self.joined and not self.consensus.raft.membership.contains(sender):
            self.ctx.send(sender, m.NotAMember(self.consensus.raft.commit_index))

    def _on_not_a_member(self, message: m.NotAMember) -> None:
        moved = self._moved
        if moved is not None:
            # The leader says the member this directory holds is no longer one (removed while it
            # was away, or after it took part of the log that would have renamed it), from a log
            # past the one the directory holds and the one it took since: its copies are stale
            # (found by a random run: cut off once it took part of that log, a mover was removed
            # and, told so, waited for good to be renamed).
            took = self.consensus.raft.commit_index if self.consensus.has_state else 0
            if message.commit_index > max(moved.raft.hard_state.commit, took):
                self._moved = None
                self._rejoin_as_new_member(self.discovery.known_addresses)
            return
        if not self.joined or message.commit_index <= self.consensus.raft.commit_index:
            return  # the sender has not applied what we have: it lags, we were not removed
        if not self.leaving.on_removed():
            self._rejoin_as_new_member()

    # --- time --------------------------------------------------------------------------------------

    def _tick(self) -> None:
        ctx = self.ctx
        if self._last_tick_ms and ctx.now_ms - self._last_tick_ms > ctx.config.failure_timeout_ms // 2:
            # This process stood still (a pause, a stalled VM): what it finds in its buffers may be
            # old news, so the leader removes nobody until fresh messages had time to arrive.
            self.membership.stood_still()
        self._last_tick_ms = ctx.now_ms
        if self.lifecycle is Lifecycle.DISCOVERING:
            self._discovery_tick()
        self.consensus.tick()
        if self.joined:
            self.leases.tick()
            self.membership.tick()
            self.migration_leader.tick()
            self.migrations.tick()
            self.data.tick()
            self.admin.tick()
            self.leaving.tick()
        if self.lifecycle is not Lifecycle.STOPPED:
            ctx.set_timer(TICK, ctx.now_ms + ctx.config.tick_ms)

    def _discovery_tick(self) -> None:
        # A process given a log that does not list it yet goes on asking everyone it knows: the
        # leader that gave it may have lost its majority, and the real one must hear of it.
        founding = self.discovery.tick(self.consensus.admitted_by)
        if founding is not None and not self.consensus.has_state:
            for record in founding.members:
                if record.id != self.identity:
                    self.ctx.send(record.id, founding)
            self.discovery.founded(own=True)
            self.consensus.bootstrap(founding)

    # --- the log ---------------------------------------------------------------------------------

    def on_state_loaded(self, available_again: list[int] | None = None) -> None:
        """A snapshot replaced the state (or a restart restored it: ``available_again`` then lists
        the partitions its log made available again since its own snapshot)."""
        if self._moved_and_named():
            self._take_back_moved(available_again)  # (which loads the state with its copies held)
            return
        state = self.consensus.state
        if self.lifecycle is Lifecycle.DISCOVERING and state.is_member(self.identity):
            self._become_active()
        if self._restoring:
            # Back from its disk after the cluster shut down (or was shutting down), or every data
            # member was asked to leave (they stopped keeping what they held): it stays, and as
            # leader resumes it.
            self._stopping_at = (0, 0)
            self._was_stopping = state.stopping
            self._resume_after_shutdown = state.stopping
        else:
            # A snapshot through the entry that began the stop: its index and term stand for it.
            snapshot = self.consensus.raft.log.snapshot
            self._note_stopping(self.consensus.applied_index, snapshot.term if snapshot is not None else 0)
        record = state.record_of(self.identity)
        if record is not None and record.leaving and not self._resume_after_shutdown:
            self.leaving.on_marked_leaving()
        self.migrations.on_state_loaded()  # (it also starts the lineage of a promotion inside the snapshot)
        if state.table is not None:
            self.data.after_table_change(list(range(state.table.partition_count)))
            self.data.ask_for_missing_data()
            # Partitions the snapshot made available again are not told apart from the others:
            # the maps a stand-in may have served are emptied in all this owner holds (a cache's
            # entries may go; one older than a write the stand-in took may not come back). A
            # restart knows which: emptying every one would also change partitions whose
            # migration it is the source of, under it (found by the simulator: a destination
            # then took a staged copy older than the writes that emptied the map).
            every = range(state.table.partition_count)
            self.data.clear_serving_maps(every if available_again is None else available_again)
        self.data.stand_ins.after_applied()
        self.migration_leader.reset(self.consensus.is_leader)
        if not self._resume_after_shutdown:
            self.leaving.after_applied(self.consensus.raft.commit_index)
        self._drive_requested = True

    def on_applied(self, index: int, term: int, changes: Changes) -> None:
        me = self.identity
        if self._moved_and_named():
            self._take_back_moved(list(changes.available))
        self._note_stopping(index, term)
        for record in changes.members_added:
            self.ctx.emit(events.MemberAdded(record.id, index))
            if record.id == me and self.lifecycle is Lifecycle.DISCOVERING:
                self._become_active()
        for old, new in changes.members_readdressed:
            self.ctx.emit(events.MemberReaddressed(old, new, index))
            self.leases.forget(old)
            self.data.owner.readdressed(old, new)
        for member in changes.members_removed:
            self.ctx.emit(events.MemberRemoved(member, index))
            self.leases.forget(member)
            if self.consensus.is_leader and member != me:
                # Out of the configuration, it hears no more of the log: told now (as any member it
                # reaches later would tell it), a leaving member stops at once. Found by an outside
                # tester: members removed just before every other member stopped (all signalled)
                # reached nobody who could tell them, and ran on leaving for good.
                self._not_a_member(member)
        if me in changes.members_removed:
            if not self.leaving.on_removed() and self.joined:
                self._rejoin_as_new_member()
            return
        for record in changes.started:
            self.migrations.on_started(record)
        for record in changes.finished:
            self.migrations.on_finished(record)
        self._migrations_finished += len(changes.finished)
        if changes.table_assigned:
            self.data.on_table_assigned()
        self.data.after_table_change(sorted(changes.partitions))
        if changes.unavailable:
            members = tuple(sorted(changes.members_unreachable))
            self.ctx.emit(events.PartitionsUnavailable(tuple(changes.unavailable), members, index))
        if changes.available:
            self.ctx.emit(events.PartitionsAvailable(tuple(changes.available), index))
            self.data.clear_serving_maps(changes.available)
            self.data.stand_ins.on_available(changes.available)
        self.data.stand_ins.after_applied()
        promoted_here = sorted(pid for pid, owner in changes.promoted if owner == me)
        if promoted_here:
            self.data.sync_after_promotion(promoted_here)
        if changes.cluster_state is not None:
            self.ctx.emit(events.ClusterStateChanged(changes.cluster_state, index))
        state = self.consensus.state
        for member in changes.members_changed:
            record = state.record_of(member)
            if record is not None and record.leaving and member == me and self.lifecycle is Lifecycle.ACTIVE:
                if not self._resume_after_shutdown:
                    self.leaving.on_marked_leaving()
            elif record is not None and not record.lite and not record.leaving:
                self.ctx.emit(events.MemberPromoted(member, index))
                if member == me:
                    self.ctx.lite = False
        self.migration_leader.on_applied(term, changes)
        if changes.shut_down and self.joined:
            # Stopped once the event's entries are all applied: a member that catches up after
            # the cluster came back from its disks applies the resumption in the same batch.
            if not self._resume_after_shutdown:
                self._shut_down_index = index
            return
        if not self._resume_after_shutdown:
            self.leaving.after_applied(index)
        self._drive_requested = True

    def on_leadership(self, leader: MemberId | None, term: int, was_leader: bool) -> None:
        is_leader = self.consensus.raft.role is Role.LEADER
        if leader != self._known_leader:
            if self._known_leader is not None:
                self.admin.on_leader_changed()
            self._known_leader = leader
            if leader is not None:
                self.ctx.emit(events.LeaderChanged(leader, term))
        if is_leader and not was_leader:
            self.leases.on_became_leader()
            self.membership.reset()
            self.migration_leader.reset(True)
        elif was_leader and not is_leader:
            self.membership.reset()
            self.migration_leader.reset(False)
            self.admin.on_leadership_lost()

    # --- lifecycle ---------------------------------------------------------------------------------

    def _set_lifecycle(self, new: Lifecycle) -> None:
        check_transition(self.lifecycle, new)
        self.lifecycle = new

    def _become_active(self) -> None:
        self._set_lifecycle(Lifecycle.ACTIVE)

    def _serves(self) -> bool:
        return self.joined

    def _unavailable(self) -> m.ReplyCode | None:
        if self.joined:
            return None
        leaving = self.lifecycle in (Lifecycle.LEAVING, Lifecycle.STOPPED)
        return m.ReplyCode.SHUTTING_DOWN if leaving else m.ReplyCode.NOT_READY

    def _request_assignment(self) -> None:
        if self.consensus.is_leader:
            self.migration_leader.request_assignment()
            self._drive_requested = True
            return
        leader = self.consensus.leader
        if (
            leader is not None
            and self.ctx.now_ms - self._last_assignment_request_ms >= self.ctx.config.retry_interval_ms
        ):
            self._last_assignment_request_ms = self.ctx.now_ms
            self.ctx.send(leader, m.AssignmentRequest())

    def _begin_leaving(self, client: str, call_id: int) -> None:
        self.leaving.begin(client, call_id)

    def _execute_leave(self, origin: MemberId, command: m.ShutdownMember, respond: Respond) -> None:
        self.leaving.execute(origin, command, respond)

    def _halt(self, keep_disk: bool) -> None:
        """Stop; what the member holds goes, but a persistent member that ``keep_disk`` leaves its
        disk as it is (its copies and its log: the next process on its directory comes back as
        it). One that left empties its log too, so that a process started there joins anew."""
        self._set_lifecycle(Lifecycle.STOPPED)
        if keep_disk:
            self.data.stop_journaling()  # what it holds stays on the disk, whatever is dropped from memory
        self.data.drop_everything()
        if not keep_disk:
            self.consensus.forget_disk()

    def _rejoin_as_new_member(self, known: tuple[str, ...] | None = None) -> None:
        """Removed while away (paused, cut off, or moved to another address): drop everything and
        join again with a new identity, through every address of the cluster it last knew
        (``known``, else those of the members its log lists)."""
        old = self.identity
        if known is None:
            known = tuple(r.address for r in self.consensus.state.member_ids if r != old)
        self.data.drop_everything()
        new = MemberId(str(uuid.UUID(int=self.ctx.rng.getrandbits(128), version=4)), old.address)
        if self.lifecycle is not Lifecycle.DISCOVERING:
            self._set_lifecycle(Lifecycle.DISCOVERING)
        self.ctx.identity = new
        self._build(known, cluster_seen=True)
        self.leaving.attach(self.consensus)
        self.discovery.started_ms = self.ctx.now_ms
        self.ctx.emit(events.RemovedFromCluster(old, new))
