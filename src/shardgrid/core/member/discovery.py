"""Finding the cluster to join, or the peers to form the first one with.

A process that belongs to no cluster sends ``JoinRequest`` to every address it knows (its seeds,
and, after a removal, every member of the cluster it last knew) until it is a member. A member of a
cluster answers with where the leader is; the leader admits it through the log. A process that
belongs to no cluster either answers ``Unjoined``.

A brand-new cluster forms only when ``initial_cluster_size`` such processes found each other and
none of them heard of an existing cluster; the first of them (by seed order, then address, then
identity) proposes the founding members and all of them start the same log. So a lone process
that restarts cut off from its cluster never forms a second one, and a process that has ever
heard of a cluster (or was a member of one) never forms a cluster at all.
"""

from __future__ import annotations

from shardgrid.core.identity import Replica
from shardgrid.core.member.context import Context
from shardgrid.core.messages import Bootstrap, JoinRedirect, JoinRejected, JoinRequest, Unjoined
from shardgrid.core.metadata import MemberRecord

# A peer not heard from for this many join retries is no longer counted towards a bootstrap.
PEER_FRESH_RETRIES = 3


class Discovery:
    def __init__(self, ctx: Context, known_addresses: tuple[str, ...], cluster_seen: bool) -> None:
        self.ctx = ctx
        self.known_addresses = tuple(dict.fromkeys((*ctx.seed_addresses, *known_addresses)))
        self.cluster_seen = cluster_seen
        self.started_ms = ctx.now_ms
        self.peers: dict[Replica, tuple[bool, int]] = {}  # unjoined peer -> (lite, when heard)
        self.leader_address: str | None = None
        self.rejected_reason = ""
        self._last_probe_ms = -(10**12)

    def tick(self, asked: set[str]) -> Bootstrap | None:
        """Probe what is due; returns the founding message when this process should bootstrap
        (the caller ignores it once it holds a log)."""
        config = self.ctx.config
        if self.ctx.now_ms - self._last_probe_ms >= config.join_retry_ms:
            self._last_probe_ms = self.ctx.now_ms
            request = JoinRequest(self.ctx.identity, self.ctx.lite)
            targets = list(self.known_addresses)
            if self.leader_address is not None and self.leader_address not in targets:
                targets.append(self.leader_address)
            for address in targets:
                if address != self.ctx.identity.address:
                    asked.add(address)
                    self.ctx.send_to_address(address, request)
        return self._founding()

    def on_redirect(self, message: JoinRedirect, asked: set[str]) -> None:
        self.cluster_seen = True  # a cluster exists: never form another one
        if message.leader_address is not None and message.leader_address != self.ctx.identity.address:
            self.leader_address = message.leader_address
            asked.add(message.leader_address)
            self.ctx.send_to_address(message.leader_address, JoinRequest(self.ctx.identity, self.ctx.lite))

    def on_rejected(self, message: JoinRejected) -> None:
        self.cluster_seen = True
        self.rejected_reason = message.reason

    def on_unjoined(self, message: Unjoined) -> None:
        if message.member != self.ctx.identity:
            self.peers[message.member] = (message.lite, self.ctx.now_ms)

    def on_join_request(self, message: JoinRequest) -> None:
        """Another process looking for a cluster: it is a peer, and it should know we are one."""
        if message.member == self.ctx.identity:
            return
        self.peers[message.member] = (message.lite, self.ctx.now_ms)
        self.ctx.send_to_address(message.member.address, Unjoined(self.ctx.identity, self.ctx.lite))

    def accepts(self, message: Bootstrap) -> bool:
        """Whether to found the cluster ``message`` describes: the one that names this very process
        (its identity is unique, so the cluster it may have heard of is this one)."""
        return any(m.replica == self.ctx.identity for m in message.members)

    # --- forming a new cluster -------------------------------------------------------------------

    def _founding(self) -> Bootstrap | None:
        config = self.ctx.config
        if self.cluster_seen or self.ctx.now_ms - self.started_ms < config.bootstrap_after_ms:
            return None
        fresh_ms = PEER_FRESH_RETRIES * config.join_retry_ms
        peers = {p: lite for p, (lite, heard) in self.peers.items() if self.ctx.now_ms - heard <= fresh_ms}
        peers[self.ctx.identity] = self.ctx.lite
        if len(peers) < config.initial_cluster_size or all(peers.values()):
            return None
        ordered = sorted(peers, key=self._order)
        if ordered[0] != self.ctx.identity:
            return None  # the first of us proposes; we wait for its Bootstrap
        members = tuple(MemberRecord(p, peers[p]) for p in ordered)
        data = [p for p in ordered if not peers[p]]
        voters = tuple(sorted(data[: config.voter_target(len(data))]))
        return Bootstrap(members, voters)

    def _order(self, replica: Replica) -> tuple[int, str, str]:
        seeds = self.ctx.seed_addresses
        position = seeds.index(replica.address) if replica.address in seeds else len(seeds)
        return (position, replica.address, replica.uuid)
