"""Joining, heartbeats, failure detection, member removal and the election of a new master.

The oldest member is the master. The master alone admits and removes members and publishes the
versioned member list. A master removes silent members only while it still hears from a majority
of its list, so a master cut off from the cluster cannot declare everyone else dead and carry on
alone; likewise a member claims mastership only with a majority's agreement that the old master
(and every older member) is gone. Clusters of one or two members cannot have a majority without
everyone, so they act without one (like Hazelcast without split-brain protection).
"""

from __future__ import annotations

import uuid

from shardgrid.core import events
from shardgrid.core.identity import Replica
from shardgrid.core.member.state import Claim, MemberState
from shardgrid.core.messages import (
    Heartbeat,
    JoinRedirect,
    JoinRequest,
    MastershipClaim,
    MastershipClaimReply,
    MemberEntry,
    MemberListUpdate,
    NotAMember,
)


class Membership(MemberState):
    # --- joining -------------------------------------------------------------------------------

    def membership_tick(self) -> None:
        if not self.joined:
            self._try_join()
            return
        if self.now_ms - self.last_heartbeat_ms >= self.config.heartbeat_interval_ms:
            self.last_heartbeat_ms = self.now_ms
            stamp = self.table.stamp if self.table is not None else None
            for other in self.others():
                self.send(other, Heartbeat(self.member_list_version, stamp, self.term))
        if self.accepted_claimant is not None and self.now_ms - self.accepted_claim_ms > self.config.failure_timeout_ms:
            self.accepted_claimant = None  # that claim never won: hear the old master again
        if self.now_ms < self.distrust_until_ms:
            return
        suspected = self.suspected_members()
        if self.is_master:
            if not self.has_quorum(suspected):
                self.quorum_lost_ms = self.now_ms
            elif suspected and self.now_ms - self.quorum_lost_ms > self.config.failure_timeout_ms:
                # Only after a majority has been heard for a whole failure timeout: right after a
                # split heals, members whose first heartbeat is still on its way are not dead.
                self.remove_members(suspected)
        elif self.master is not None and self.master in suspected:
            self._try_claim(suspected)
        if self.claim is not None and self.now_ms - self.claim.last_sent_ms >= self.config.retry_interval_ms:
            self.claim.last_sent_ms = self.now_ms
            for member in self.others():
                if member not in self.claim.suspected and member not in self.claim.accepted:
                    self.send(member, MastershipClaim(self.member_list_version, self.claim.suspected, self.term + 1))

    def _try_join(self) -> None:
        first_seed = self.seed_addresses[0] if self.seed_addresses else self.identity.address
        alone_long_enough = self.now_ms - self.started_ms >= self.config.bootstrap_after_ms
        if first_seed == self.identity.address and alone_long_enough and not self.heard_from_cluster:
            self._bootstrap()
            return
        if self.now_ms - self.last_join_sent_ms >= self.config.join_retry_ms:
            self.last_join_sent_ms = self.now_ms
            for address in self.seed_addresses:
                if address != self.identity.address:
                    self.send_to_address(address, JoinRequest(self.identity, self.lite))

    def _bootstrap(self) -> None:
        """The first seed heard from nobody: it starts the cluster and is its master."""
        self.joined = True
        self.master = self.identity
        self.member_list_version = 1
        self.term = 1
        self.members = (MemberEntry(self.identity, self.lite),)
        self.emit(events.MasterChanged(self.identity, 1))
        self.emit(events.MemberAdded(self.identity, 1))
        self.on_became_master(recover=False)

    def on_join_request(self, message: JoinRequest) -> None:
        joiner = message.member
        if not self.is_master:
            master_address = self.master.address if self.joined and self.master else None
            self.send_to_address(joiner.address, JoinRedirect(master_address))
            return
        if self.recovery is not None or self.claim is not None:
            return  # the joiner retries once this master knows the cluster's state
        if not self.has_quorum(self.suspected_members()):
            return  # cut off from most of its cluster: it must not grow a second one
        if self.is_member(joiner):
            self._send_member_list(joiner)
            return
        previous = [e.replica for e in self.members if e.replica.address == joiner.address]
        if previous:
            self.remove_members(previous)  # a restarted process: its old identity is dead
        self.members = (*self.members, MemberEntry(joiner, message.lite))
        self.member_list_version += 1
        self.last_heard[joiner] = self.now_ms
        self.emit(events.MemberAdded(joiner, self.member_list_version))
        for member in self.others():
            self._send_member_list(member)
        self.on_member_joined(joiner, message.lite)

    def on_join_redirect(self, message: JoinRedirect) -> None:
        if message.master_address is not None:
            self.heard_from_cluster = True  # a cluster with a master exists: never start a second one
        if not self.joined and message.master_address and message.master_address != self.identity.address:
            self.send_to_address(message.master_address, JoinRequest(self.identity, self.lite))

    def _send_member_list(self, member: Replica) -> None:
        assert self.master is not None
        self.send(member, MemberListUpdate(self.member_list_version, self.master, self.members, self.term))

    def on_member_list(self, sender: Replica, message: MemberListUpdate) -> None:
        if sender != message.master or (message.term, message.version) <= (self.term, self.member_list_version):
            return
        listed = {e.replica for e in message.members}
        if self.identity not in listed:
            if self.joined:
                self.rejoin_as_new_member()
            return
        before = set(self.member_replicas())
        previous_master = self.master
        self.members = message.members
        self.member_list_version = message.version
        self.term = message.term
        self.master = message.master
        self.joined = True
        self.claim = None
        self.accepted_claimant = None
        for entry in message.members:
            if entry.replica not in before:
                self.last_heard[entry.replica] = self.now_ms
                self.emit(events.MemberAdded(entry.replica, message.version))
        departed = [m for m in sorted(before) if m not in listed]
        for member in departed:
            self.last_heard.pop(member, None)
            self.emit(events.MemberRemoved(member, message.version))
        if previous_master != message.master:
            self.emit(events.MasterChanged(message.master, message.version))
        if departed:
            self.on_members_departed(departed)

    # --- failure detection ---------------------------------------------------------------------

    def heard_from(self, member: Replica) -> None:
        self.last_heard[member] = self.now_ms

    def suspected_members(self) -> list[Replica]:
        limit = self.config.failure_timeout_ms
        return [m for m in self.others() if self.now_ms - self.last_heard.get(m, self.now_ms) > limit]

    def has_quorum(self, suspected: list[Replica]) -> bool:
        """Whether this member hears, right now, from a majority of its member list.

        "Right now" is two heartbeat intervals, far shorter than the failure timeout: a member cut
        off from the others stops hearing from all of them at once, instead of suspecting them
        one by one and always finding the shrinking rest a majority of what is left.
        """
        size = len(self.members)
        if size <= 2 or not self.config.split_brain_protection:
            return True
        recent_ms = 2 * self.config.heartbeat_interval_ms
        heard = 1 + sum(
            1
            for m in self.others()
            if m not in suspected and self.now_ms - self.last_heard.get(m, -(10**9)) <= recent_ms
        )
        return heard * 2 > size

    def on_heartbeat(self, sender: Replica, message: Heartbeat) -> None:
        if not self.is_member(sender):
            if self.joined and (message.term, message.member_list_version) < (self.term, self.member_list_version):
                self.send(sender, NotAMember(self.member_list_version, self.term))
            return
        if not self.is_master:
            return
        if (message.term, message.member_list_version) < (self.term, self.member_list_version):
            self._send_member_list(sender)  # it missed an update (a lost message)
        elif (
            self.table is not None
            and self.recovery is None
            and message.table_stamp != self.table.stamp
            and self.now_ms - self.table_changed_ms >= self.config.heartbeat_interval_ms
        ):
            self.publish_full(to=[sender])  # the table is quiet and it still differs: it missed some

    def on_not_a_member(self, sender: Replica, message: NotAMember) -> None:
        newer = (message.term, message.member_list_version) > (self.term, self.member_list_version)
        if self.joined and self.is_member(sender) and newer:
            self.rejoin_as_new_member()

    def rejoin_as_new_member(self) -> None:
        """Removed while away (paused, cut off): drop everything and join again with a new identity."""
        old = self.identity
        new = Replica(str(uuid.UUID(int=self.rng.getrandbits(128), version=4)), old.address)
        seeds, config, rng, lite, now_ms, out = (
            self.seed_addresses,
            self.config,
            self.rng,
            self.lite,
            self.now_ms,
            self.out,
        )
        MemberState.__init__(self, new, config, seeds, rng, lite)
        self.now_ms = self.started_ms = now_ms
        self.out = out
        self.heard_from_cluster = True  # the cluster that removed us exists: never start another
        self.emit(events.RemovedFromCluster(old, new))

    # --- removal (master) ----------------------------------------------------------------------

    def remove_members(self, departed: list[Replica]) -> None:
        departed = sorted(set(departed))
        self.members = tuple(e for e in self.members if e.replica not in departed)
        self.member_list_version += 1
        for member in departed:
            self.last_heard.pop(member, None)
            self.emit(events.MemberRemoved(member, self.member_list_version))
        for member in self.others():
            self._send_member_list(member)
        self.on_members_departed(departed)

    # --- a new master --------------------------------------------------------------------------

    def _try_claim(self, suspected: list[Replica]) -> None:
        alive_older = [e.replica for e in self.members if e.replica not in suspected and e.replica != self.identity]
        order = [e.replica for e in self.members]
        if any(order.index(m) < order.index(self.identity) for m in alive_older):
            return  # an older member that is alive will claim
        if self.claim is not None and self.now_ms - self.claim.started_ms < self.config.failure_timeout_ms:
            return
        self.claim = Claim(tuple(suspected), {self.identity}, self.now_ms, self.now_ms)
        for member in self.others():
            if member not in suspected:
                self.send(member, MastershipClaim(self.member_list_version, tuple(suspected), self.term + 1))
        self._maybe_win_claim()

    def on_mastership_claim(self, sender: Replica, message: MastershipClaim) -> None:
        order = [e.replica for e in self.members]
        my_suspects = set(self.suspected_members())
        accepted = (
            self.is_member(sender)
            and not self.is_master
            and self.accepted_claimant in (None, sender)  # one vote per election
            and message.member_list_version == self.member_list_version
            and message.term > self.term
            and self.master in my_suspects
            and all(m in my_suspects or m == sender for m in order[: order.index(sender)])
        )
        if accepted:
            self.accepted_claimant = sender  # from now on the old master is fenced off here...
            self.accepted_claim_ms = self.now_ms  # ...until the claim wins or times out
        newer = (self.term, self.member_list_version) > (message.term - 1, message.member_list_version)
        members = self.members if not accepted and newer else ()
        self.send(sender, MastershipClaimReply(self.member_list_version, accepted, self.term, members))

    def on_mastership_claim_reply(self, sender: Replica, message: MastershipClaimReply) -> None:
        if self.claim is None:
            return
        if not message.accepted:
            self.claim = None
            self._catch_up_member_list(message)
            return
        self.claim.accepted.add(sender)
        self._maybe_win_claim()

    def _catch_up_member_list(self, reply: MastershipClaimReply) -> None:
        """Adopt the newer list of the same (silent) master a voter refused us with."""
        if not reply.newer_members or (reply.term, reply.member_list_version) <= (self.term, self.member_list_version):
            return
        if reply.term != self.term or not any(e.replica == self.identity for e in reply.newer_members):
            return
        known = set(self.member_replicas())
        for entry in reply.newer_members:
            if entry.replica not in known:
                self.last_heard[entry.replica] = self.now_ms
                self.emit(events.MemberAdded(entry.replica, reply.member_list_version))
        self.members = reply.newer_members
        self.member_list_version = reply.member_list_version

    def _maybe_win_claim(self) -> None:
        assert self.claim is not None
        size = len(self.members)
        if self.config.split_brain_protection:
            if not (size <= 2 or len(self.claim.accepted) * 2 > size):
                return
        elif len(self.claim.accepted) < size - len(self.claim.suspected):
            return  # every member not suspected must agree
        suspected = list(self.claim.suspected)
        self.claim = None
        self.master = self.identity
        self.members = tuple(e for e in self.members if e.replica not in suspected)
        self.member_list_version += 1
        self.term += 1
        self.emit(events.MasterChanged(self.identity, self.member_list_version))
        for member in sorted(suspected):
            self.last_heard.pop(member, None)
            self.emit(events.MemberRemoved(member, self.member_list_version))
        for member in self.others():
            self._send_member_list(member)
        self.on_became_master(recover=True, departed=suspected)
