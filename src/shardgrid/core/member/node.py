"""``Member``: the concerns put together, and the dispatch of events to them."""

from __future__ import annotations

from typing import Any

from shardgrid.core import messages as m
from shardgrid.core.effects import Effect, Receive, Start, TimerFired
from shardgrid.core.errors import invariant
from shardgrid.core.member.data import Data
from shardgrid.core.member.membership import Membership
from shardgrid.core.member.migration_master import MigrationMaster
from shardgrid.core.member.migration_replica import MigrationReplica
from shardgrid.core.member.publication import Publication
from shardgrid.core.member.recovery import RecoveryConcern
from shardgrid.core.member.state import TICK

# Messages a member takes only from members of its cluster (others get NotAMember where useful).
_FROM_MEMBERS: dict[type, str] = {
    m.MemberListUpdate: "on_member_list",
    m.Heartbeat: "on_heartbeat",
    m.NotAMember: "on_not_a_member",
    m.MastershipClaim: "on_mastership_claim",
    m.MastershipClaimReply: "on_mastership_claim_reply",
    m.PartitionUpdate: "on_partition_update",
    m.PartitionUpdateAck: "on_update_ack",
    m.AssignPartitions: "on_assign_partitions",
    m.PromotionCommit: "on_promotion_commit",
    m.PromotionCommitAck: "on_promotion_commit_ack",
    m.MigrationRequest: "on_migration_request",
    m.MigrationChunk: "on_migration_chunk",
    m.MigrationChunkAck: "on_chunk_ack",
    m.MigrationDataDone: "on_data_done",
    m.MigrationCommit: "on_migration_commit",
    m.MigrationCommitAck: "on_commit_ack",
    m.MigrationOutcomeQuery: "on_outcome_query",
    m.FetchPartitionState: "on_fetch_partition_state",
    m.PartitionStateReply: "on_partition_state_reply",
    m.BackupOperation: "on_backup_operation",
    m.BackupAck: "on_backup_ack",
    m.ReplicaSyncChunk: "on_sync_chunk",
    m.ReplicaSyncAck: "on_sync_ack",
}
_FROM_CLIENTS: dict[type, str] = {
    m.ClientRequest: "on_client_request",
    m.TableRequest: "on_table_request",
}
# Member messages that may come from a member not (yet, or no longer) in the list.
_FROM_ANYONE = (m.MemberListUpdate, m.Heartbeat, m.NotAMember)


class Member(Membership, Publication, MigrationMaster, MigrationReplica, RecoveryConcern, Data):
    """A shardgrid member: feed it events with the current time, execute the effects it returns.

    Construct it as ``Member(identity, config, seed_addresses, rng, lite=False)`` (see
    ``MemberState``); the rng is the member's only source of randomness (its next identity).
    """

    def handle(self, now_ms: int, event: Any) -> list[Effect]:
        invariant(now_ms >= self.now_ms, lambda: f"time went backwards: {now_ms} < {self.now_ms}")
        self.now_ms = now_ms
        self.out = []
        if isinstance(event, Receive):
            self._receive(event)
        elif isinstance(event, TimerFired):
            if event.name == TICK:
                self._tick()
        elif isinstance(event, Start):
            self.started_ms = now_ms
            self._tick()
        else:
            raise TypeError(f"unknown event {type(event).__name__}")
        if self.drive_requested:
            # A migration ended during this event: start the next ones now, not on the next tick.
            self.drive_requested = False
            if self.is_master:
                self.drive_migrations()
        out, self.out = self.out, []
        return out

    def _receive(self, event: Receive) -> None:
        message = event.message
        kind = type(message)
        if kind in _FROM_CLIENTS:
            getattr(self, _FROM_CLIENTS[kind])(event.sender_address, message)
            return
        if kind is m.JoinRequest:
            self.on_join_request(message)
            return
        if kind is m.JoinRedirect:
            self.on_join_redirect(message)
            return
        handler = _FROM_MEMBERS.get(kind)
        sender = event.sender
        if handler is None or sender is None:
            return  # not a message this member understands from this sender: ignored
        if event.target_uuid is not None and event.target_uuid != self.identity.uuid:
            return  # meant for an earlier incarnation of this address
        if not self.joined and kind is not m.MemberListUpdate:
            return
        if self.is_member(sender):
            self.heard_from(sender)
            if sender == self.master and self.accepted_claimant not in (None, sender):
                return  # the old master is fenced off once a new one's claim was accepted
        elif kind not in _FROM_ANYONE:
            if self.joined:
                self.send(sender, m.NotAMember(self.member_list_version, self.term))
            return
        getattr(self, handler)(sender, message)

    def deliver_to_self(self, message: Any) -> None:
        handler = _FROM_MEMBERS[type(message)]
        getattr(self, handler)(self.identity, message)

    def _tick(self) -> None:
        if self.last_tick_ms and self.now_ms - self.last_tick_ms > self.config.failure_timeout_ms // 2:
            # This process stood still (a pause, a stalled VM). What it hears now may be old news
            # that was waiting in buffers: it removes nobody and claims nothing until fresh
            # messages had time to tell it how the cluster moved on.
            self.distrust_until_ms = self.now_ms + self.config.failure_timeout_ms
        self.last_tick_ms = self.now_ms
        self.membership_tick()
        if self.joined:
            self.recovery_tick()
            self.migration_master_tick()
            self.publication_tick()
            self.replica_migration_tick()
            self.data_tick()
        self.set_timer(TICK, self.now_ms + self.config.tick_ms)
