"""Finding the cluster to join, or the peers to form the first one with.

A process that belongs to no cluster sends ``JoinRequest`` to every address it knows (its seeds,
and, after a removal, every member of the cluster it last knew) until it is a member. A member of a
cluster answers with where the leader is; the leader admits it through the log. A process that
belongs to no cluster either answers ``Unjoined``, saying whether it has heard of one.

A brand-new cluster forms only when all of these hold for the process that proposes it:
- it has never heard of a cluster (a member's answer, a refusal, or a peer that heard of one);
- ``initial_cluster_size`` processes that have never heard of a cluster found each other, and they
  include more than half of the seed addresses (so processes restarted on a minority of the seed
  hosts, cut off from their cluster, can never form a second one between them);
- it has been in contact with them for ``bootstrap_after_ms`` (time spent cut off does not count:
  a process that regains the network first hears whether a cluster answers);
- it is the first of them by seed order, then address, then identity.
Every founder starts the same log from the founding message; a process that has heard of a
cluster refuses one.
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
        self.peers: dict[Replica, tuple[bool, int]] = {}  # unjoined peer that never heard of a cluster -> (lite, when)
        self.first_contact_ms: int | None = None  # when another process first answered or asked
        self.leader_address: str | None = None
        self.rejected_reason = ""
        self._last_probe_ms = -(10**12)

    def tick(self, asked: set[str]) -> Bootstrap | None:
        """Probe what is due; returns the founding message when this process should bootstrap
        (the caller ignores it once it holds a log)."""
        config = self.ctx.config
        if self.ctx.now_ms - self._last_probe_ms >= config.join_retry_ms:
            self._last_probe_ms = self.ctx.now_ms
            request = JoinRequest(self.ctx.identity, self.ctx.lite, self.cluster_seen, self._digest)
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
            request = JoinRequest(self.ctx.identity, self.ctx.lite, True, self._digest)
            self.ctx.send_to_address(message.leader_address, request)

    def on_rejected(self, message: JoinRejected) -> None:
        self.cluster_seen = True
        self.rejected_reason = message.reason

    @property
    def _digest(self) -> str:
        return self.ctx.config.settings_digest

    def on_unjoined(self, message: Unjoined) -> None:
        if message.settings_digest == self._digest:  # never found a cluster with other settings
            self._heard_peer(message.member, message.lite, message.heard_of_cluster)
        elif message.heard_of_cluster:
            self.cluster_seen = True  # its news that a cluster exists holds whatever its settings

    def on_join_request(self, message: JoinRequest) -> None:
        """Another process looking for a cluster: it is a peer, and it should know we are one."""
        if message.member == self.ctx.identity:
            return
        if message.settings_digest != self._digest:
            # Not a peer: a cluster formed with it would disagree on what every member keeps. Its
            # news that a cluster exists still holds.
            self.cluster_seen = self.cluster_seen or message.heard_of_cluster
            return
        self._heard_peer(message.member, message.lite, message.heard_of_cluster)
        reply = Unjoined(self.ctx.identity, self.ctx.lite, self.cluster_seen, self._digest)
        self.ctx.send_to_address(message.member.address, reply)

    def _heard_peer(self, peer: Replica, lite: bool, heard_of_cluster: bool) -> None:
        if peer == self.ctx.identity:
            return
        if self.first_contact_ms is None:
            self.first_contact_ms = self.ctx.now_ms
        if heard_of_cluster:
            self.cluster_seen = True  # a cluster exists: we join it, we do not found another
        else:
            self.peers[peer] = (lite, self.ctx.now_ms)

    def accepts(self, sender: Replica | None, message: Bootstrap) -> bool:
        """Whether to found the cluster ``message`` describes: one that names this process, sent
        by a founder this process found, with voters among its members, as long as it never heard
        of another cluster (founders send it again to a founder that missed it)."""
        if self.cluster_seen or sender is None or (sender != self.ctx.identity and sender not in self.peers):
            return False
        members = {m.replica for m in message.members}
        return self.ctx.identity in members and bool(message.voters) and set(message.voters) <= members

    # --- forming a new cluster -------------------------------------------------------------------

    def _founding(self) -> Bootstrap | None:
        config = self.ctx.config
        now = self.ctx.now_ms
        if self.cluster_seen or now - self.started_ms < config.bootstrap_after_ms:
            return None
        if config.initial_cluster_size > 1 and (
            self.first_contact_ms is None or now - self.first_contact_ms < config.bootstrap_after_ms
        ):
            return None
        fresh_ms = PEER_FRESH_RETRIES * config.join_retry_ms
        peers = {p: lite for p, (lite, heard) in self.peers.items() if now - heard <= fresh_ms}
        peers[self.ctx.identity] = self.ctx.lite
        if len(peers) < config.initial_cluster_size or all(peers.values()):
            return None
        seeds = set(self.ctx.seed_addresses) or {self.ctx.identity.address}
        at_seeds = {p.address for p in peers} & seeds
        if len(at_seeds) * 2 <= len(seeds):
            return None  # not a majority of the seed hosts: they may be a cut-off part of a cluster
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
