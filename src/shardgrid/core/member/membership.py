"""The leader's duties towards the member list, every one through the log.

- Joins: a joiner is added as a Raft learner together with its member record, in one entry; many
  joiners that ask together share it. A restarted process (a new identity at an old address)
  replaces its dead predecessor in the same entry.
- Removals: a member the leader has not heard from for ``failure_timeout_ms`` is removed, but only
  once its lease has certainly expired (it may still be serving on the other side of a split),
  never while the leader itself just stood still, and not while a migration it takes part in waits
  for its destination's commit answer. The log applies the repair (promotions of surviving
  replicas, lost partitions) on every member alike.
- Voters: ``max_voters`` of the data members vote (an odd count); the leader promotes caught-up
  learners and demotes the rest, one change at a time, and hands its leadership over before it is
  itself demoted for leaving.
- Leaving: a member shutting down gracefully is removed once it holds no replica and takes part in
  no migration.
- Hot restart: a leader back from its disk gives the members it has not heard from since it leads
  until ``hot_restart_timeout_ms`` after its restart, instead of the failure timeout: a cluster
  restarted from its disks neither removes nor repairs around members slow to come back. Past it,
  ``hot_restart_policy`` says what becomes of those still away (waited for; removed at once; or
  handled as crashed members).
- Moves: a persistent member back from its data directory at another address asks to be renamed
  (``JoinRequest.moved_from``). Once its old incarnation is certainly gone (silent past its lease),
  the leader demotes it if it votes, then replaces the learner by one at the new address in one
  entry with ``ReaddressMember``: the table names it there and nothing moves (a learner's
  replacement never touches a majority). One whose old identity is no longer a member was removed
  while away: it is told so and joins as a new member, its stale replicas dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardgrid.core import events, limits
from shardgrid.core.identity import MemberId
from shardgrid.core.limits import NEVER_MS
from shardgrid.core.member.admin import Respond
from shardgrid.core.member.consensus import Consensus
from shardgrid.core.member.context import Context
from shardgrid.core.member.leases import Leases
from shardgrid.core.member.migration_leader import MigrationLeader
from shardgrid.core.messages import (
    ADMIN_FAILED,
    ADMIN_OK,
    ADMIN_UNAVAILABLE,
    JoinRedirect,
    JoinRejected,
    JoinRequest,
    NotAMember,
)
from shardgrid.core.metadata import MetadataState
from shardgrid.core.metadata.commands import (
    AddMembers,
    AwaitMembers,
    MarkReachable,
    MarkUnreachable,
    MemberRecord,
    ReaddressMember,
    RemoveMembers,
)
from shardgrid.core.raft import ConfChange

SEED_PROBE_EVERY_JOIN_RETRIES = 10  # the leader tells seed addresses no member holds where it is
MOVER_FRESH_JOIN_RETRIES = 5  # a mover not heard from for this many join retries is forgotten


@dataclass(frozen=True, slots=True)
class VoterPool:
    """Who may vote: the staying data members, the leaving voters still alive, the staying
    learners ready to be promoted, and how many voters to have."""

    staying: list[MemberId]
    parting: list[MemberId]
    candidates: list[MemberId]
    target: int

    def replacement_due(self, voters: set[MemberId]) -> bool:
        """Whether a staying learner is to be promoted (before a leaving voter goes)."""
        fit = sum(1 for v in voters if v in self.staying)
        return bool(self.candidates) and fit < min(self.target, len(self.staying))


class MembershipLeader:
    def __init__(self, ctx: Context, consensus: Consensus, leases: Leases, migration_leader: MigrationLeader) -> None:
        self.ctx = ctx
        self.consensus = consensus
        self.leases = leases
        self.migration_leader = migration_leader
        self.joiners: dict[MemberId, bool] = {}  # waiting to be added -> lite
        # A member back at a new address -> (the identity its directory holds, when it last asked).
        self.movers: dict[MemberId, tuple[MemberId, int]] = {}
        # Processes that claimed a member's identity while it answered -> when (bounded as movers).
        self._impostors: dict[MemberId, int] = {}
        self.last_heard: dict[MemberId, int] = {}
        self.distrust_until_ms = 0
        self.leader_since_ms = 0
        self._last_seed_probe_ms = 0  # a new leader waits one probe interval before its first
        self._last_mark_ms = NEVER_MS  # when it last proposed members unreachable or reachable
        # Members an operator said are gone for good (``RemoveMember``): removed now, even when they
        # hold the last replicas of a partition; each answered once its removal is applied.
        self._removals: dict[MemberId, tuple[Respond, int]] = {}
        # When this member came back from its disk (None: it did not), and the members it heard
        # from since (as follower too): a leader that came back from its disk lately marks the
        # others awaited, in the log, so that any leader waits for them.
        self._restarted_ms: int | None = None
        self._heard_since_restart: set[MemberId] = set()
        self._heard: set[MemberId] = set()  # members heard from in this leadership
        self._awaits_proposed = False  # this leadership marked the members it waits for
        self._gave_up_reported = False  # (said once a leadership that it waits on, or gave up)
        # Voters an operator's recovery (``shardgrid recover``) left behind as lost for good:
        # removed once silent past the failure timeout, even when they hold the last replicas of a
        # partition (kept across a change of leader: the recovery said they never come back).
        self._given_up: set[MemberId] = set()

    def restarted(self) -> None:
        """This member came back from its disk: as leader soon after, it marks the members it has
        not heard from since awaited (the cluster is restarting from its disks)."""
        self._restarted_ms = self.ctx.now_ms
        self._heard_since_restart = set()

    @property
    def awaited(self) -> tuple[MemberId, ...]:
        """The members this leader waits for as a hot restart's (none once it gave up on them)."""
        return tuple(sorted(m for m in self.consensus.state.awaited_members if self._awaiting(m)))

    def give_up(self, members: tuple[MemberId, ...]) -> None:
        """The operator recovered from a lost majority at this member: ``members`` never come back."""
        self._given_up.update(members)

    def reset(self) -> None:
        removals, self._removals = self._removals, {}
        for respond, _ in removals.values():
            respond(ADMIN_UNAVAILABLE, "the leader changed before the removal was applied; ask again")
        self.joiners = {}
        self.movers = {}
        self._impostors = {}
        self._heard = set()
        self._awaits_proposed = False
        self._gave_up_reported = False
        self.last_heard = {}
        self.leader_since_ms = self.ctx.now_ms
        self._last_seed_probe_ms = self.ctx.now_ms

    def heard_from(self, member: MemberId) -> None:
        self.last_heard[member] = self.ctx.now_ms
        self._heard.add(member)
        if self._restarted_ms is not None:
            self._heard_since_restart.add(member)
        if self.movers:
            # The member a process at a new address claims to be answers after the claim: that
            # process runs on a copy of its directory (found by an outside tester: renamed once the
            # member died, the copy served values older than the member had acknowledged).
            for mover in [m for m, (old, _) in self.movers.items() if old == member]:
                del self.movers[mover]
                self._impostors[mover] = self.ctx.now_ms

    def stood_still(self) -> None:
        """The process was paused: what it knows of others' silence is stale for a while."""
        self.distrust_until_ms = self.ctx.now_ms + self.ctx.config.failure_timeout_ms

    # --- joins -------------------------------------------------------------------------------------

    def on_join_request(self, message: JoinRequest) -> None:
        state = self.consensus.state
        joiner = message.member
        if state.is_member(joiner):
            return  # already added: the log reaches it
        if joiner.address == self.ctx.identity.address:
            self.ctx.send_to_address(joiner.address, JoinRejected("that address is the leader's own"))
            return
        if message.settings_digest != self.ctx.config.settings_digest:
            reason = "its partition count or map replication settings differ from this cluster's"
            self.ctx.send_to_address(joiner.address, JoinRejected(reason))
            return
        if message.moved_from is not None:
            self._on_moved(message, message.moved_from)
            return
        if state.shut_down or not state.cluster_state.join_allowed:
            reason = (
                "the cluster is shutting down" if state.shut_down else f"the cluster is {state.cluster_state.value}"
            )
            self.ctx.send_to_address(joiner.address, JoinRejected(reason))
            return
        # One joiner waits per address: a newer incarnation (a process restarting in a loop, or a
        # stranger's claim) takes the place of an older one.
        for older in [j for j in self.joiners if j.address == joiner.address and j != joiner]:
            del self.joiners[older]
        addresses = {r.address for r in state.member_ids}
        adding = sum(1 for j in self.joiners if j.address not in addresses and j != joiner)
        if joiner.address not in addresses and self._member_count() + adding >= limits.MAX_MEMBER_COUNT:
            self._turn_away_at_limit(joiner)
            return
        if joiner in self.joiners or len(self.joiners) < self.ctx.config.max_pending_joins:
            self.joiners[joiner] = message.lite

    def _on_moved(self, message: JoinRequest, old: MemberId) -> None:
        """A persistent member back at a new address asks to be renamed (whatever the cluster
        state: it is no new member, and its partitions wait for it)."""
        state = self.consensus.state
        mover = message.member
        if old.uuid != mover.uuid or old.address == mover.address or old == self.ctx.identity:
            reason = f"{old} is not a member that moved to {mover.address}"
            self.ctx.send_to_address(mover.address, JoinRejected(reason))
            return
        if not state.is_member(old):
            # Removed while away (its replicas were made again elsewhere): it rejoins as a new
            # member, dropping what it holds. It takes this only from a log that went past its own.
            # To that process alone (its uuid): another at its address ignores it (found by an
            # outside tester: a forged request named a follower's address, and the follower left).
            self.ctx.send(mover, NotAMember(self.consensus.raft.commit_index))
            return
        if mover in self._impostors:
            # Its data is not that member's: it drops it and joins as a new member.
            self._impostors[mover] = self.ctx.now_ms
            self.ctx.send(mover, NotAMember(self.consensus.raft.commit_index))
            return
        if mover in self.movers or len(self.movers) < self.ctx.config.max_pending_joins:
            self.movers[mover] = (old, self.ctx.now_ms)

    def _member_count(self) -> int:
        """Members by the newest configuration, one not yet committed included."""
        membership = self.consensus.raft.membership
        return len(membership.voters) + len(membership.learners)

    def _turn_away_at_limit(self, joiner: MemberId) -> None:
        # Beyond it the member list no longer fits the bounds every member decodes it with.
        reason = f"the cluster has its {limits.MAX_MEMBER_COUNT} members"
        self.ctx.send_to_address(joiner.address, JoinRejected(reason))

    # --- every tick, on the leader -------------------------------------------------------------------

    def tick(self) -> None:
        if not self.consensus.leader_ready:
            return
        state = self.consensus.state
        now = self.ctx.now_ms
        for member in state.member_ids:
            self.last_heard.setdefault(member, now)
        for gone in [m for m in self.last_heard if not state.is_member(m)]:
            del self.last_heard[gone]
        self._hot_restart(state)
        if now - self._last_seed_probe_ms >= SEED_PROBE_EVERY_JOIN_RETRIES * self.ctx.config.join_retry_ms:
            self._last_seed_probe_ms = now
            self._probe_seeds(state)
        if self.consensus.raft.can_change_configuration() and not self._parting(state):
            self._change_configuration()
        self._mark_reachability(state)
        self._answer_removals()

    def _hot_restart(self, state: MetadataState) -> None:
        """A leader back from its disk lately marks awaited the members it has not heard from
        since (once a leadership, in the log: a leader that takes over goes on waiting); past the
        wait, the policy for those still away."""
        config = self.ctx.config
        now = self.ctx.now_ms
        restarted = self._restarted_ms
        me = self.ctx.identity
        self._heard_since_restart = {m for m in self._heard_since_restart if state.is_member(m)}
        if (
            not self._awaits_proposed
            and restarted is not None
            and now < restarted + config.hot_restart_timeout_ms
            and self.consensus.raft.can_change_configuration()  # (the log is this leader's by now)
        ):
            self._awaits_proposed = True
            away = tuple(
                sorted(
                    r.id
                    for r in state.members
                    if r.id != me and r.id not in self._heard_since_restart and not r.unreachable and not r.awaited
                )
            )
            if away:
                self.consensus.propose(AwaitMembers(away))
        awaited = [m for m in state.awaited_members if m not in self._removals]
        if not awaited or now < self._wait_ends_ms():
            return
        policy = config.hot_restart_policy
        if not self._gave_up_reported:
            self._gave_up_reported = True
            self.ctx.emit(events.HotRestartIncomplete(tuple(sorted(awaited)), policy))
        if policy == "partial_recovery_most_recent":
            self._given_up.update(awaited)  # removed at once: what only they held is lost

    def _wait_ends_ms(self) -> int:
        """When this leader's wait for awaited members ends: ``hot_restart_timeout_ms`` after its
        own restart, or after it took over when it came to lead a wait begun by another leader."""
        timeout_ms = self.ctx.config.hot_restart_timeout_ms
        restarted = self._restarted_ms
        ends = self.leader_since_ms + timeout_ms
        if restarted is not None and restarted + timeout_ms > self.leader_since_ms:
            ends = restarted + timeout_ms
        return ends

    def _awaiting(self, member: MemberId) -> bool:
        """Whether ``member`` is waited for as a hot restart's now (an operator's removal goes first)."""
        record = self.consensus.state.record_of(member)
        if record is None or not record.awaited or member in self._removals or member in self._given_up:
            return False
        return self.ctx.config.hot_restart_policy == "full_recovery_only" or self.ctx.now_ms < self._wait_ends_ms()

    def _probe_seeds(self, state: MetadataState) -> None:
        """Tell whoever runs at a seed address that is no member's where this cluster is. A member
        removed while cut off looks for the cluster only at its own seeds and the members it last
        knew; once all of those have gone (they left, and members that joined later hold the
        data) it found nobody and stayed discovering for good (found by an outside tester in the
        simulator). Hazelcast's leader looks at its seed addresses the same way to merge clusters
        split apart. A process there that belongs to no cluster asks this leader to join; one that
        belongs to this cluster, or is not running, ignores it."""
        if state.shut_down or not state.cluster_state.join_allowed:
            return
        taken = {r.address for r in state.member_ids}
        redirect = JoinRedirect(self.ctx.identity.address)
        for address in self.ctx.seed_addresses:
            if address not in taken:
                self.ctx.send_to_address(address, redirect)

    def _parting(self, state: MetadataState) -> bool:
        """Whether this leader is leaving with every data member: it stops once its followers hold
        the log (``Member._part_if_nobody_stays``), and they stop as they apply it. A change now
        could only be made with voters on their way out (a demotion counted on answers from
        members that had just stopped)."""
        record = state.record_of(self.ctx.identity)
        return record is not None and record.leaving and state.parting

    def _change_configuration(self) -> None:
        """At most one configuration change at a time, the most urgent first."""
        if self._readdress_movers() or self._remove_departed() or self._admit_joiners() or self._adjust_voters():
            return

    def _readdress_movers(self) -> bool:
        """Rename one member back at a new address, once its old incarnation is certainly gone: a
        voter is demoted first (the voters left must have a majority that answers), then the
        learner is replaced by its new address in one entry with ``ReaddressMember``."""
        state = self.consensus.state
        raft = self.consensus.raft
        config = self.ctx.config
        now = self.ctx.now_ms
        forget_after_ms = MOVER_FRESH_JOIN_RETRIES * config.join_retry_ms
        quiet_ms = config.lease_ms + config.clock_drift_margin_ms
        taken = {r.address for r in state.member_ids}
        for impostor in [i for i, at_ms in self._impostors.items() if now - at_ms > forget_after_ms]:
            del self._impostors[impostor]
        for mover, (old, asked_ms) in sorted(self.movers.items()):
            if state.is_member(mover) or not state.is_member(old) or now - asked_ms > forget_after_ms:
                del self.movers[mover]
                continue
            if (
                mover.address in taken  # another member is there: waited for until it is removed
                or self._silent_ms(old) <= quiet_ms
                or not self.leases.certainly_expired(old)
                or self.migration_leader.removal_blocked(old)
            ):
                continue
            if raft.membership.is_voter(old):
                if self._answering_majority(set(raft.membership.voters) - {old}):
                    return self.consensus.propose_change(ConfChange(demote=old))
                continue
            del self.movers[mover]
            change = ConfChange(add_learners=(mover,), remove=(old,))
            return self.consensus.propose_change(change, (ReaddressMember(old, mover),))
        return False

    def _remove_departed(self) -> bool:
        state = self.consensus.state
        raft = self.consensus.raft
        me = self.ctx.identity
        removable: list[MemberId] = []
        if self.ctx.now_ms >= self.distrust_until_ms:
            silent = self._silent_members()
            kept = self._holding_the_last_replicas(state, silent)
            lost_after_ms = self.ctx.config.partition_lost_timeout_ms
            for member in silent:
                # One that holds every replica left of a partition is kept, unreachable, until
                # partition_lost_timeout_ms (a network split is not a crash); then removed for good.
                if (
                    member not in kept
                    or self._silent_ms(member) > lost_after_ms
                    or member in self._removals
                    or member in self._given_up
                ):
                    removable.append(member)
        for record in state.members:
            if record.leaving and record.id != me and self._holds_nothing(record.id):
                removable.append(record.id)
        if not removable:
            return False
        # Learners in any number; one voter per change, and only when the voters left would still
        # have a majority that answers.
        voters = [m for m in removable if raft.membership.is_voter(m)]
        chosen = sorted(set(removable) - set(voters))
        if self._voter_pool().replacement_due(set(raft.membership.voters)):
            # A voter that leaves is replaced first (``_adjust_voters``): removed before, it left
            # fewer voters for a while, and a crash then could leave no majority alive.
            voters = [m for m in voters if not self.consensus.answered_lately(m)]
        if voters and self._answering_majority(set(raft.membership.voters) - {sorted(voters)[0]}):
            chosen.append(sorted(voters)[0])
        if not chosen:
            return False
        change = ConfChange(remove=tuple(chosen))
        return self.consensus.propose_change(change, (RemoveMembers(tuple(chosen)),))

    def remove_now(self, address: str, respond: Respond) -> None:
        """The operator says the member at ``address`` is gone for good: remove it now (answered once
        applied). Only one silent past the failure timeout whose lease has certainly ended: one
        that answers is asked to leave instead, and one that may still serve is waited for."""
        state = self.consensus.state
        member = next((m for m in state.member_ids if m.address == address), None)
        config = self.ctx.config
        if member is None:
            respond(ADMIN_FAILED, f"no member of the cluster is at {address}")
        elif member == self.ctx.identity:
            respond(ADMIN_FAILED, f"{address} is the leader: it answers (ask it to leave with shutdown)")
        elif self._silent_ms(member) <= config.failure_timeout_ms and not self._never_heard_awaited(member):
            respond(
                ADMIN_FAILED,
                f"{address} answered {self._silent_ms(member)} ms ago: a member that answers is asked to "
                f"leave (shutdown), not removed; one silent for failure_timeout_ms ({config.failure_timeout_ms} ms) "
                "can be",
            )
        elif not self.leases.certainly_expired(member):
            respond(ADMIN_UNAVAILABLE, f"{address} may still hold a lease: ask again in a moment")
        else:
            self._removals[member] = (respond, self.ctx.now_ms + config.admin_timeout_ms)

    def _never_heard_awaited(self, member: MemberId) -> bool:
        """A member a hot restart waits for that this leader has not heard from: silent, whatever
        its last-heard time says (found by an outside tester: its removal was refused as 'answered
        0 ms ago')."""
        record = self.consensus.state.record_of(member)
        return record is not None and record.awaited and member not in self._heard

    def _answer_removals(self) -> None:
        state = self.consensus.state
        self._given_up = {m for m in self._given_up if state.is_member(m)}
        for member, (respond, deadline_ms) in sorted(self._removals.items()):
            if not state.is_member(member):
                del self._removals[member]
                respond(ADMIN_OK, f"{member.address} removed; the partitions only it held are reported lost")
            elif self.ctx.now_ms >= deadline_ms:
                del self._removals[member]
                respond(ADMIN_FAILED, f"{member.address} was not removed within admin_timeout_ms")

    def _silent_ms(self, member: MemberId) -> int:
        return self.ctx.now_ms - self.last_heard.get(member, self.ctx.now_ms)

    def _silent_members(self) -> list[MemberId]:
        """Members silent past the failure timeout whose leases have certainly ended: as good as
        crashed to the cluster (a cut-off member among them keeps what it holds)."""
        state = self.consensus.state
        moving = {old for old, _ in self.movers.values()}
        return [
            member
            for member in state.member_ids
            if member != self.ctx.identity
            and member not in moving  # back at a new address: renamed, not removed
            and not self._awaiting(member)  # a hot restart waits for it
            and self._silent_ms(member) > self.ctx.config.failure_timeout_ms
            and self.leases.certainly_expired(member)
            and not self.migration_leader.removal_blocked(member)
        ]

    def _holding_the_last_replicas(self, state: MetadataState, silent: list[MemberId]) -> set[MemberId]:
        """The silent members whose removal would leave a partition with no replica (all of its
        replicas silent or unreachable): those partitions are kept unavailable instead of lost,
        unless partition_lost_timeout_ms is 0 (lost at once, as a crash)."""
        table = state.table
        if table is None or not silent or not self.ctx.config.partition_lost_timeout_ms:
            return set()
        gone = set(silent) | set(state.unreachable_members)
        kept: set[MemberId] = set()
        for slots in table.replicas:
            holders = [r for r in slots if r is not None]
            if holders and all(r in gone for r in holders):
                kept.update(r for r in holders if r in silent)
        return kept

    def _mark_reachability(self, state: MetadataState) -> None:
        """As leader: mark unreachable the silent members that hold the last replicas of a
        partition (repairing what else they held), and reachable again those that answer."""
        if not self.consensus.leader_ready or self.ctx.now_ms < self.distrust_until_ms:
            return
        if self.ctx.now_ms - self._last_mark_ms < self.ctx.config.retry_interval_ms:
            return  # the last proposal is on its way through the log
        unreachable = set(state.unreachable_members)
        answering = sorted(m for m in unreachable if self._silent_ms(m) <= self.ctx.config.failure_timeout_ms)
        # An awaited member is back once this leader heard from it (its last-heard time only
        # starts with the leadership otherwise).
        answering += sorted(m for m in state.awaited_members if m in self._heard and m not in unreachable)
        if answering:
            self._last_mark_ms = self.ctx.now_ms
            self.consensus.propose(MarkReachable(tuple(answering)))
            return
        silent = self._silent_members()
        kept = self._holding_the_last_replicas(state, silent) - unreachable
        newly = sorted(m for m in kept if self._silent_ms(m) <= self.ctx.config.partition_lost_timeout_ms)
        if newly:
            self._last_mark_ms = self.ctx.now_ms
            self.consensus.propose(MarkUnreachable(tuple(newly)))

    def _presumed_alive(self, member: MemberId) -> bool:
        """Whether a voter may stay one: it answered this leader within a failure timeout, or this
        leader took over less than that ago (it has had no chance to hear from everyone yet). One
        that stood still for less (a short pause) is not a loss: demoting it would only weaken the
        voters meanwhile."""
        timeout_ms = self.ctx.config.failure_timeout_ms
        return self._answering(member, timeout_ms) or self.ctx.now_ms - self.leader_since_ms < timeout_ms

    def _answering(self, member: MemberId, within_ms: int) -> bool:
        """Whether ``member`` answered a message this leader sent within the last ``within_ms``."""
        return self.ctx.now_ms - self.consensus.raft.answered_since_ms(member) <= within_ms

    def _answering_majority(self, voters: set[MemberId]) -> bool:
        """Whether a majority of ``voters`` answered recently: a configuration of them can commit.
        A change that leaves the voters without one would stall the log for good."""
        answering = sum(1 for v in voters if self.consensus.answered_lately(v))
        return answering * 2 > len(voters)

    def _holds_nothing(self, member: MemberId) -> bool:
        state = self.consensus.state
        if state.table is not None and any(member in slots for slots in state.table.replicas):
            return False
        return not any(member in state.participants(r) for r in state.migrations.values())

    def _admit_joiners(self) -> bool:
        if not self.joiners:
            return False
        state = self.consensus.state
        requested, self.joiners = self.joiners, {}
        if not state.cluster_state.join_allowed or state.shut_down:
            return False
        joiners = sorted(j for j in requested if not state.is_member(j))
        # A process restarted at an old address is a new member: its predecessor there is dead. It
        # is replaced only once its lease has certainly run out (as for any removal): a joiner
        # cannot talk a live member out of the cluster.
        raft = self.consensus.raft
        addresses = {j.address for j in joiners}
        config = self.ctx.config
        quiet_ms = config.lease_ms + config.clock_drift_margin_ms
        now = self.ctx.now_ms
        predecessors = [
            r
            for r in state.member_ids
            if r.address in addresses and r != self.ctx.identity and now - self.last_heard.get(r, now) > quiet_ms
        ]
        voters = sorted(p for p in predecessors if raft.membership.is_voter(p))
        replaced = sorted(p for p in predecessors if p not in voters) + voters[:1]  # one voter per change
        waiting_on = {r.address for r in state.member_ids if r.address in addresses and r not in replaced}
        admitted: list[MemberId] = []
        for joiner in joiners:
            if joiner.address in waiting_on:
                self.joiners[joiner] = requested[joiner]  # after its predecessor's removal
            else:
                admitted.append(joiner)
        room = limits.MAX_MEMBER_COUNT - (self._member_count() - len(replaced))
        for joiner in admitted[max(room, 0) :]:
            self._turn_away_at_limit(joiner)
        admitted = admitted[: max(room, 0)]
        if not admitted:
            return False
        records = tuple(MemberRecord(j, requested[j]) for j in admitted)
        commands: tuple[object, ...] = (AddMembers(records),)
        if replaced:
            commands = (RemoveMembers(tuple(replaced)), *commands)
        change = ConfChange(add_learners=tuple(admitted), remove=tuple(replaced))
        return self.consensus.propose_change(change, commands)

    def _voter_pool(self) -> VoterPool:
        state = self.consensus.state
        raft = self.consensus.raft
        voters = set(raft.membership.voters)
        staying = [r.id for r in state.members if not r.lite and not r.leaving and self._presumed_alive(r.id)]
        # A leaving voter still alive keeps its vote until it is removed, unless a staying member
        # takes its place: demoted at once, three members with one leaving were left with two
        # voters (then one), and a crash of the leader mid-leave left no majority although two of
        # the three were alive (found by an outside tester).
        parting = sorted(
            r.id for r in state.members if r.leaving and not r.lite and r.id in voters and self._presumed_alive(r.id)
        )
        # Only a learner that answered within the last heartbeats, and holds the whole log.
        candidates = [
            member
            for member in staying
            if member not in voters
            and raft.match_index(member) >= raft.commit_index
            and self.consensus.answered_lately(member)
        ]
        target = self.ctx.config.voter_target(len(staying) + len(parting))
        return VoterPool(staying, parting, candidates, target)

    def _adjust_voters(self) -> bool:
        state = self.consensus.state
        raft = self.consensus.raft
        me = self.ctx.identity
        voters = set(raft.membership.voters)
        pool = self._voter_pool()
        staying, parting, candidates, target = pool.staying, pool.parting, pool.candidates, pool.target
        if me not in staying:
            # Leaving: someone else leads before this member leaves the voters; when no other
            # voter can, a learner becomes one first.
            others = sorted(v for v in voters if v != me and v in staying)
            if others:
                if not raft.transferring:
                    raft.transfer_leadership(max(others, key=lambda v: (raft.match_index(v), v)))
                return True
            return bool(candidates) and self.consensus.propose_change(ConfChange(promote=candidates[0]))
        unfit = sorted(v for v in voters if v not in staying and v not in parting)
        silent = [v for v in unfit if not self.consensus.answered_lately(v)]
        for voter in silent:
            # A voter that went silent leaves the voters first: the majority is then counted over
            # members that answer, never worse than counting the silent one.
            if self._answering_majority(voters - {voter}):
                return self.consensus.propose_change(ConfChange(demote=voter))
        # A voter that answers but should go (it is leaving) is replaced before it goes, so that
        # the voters never shrink below what the members can bear on the way.
        if pool.replacement_due(voters):
            return self.consensus.propose_change(ConfChange(promote=candidates[0]))
        for voter in unfit:
            if self._answering_majority(voters - {voter}):
                return self.consensus.propose_change(ConfChange(demote=voter))
        if len(voters) > target:
            # Those leaving first, then the newest staying member.
            newest_first = [r.id for r in reversed(state.members) if r.id in staying]
            for voter in [*parting, *newest_first]:
                if voter in voters and voter != me and self._answering_majority(voters - {voter}):
                    return self.consensus.propose_change(ConfChange(demote=voter))
        return False
