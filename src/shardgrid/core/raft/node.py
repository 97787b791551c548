"""One Raft server as a state machine: ``tick``, ``step`` and ``propose`` in; messages and committed
entries out (``take_messages``, ``take_ready``).

What it implements, and where from:
- Leader election with randomized timeouts, and the log-up-to-date vote restriction (the Raft
  paper, sections 5.2 and 5.4.1).
- Pre-vote (thesis 9.6): a server first asks whether it could win, without raising its term, so a
  member cut off from the others cannot force a new election when it comes back.
- Check-quorum and leader stickiness (thesis 6.2 and 9.6, as etcd's raft library does): a leader
  that has not heard from a majority for an election timeout steps down, and a server that heard
  from its leader within the election timeout refuses to vote for anyone else. Together they give
  the leader a lease: no other leader can be elected before ``leader_lease_until()``.
- Log replication with pipelined appends (bounded by ``max_unacked_entries``), probing after a
  refusal, and commitment only of entries of the leader's own term (section 5.4.2).
- Snapshots: the state machine's state at an index replaces the log before it; a follower too far
  behind (or new) receives the snapshot.
- Single-server configuration changes and learners (thesis 4.1 and 4.2.1), with the fix from the
  raft-dev list: a new leader changes the configuration only after committing an entry of its term.
- Leadership transfer (thesis 3.10).

- Durability, as etcd's raft library hands it to its caller: ``take_write`` gives what changed in
  the term, the vote, the commit point, the log and the snapshot since the last call, and the
  caller makes it durable before it sends any message taken after it (``storage.py``). A server
  restarted from its storage (``RaftNode.restored``) is the same server; for an election timeout it
  grants no vote, since it cannot know whether it heard from a leader just before it stopped, and
  the leader's lease counts on that refusal.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass
from typing import Any

from shardgrid.core.errors import InvariantViolation, invariant, require
from shardgrid.core.identity import MemberId
from shardgrid.core.limits import NEVER_MS
from shardgrid.core.raft.log import Entry, RaftLog, Snapshot
from shardgrid.core.raft.membership import ConfChange, Membership
from shardgrid.core.raft.messages import (
    AppendEntries,
    AppendReply,
    Heartbeat,
    HeartbeatReply,
    InstallSnapshot,
    TimeoutNow,
    VoteReply,
    VoteRequest,
)
from shardgrid.core.raft.storage import HardState, RaftStorage, RaftWrite


class Role(enum.Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


_TRANSITIONS: dict[Role, frozenset[Role]] = {
    Role.FOLLOWER: frozenset({Role.FOLLOWER, Role.PRE_CANDIDATE, Role.CANDIDATE}),
    Role.PRE_CANDIDATE: frozenset({Role.FOLLOWER, Role.PRE_CANDIDATE, Role.CANDIDATE}),
    Role.CANDIDATE: frozenset({Role.FOLLOWER, Role.PRE_CANDIDATE, Role.CANDIDATE, Role.LEADER}),
    Role.LEADER: frozenset({Role.FOLLOWER}),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class RaftSettings:
    election_timeout_ms: int = 1_000  # each wait is drawn from [this, twice this)
    heartbeat_interval_ms: int = 200
    max_append_entries: int = 64  # entries in one AppendEntries message
    max_unacked_entries: int = 1_024  # entries sent to one follower beyond what it acknowledged
    snapshot_resend_ms: int = 2_000  # a snapshot not answered within this is sent again
    clock_drift_margin_ms: int = 100  # taken off the leadership lease for clocks that run apart

    def validate(self) -> None:
        require(self.heartbeat_interval_ms > 0, "heartbeat_interval_ms must be positive")
        require(
            self.election_timeout_ms >= 3 * self.heartbeat_interval_ms,
            "election_timeout_ms must be at least three times heartbeat_interval_ms",
        )
        require(self.max_append_entries > 0, "max_append_entries must be positive")
        require(self.max_unacked_entries >= self.max_append_entries, "max_unacked_entries below one message")
        require(0 <= self.clock_drift_margin_ms < self.election_timeout_ms, "clock_drift_margin_ms out of range")


@dataclass(slots=True, kw_only=True)
class Progress:
    """What the leader knows of one follower's log."""

    match: int = 0
    next: int = 1
    probing: bool = True  # one append at a time until the follower's position is known
    probe_sent: bool = False
    snapshot_sent_ms: int | None = None  # a snapshot is on its way: no appends until it is answered
    last_ack_ms: int = 0  # when it last answered (check-quorum)
    acked_sent_ms: int = NEVER_MS  # send time of the newest message it answered (leadership lease)
    last_progress_ms: int = 0  # when its match last moved (retransmission)


@dataclass(frozen=True, slots=True)
class Ready:
    """What the state machine must do now: load ``snapshot`` (if any), then apply ``entries``."""

    snapshot: Snapshot | None
    entries: tuple[Entry, ...]


class RaftNode:
    """A Raft server. ``snapshot`` is the bootstrap (or None for a server that is yet to be added
    to a cluster: it follows whichever leader contacts it and waits for a snapshot)."""

    def __init__(
        self,
        identity: MemberId,
        settings: RaftSettings,
        rng: random.Random,
        snapshot: Snapshot | None,
        now_ms: int = 0,
    ) -> None:
        settings.validate()
        self.identity = identity
        self.settings = settings
        self.rng = rng
        self.log = RaftLog(snapshot)
        self.term = snapshot.term if snapshot is not None else 0
        self.voted_for: MemberId | None = None
        self.role = Role.FOLLOWER
        self.leader: MemberId | None = None
        self.commit_index = self.log.snapshot_index
        self.applied_index = self.log.snapshot_index
        self.now_ms = now_ms
        self._pending_snapshot: Snapshot | None = snapshot
        self._election_deadline_ms = 0
        self._last_leader_contact_ms: int | None = None
        self._votes: dict[MemberId, bool] = {}
        self._progress: dict[MemberId, Progress] = {}
        self._pending_conf_index = 0
        self.term_start_index = 0  # a leader's first entry of its term: its state is current once applied
        self._transfer_target: MemberId | None = None
        self._transfer_deadline_ms = 0
        self._last_heartbeat_ms = NEVER_MS
        self._outbox: list[tuple[MemberId, Any]] = []
        self._durable_hard_state = HardState(self.term, None, self.commit_index) if snapshot is None else None
        self._votes_held_until_ms = 0  # a restarted server grants no vote before this
        # A durable server's (None: the caller keeps no disk): the last index its caller said is
        # synced. A leader counts its own log towards a commit only this far, or a leader alone
        # (one voter) would commit and apply entries a crash may still take back.
        self.durable_index: int | None = None
        self._reset_election_deadline()

    @classmethod
    def restored(
        cls, identity: MemberId, settings: RaftSettings, rng: random.Random, storage: RaftStorage, now_ms: int = 0
    ) -> RaftNode:
        """The server that left ``storage`` on its disk, started again. The state machine is handed
        the snapshot and then the entries up to the kept commit point by ``take_ready``."""
        problem = storage.problem()
        invariant(not problem, lambda: f"a server cannot start from this storage: {problem}")
        node = cls(identity, settings, rng, storage.snapshot, now_ms)
        for entry in storage.entries:
            node.log.append(entry)
        node.log.mark_stable()
        hard = storage.hard_state
        node.term = hard.term
        node.voted_for = hard.voted_for
        node.commit_index = max(node.log.snapshot_index, min(hard.commit, node.log.last_index))
        node._durable_hard_state = hard
        node._votes_held_until_ms = now_ms + settings.election_timeout_ms
        if node.membership.voters == (identity,):
            # The only voter: no other server can have led since it stopped, and only its own
            # vote elects, so it campaigns at its first tick rather than wait out a leader that
            # was itself (a cluster of one came back after an election timeout, not at once).
            node._election_deadline_ms = now_ms
        return node

    # --- queries ---------------------------------------------------------------------------------

    @property
    def membership(self) -> Membership:
        return self.log.membership

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def last_index(self) -> int:
        return self.log.last_index

    @property
    def transferring(self) -> bool:
        return self._transfer_target is not None

    def can_change_configuration(self) -> bool:
        """Whether a configuration change may be proposed now (one at a time, after the first
        entry of this leader's term committed)."""
        return self.is_leader and not self.transferring and self._pending_conf_index <= self.commit_index

    def change_problem(self, change: ConfChange) -> str:
        """Why ``change`` cannot be proposed now ('' when it can). A learner becomes a voter only
        once it holds every committed entry: a voter that cannot vote yet could stall elections."""
        if not self.can_change_configuration():
            return "not the leader, handing over, or a configuration change is still uncommitted"
        problem = change.problem(self.membership)
        if problem:
            return problem
        if change.promote is not None and self.match_index(change.promote) < self.commit_index:
            return f"{change.promote} has not caught up with the log yet"
        return ""

    def leader_lease_until(self) -> int:
        """Until when no other leader can be elected (0 when this server is not a leader).

        A majority of voters answered messages this leader sent at or after some time T; each of
        them refuses to vote for anyone else until an election timeout after it received one, so
        no new leader before ``T + election_timeout_ms``. A leader handing its leadership over has
        no lease: its successor campaigns without waiting.
        """
        if not self.is_leader or self.transferring:
            return 0
        voters = self.membership.voters
        if not voters:
            return 0
        sent = sorted(
            (self.now_ms if v == self.identity else self._progress[v].acked_sent_ms for v in voters), reverse=True
        )
        if self.identity not in voters:
            return 0
        settings = self.settings
        return sent[self.membership.quorum - 1] + settings.election_timeout_ms - settings.clock_drift_margin_ms

    def leader_silent_ms(self) -> int:
        """How long since this server last heard from a leader (since it started, if never)."""
        return self.now_ms - (self._last_leader_contact_ms if self._last_leader_contact_ms is not None else 0)

    def match_index(self, node: MemberId) -> int:
        """How far the leader knows ``node``'s log matches its own (the leader's own last index,
        as far as it is durable)."""
        if node == self.identity:
            durable = self.durable_index
            return self.log.last_index if durable is None else min(self.log.last_index, durable)
        progress = self._progress.get(node)
        return progress.match if progress is not None else 0

    def last_heard_ms(self, node: MemberId) -> int | None:
        progress = self._progress.get(node)
        return progress.last_ack_ms if progress is not None else None

    def answered_since_ms(self, node: MemberId) -> int:
        """The send time of the newest message of this leader that ``node`` answered: evidence
        that it is alive and follows this leader (no grace period, unlike ``last_heard_ms``)."""
        if node == self.identity:
            return self.now_ms
        progress = self._progress.get(node)
        return progress.acked_sent_ms if progress is not None else NEVER_MS

    # --- inputs ----------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        self._advance_clock(now_ms)
        if self.role is Role.LEADER:
            if not self._quorum_heard_recently():
                self._become_follower(self.term, None)  # check-quorum: cut off from the majority
                return
            if self._transfer_target is not None and self.now_ms >= self._transfer_deadline_ms:
                self._transfer_target = None
            if self.now_ms - self._last_heartbeat_ms >= self.settings.heartbeat_interval_ms:
                self._heartbeat()
        elif self._may_campaign():
            if self.now_ms >= self._election_deadline_ms:
                self._campaign(pre_vote=True)
        elif self.leader is not None and self.leader_silent_ms() >= 2 * self.settings.election_timeout_ms:
            self.leader = None  # a learner never campaigns, but it must not believe in a dead leader

    def step(self, now_ms: int, sender: MemberId, message: Any) -> None:
        self._advance_clock(now_ms)
        if sender == self.identity:
            return
        term = message.term
        if term > self.term:
            if isinstance(message, VoteRequest):
                if self._in_lease() and not message.transfer:
                    return  # we hear from a leader: a disruptive candidate gets no answer
                if message.pre_vote:
                    self._on_vote_request(sender, message)
                    return  # a pre-vote does not move our term
                self._become_follower(term, None)
            elif isinstance(message, VoteReply) and message.pre_vote and message.granted:
                pass  # a granted pre-vote names the term we would start, not one we must join
            elif isinstance(message, (AppendEntries, Heartbeat, InstallSnapshot)):
                self._become_follower(term, sender)
            else:
                self._become_follower(term, None)
        elif term < self.term:
            if isinstance(message, (AppendEntries, Heartbeat, InstallSnapshot)):
                # A leader from an older term: tell it ours, so that it steps down.
                self._send(
                    sender,
                    AppendReply(term=self.term, success=False, index=self.log.last_index, sent_ms=message.sent_ms),
                )
            elif isinstance(message, VoteRequest) and message.pre_vote:
                self._send(sender, VoteReply(self.term, False, True))
            return
        if isinstance(message, VoteRequest):
            self._on_vote_request(sender, message)
        elif isinstance(message, VoteReply):
            self._on_vote_reply(sender, message)
        elif isinstance(message, AppendEntries):
            self._on_append(sender, message)
        elif isinstance(message, Heartbeat):
            self._on_heartbeat(sender, message)
        elif isinstance(message, InstallSnapshot):
            self._on_snapshot(sender, message)
        elif isinstance(message, (AppendReply, HeartbeatReply)):
            if self.role is Role.LEADER:
                self._on_reply(sender, message)
        elif isinstance(message, TimeoutNow):
            if self._may_campaign() and self.role is not Role.LEADER:
                self._campaign(pre_vote=False, transfer=True)
        else:
            raise InvariantViolation(f"not a raft message: {type(message).__name__}")

    def propose(self, command: Any, change: ConfChange | None = None) -> int | None:
        """Append ``command`` (and ``change``) as the leader; returns its index, or None when this
        server cannot take proposals now (not the leader, handing over, a change in progress)."""
        if self.role is not Role.LEADER or self._transfer_target is not None:
            return None
        if change is not None and self.change_problem(change):
            return None
        entry = Entry(term=self.term, index=self.log.last_index + 1, command=command, change=change)
        self.log.append(entry)
        if change is not None:
            self._pending_conf_index = entry.index
            self._sync_progress()
        self._broadcast_entries()
        self._maybe_commit()
        return entry.index

    def transfer_leadership(self, target: MemberId) -> bool:
        """Hand leadership to ``target`` once its log is complete; False when it cannot be done."""
        if self.role is not Role.LEADER or target == self.identity or not self.membership.is_voter(target):
            return False
        self._transfer_target = target
        self._transfer_deadline_ms = self.now_ms + self.settings.election_timeout_ms
        if self._progress[target].match == self.log.last_index:
            self._send(target, TimeoutNow(self.term))
        else:
            self._send_append(target, allow_empty=True)
        return True

    def force_new_configuration(self, others: tuple[MemberId, ...]) -> None:
        """An operator's recovery after a majority of voters was lost for good: this server becomes
        the only voter (``others`` stay as learners) and leads at once, in a term above its own.

        Unsafe by design, never automatic: entries that only the lost voters held are gone, and if
        the lost voters are alive after all (cut off, not crashed), there are two leaders.
        """
        invariant(self.log.snapshot is not None, "a server with no log cannot lead a recovery")
        membership = Membership.of([self.identity], [o for o in others if o != self.identity])
        if self.role is Role.LEADER:
            self._become_follower(self.term, None)
        self._set_role(Role.CANDIDATE)
        self.term += 1
        self.voted_for = self.identity
        self.log.append(Entry(term=self.term, index=self.log.last_index + 1, forced=membership))
        self._become_leader()

    def compact(self, index: int, state: Any) -> None:
        """The state machine's ``state`` after applying entry ``index`` replaces the log up to it."""
        invariant(index <= self.applied_index, lambda: f"cannot compact {index} beyond applied {self.applied_index}")
        self.log.compact(index, state)

    # --- outputs ---------------------------------------------------------------------------------

    def take_messages(self) -> list[tuple[MemberId, Any]]:
        out, self._outbox = self._outbox, []
        return out

    def take_write(self) -> RaftWrite | None:
        """What must be durable before the messages taken after this call are sent, and before
        anything the entries ``take_ready`` then hands out is acted on where others can see it
        (None: nothing). Handed out once: a write the disk refuses leaves this node ahead of its
        disk, so the caller must stop it and restart it from the disk, never write on."""
        snapshot, entries_from, entries = self.log.take_unstable()
        if entries_from and self.durable_index is not None:
            # Entries rewritten from there on are not durable until this write is synced.
            self.durable_index = min(self.durable_index, entries_from - 1)
        hard = HardState(self.term, self.voted_for, self.commit_index)
        if hard == self._durable_hard_state:
            hard_state = None
        else:
            hard_state = self._durable_hard_state = hard
        write = RaftWrite(hard_state=hard_state, snapshot=snapshot, entries_from=entries_from, entries=entries)
        return None if write.empty else write

    def synced(self, index: int) -> None:
        """The caller synced writes that hold this server's log up to ``index`` (as it is now: the
        caller leaves out what a later write rewrote): a leader may count its own log that far,
        and commit what that makes a quorum hold."""
        invariant(self.durable_index is not None, "a server without a disk is told of no sync")
        self.durable_index = max(self.durable_index, min(index, self.log.last_index))
        if self.is_leader and self._maybe_commit():
            self._announce_commit()

    def take_ready(self) -> Ready:
        """What became committed since the last call; the caller applies it before anything else."""
        snapshot, self._pending_snapshot = self._pending_snapshot, None
        if self.commit_index <= self.applied_index:
            return Ready(snapshot, ())
        entries = self.log.slice(self.applied_index + 1, self.commit_index - self.applied_index)
        invariant(len(entries) == self.commit_index - self.applied_index, "committed entries are missing")
        self.applied_index = self.commit_index
        return Ready(snapshot, entries)

    # --- elections ---------------------------------------------------------------------------------

    def _may_campaign(self) -> bool:
        """A voter campaigns; so does one that its latest configuration, not yet committed, no
        longer counts (Raft dissertation 4.2.2): until that entry commits it may be the only
        server whose log can win. Say a demotion to {1, 6, 7} reached 8 alone and 1 died: 6 and 7,
        still under {1, 6, 7, 8}, need 8's vote, which their shorter logs cannot get; only 8 can
        win, with their votes, under {1, 6, 7}."""
        if self.log.snapshot is None:
            return False
        if self.membership.is_voter(self.identity):
            return True
        return self.log.membership_at(self.commit_index).is_voter(self.identity)

    def _in_lease(self) -> bool:
        """Whether this server hears from a leader (or, as leader, from a majority) right now."""
        if self.role is Role.LEADER:
            return self._quorum_heard_recently()
        if self.now_ms < self._votes_held_until_ms:
            return True  # restarted: it may have heard from a leader just before it stopped
        return (
            self.leader is not None
            and self._last_leader_contact_ms is not None
            and self.now_ms - self._last_leader_contact_ms < self.settings.election_timeout_ms
        )

    def _campaign(self, pre_vote: bool, transfer: bool = False) -> None:
        if pre_vote:
            self._set_role(Role.PRE_CANDIDATE)
            term = self.term + 1
        else:
            self._set_role(Role.CANDIDATE)
            self.term += 1
            self.voted_for = self.identity
            term = self.term
        self.leader = None
        # Its own vote counts only where its latest configuration makes it a voter.
        self._votes = {self.identity: True} if self.membership.is_voter(self.identity) else {}
        self._reset_election_deadline()
        request = VoteRequest(
            term=term,
            last_index=self.log.last_index,
            last_term=self.log.last_term,
            pre_vote=pre_vote,
            transfer=transfer,
        )
        for voter in self.membership.voters:
            if voter != self.identity:
                self._send(voter, request)
        self._count_votes()

    def _on_vote_request(self, sender: MemberId, message: VoteRequest) -> None:
        # Granted whatever this server's own configuration says of the candidate (as Raft and etcd
        # do): a server whose log lags may not know yet that the candidate became a voter, and
        # refusing it can leave no electable server. A disruptive one gets no answer while a
        # leader is heard (``step``).
        up_to_date = self.log.is_up_to_date(message.last_index, message.last_term)
        if message.pre_vote:
            granted = up_to_date and message.term > self.term
            self._send(sender, VoteReply(message.term if granted else self.term, granted, True))
            return
        free = self.voted_for == sender or (self.voted_for is None and self.leader is None)
        granted = up_to_date and free
        if granted:
            self.voted_for = sender
            self._reset_election_deadline()
        self._send(sender, VoteReply(self.term, granted, False))

    def _on_vote_reply(self, sender: MemberId, message: VoteReply) -> None:
        if message.pre_vote:
            if self.role is not Role.PRE_CANDIDATE:
                return
            if message.granted and message.term != self.term + 1:
                return  # an answer to an older pre-vote
        elif self.role is not Role.CANDIDATE or message.term != self.term:
            return
        if self.membership.is_voter(sender):
            self._votes[sender] = message.granted
            self._count_votes()

    def _count_votes(self) -> None:
        quorum = self.membership.quorum
        granted = sum(1 for v in self._votes.values() if v)
        refused = len(self._votes) - granted
        if granted >= quorum:
            if self.role is Role.PRE_CANDIDATE:
                self._campaign(pre_vote=False)
            else:
                self._become_leader()
        elif refused >= quorum:
            self._become_follower(self.term, None)

    def _become_follower(self, term: int, leader: MemberId | None) -> None:
        invariant(term >= self.term, "terms never go back")
        if term > self.term:
            self.term = term
            self.voted_for = None
        self._set_role(Role.FOLLOWER)
        self.leader = leader
        if leader is not None:
            self._last_leader_contact_ms = self.now_ms
        self._progress = {}
        self._transfer_target = None
        self._votes = {}
        self._reset_election_deadline()

    def _become_leader(self) -> None:
        self._set_role(Role.LEADER)
        self.leader = self.identity
        self._transfer_target = None
        self._progress = {}
        self._sync_progress()
        for progress in self._progress.values():
            progress.last_ack_ms = self.now_ms  # a grace period of one election timeout
        self.log.append(Entry(term=self.term, index=self.log.last_index + 1))
        self._pending_conf_index = self.log.last_index
        self.term_start_index = self.log.last_index
        self._broadcast_entries()
        self._maybe_commit()
        self._last_heartbeat_ms = self.now_ms

    def _set_role(self, role: Role) -> None:
        invariant(role in _TRANSITIONS[self.role], lambda: f"raft role {self.role.value} -> {role.value}")
        self.role = role

    def _reset_election_deadline(self) -> None:
        base = self.settings.election_timeout_ms
        self._election_deadline_ms = self.now_ms + base + self.rng.randrange(base)

    # --- followers -------------------------------------------------------------------------------

    def _heard_from_leader(self, sender: MemberId) -> None:
        if self.role is not Role.FOLLOWER:
            self._become_follower(self.term, sender)
        self.leader = sender
        self._last_leader_contact_ms = self.now_ms
        self._reset_election_deadline()

    def _on_append(self, sender: MemberId, message: AppendEntries) -> None:
        # A leader's entries are checked whole before any is taken: a malformed message is the
        # sender's fault and changes nothing here (it is not answered: no leader sends one).
        if self.log.shape_problem(message.prev_index, message.prev_term, message.entries, message.term):
            return
        self._heard_from_leader(sender)
        if self.log.snapshot is None:
            self._send(
                sender,
                AppendReply(term=self.term, success=False, index=0, sent_ms=message.sent_ms, needs_snapshot=True),
            )
            return
        if message.prev_index < self.commit_index:
            # Part of it is committed here already: take what lies beyond our commit point.
            skip = self.commit_index - message.prev_index
            if skip >= len(message.entries):
                self._send(
                    sender, AppendReply(term=self.term, success=True, index=self.commit_index, sent_ms=message.sent_ms)
                )
                return
            message = AppendEntries(
                term=message.term,
                prev_index=self.commit_index,
                prev_term=message.entries[skip - 1].term,
                entries=message.entries[skip:],
                commit=message.commit,
                sent_ms=message.sent_ms,
            )
        if not self.log.matches(message.prev_index, message.prev_term):
            hint = self._probe_hint(message)
            hint_term = self.log.term_at(hint) or 0
            refusal = AppendReply(
                term=self.term,
                success=False,
                index=hint,
                sent_ms=message.sent_ms,
                rejected=message.prev_index,
                hint_term=hint_term,
            )
            self._send(sender, refusal)
            return
        if self.log.changes_problem(message.prev_index, message.entries):
            return
        last_new = self.log.append_after(message.prev_index, message.entries, self.commit_index)
        self._advance_commit(min(message.commit, last_new))
        self._send(sender, AppendReply(term=self.term, success=True, index=last_new, sent_ms=message.sent_ms))

    def _probe_hint(self, message: AppendEntries) -> int:
        """Where the leader should probe next: skip every entry of a term newer than its own."""
        hint = min(message.prev_index, self.log.last_index)
        while hint > self.commit_index:
            term = self.log.term_at(hint)
            if term is None or term <= message.prev_term:
                break
            hint -= 1
        return hint

    def _on_heartbeat(self, sender: MemberId, message: Heartbeat) -> None:
        self._heard_from_leader(sender)
        if self.log.snapshot is not None:
            self._advance_commit(min(message.commit, self.log.last_index))
        self._send(sender, HeartbeatReply(self.term, message.sent_ms))

    def _on_snapshot(self, sender: MemberId, message: InstallSnapshot) -> None:
        self._heard_from_leader(sender)
        snapshot = message.snapshot
        if self.log.snapshot is not None and snapshot.index <= self.commit_index:
            self._send(
                sender, AppendReply(term=self.term, success=True, index=self.commit_index, sent_ms=message.sent_ms)
            )
            return
        self.log.restore(snapshot)
        self.commit_index = snapshot.index
        self.applied_index = snapshot.index
        self._pending_snapshot = snapshot
        self._send(sender, AppendReply(term=self.term, success=True, index=snapshot.index, sent_ms=message.sent_ms))

    def _advance_commit(self, index: int) -> None:
        if index > self.commit_index:
            invariant(index <= self.log.last_index, "commit beyond the log")
            self.commit_index = index

    # --- leader ----------------------------------------------------------------------------------

    def _sync_progress(self) -> None:
        """Track exactly the other servers of the configuration in effect."""
        nodes = [n for n in self.membership.nodes if n != self.identity]
        for node in nodes:
            if node not in self._progress:
                self._progress[node] = Progress(
                    next=self.log.last_index + 1, last_ack_ms=self.now_ms, last_progress_ms=self.now_ms
                )
        for node in [n for n in self._progress if n not in nodes]:
            del self._progress[node]

    def _quorum_heard_recently(self) -> bool:
        """A majority of the newest configuration's voters answered within an election timeout (a
        leader that configuration demotes or removes counts only the others: cut off from them, it
        must not lead on)."""
        voters = self.membership.voters
        if not voters:
            return True
        heard = sorted(
            (self.now_ms if v == self.identity else self._progress[v].last_ack_ms for v in voters), reverse=True
        )
        return self.now_ms - heard[self.membership.quorum - 1] < self.settings.election_timeout_ms

    def _heartbeat(self) -> None:
        self._last_heartbeat_ms = self.now_ms
        for node, progress in self._progress.items():
            self._send(node, Heartbeat(self.term, min(progress.match, self.commit_index), self.now_ms))
            if progress.match < self.log.last_index or progress.snapshot_sent_ms is not None:
                stalled = self.now_ms - progress.last_progress_ms >= 2 * self.settings.heartbeat_interval_ms
                if progress.probing:
                    progress.probe_sent = False
                elif stalled and progress.next > progress.match + 1:
                    progress.next = progress.match + 1  # what was sent may be lost: send it again
                    progress.probing = True
                    progress.probe_sent = False
                self._send_append(node, allow_empty=False)

    def _broadcast_entries(self) -> None:
        for node in self._progress:
            self._send_append(node, allow_empty=False)

    def _send_append(self, node: MemberId, allow_empty: bool) -> None:
        progress = self._progress[node]
        if progress.snapshot_sent_ms is not None:
            if self.now_ms - progress.snapshot_sent_ms < self.settings.snapshot_resend_ms:
                return
            progress.snapshot_sent_ms = None
        if progress.probing and progress.probe_sent:
            return
        if progress.next <= self.log.snapshot_index:
            snapshot = self.log.snapshot
            if snapshot is None:
                raise InvariantViolation("a leader always holds a snapshot")
            self._send(node, InstallSnapshot(self.term, snapshot, self.now_ms))
            progress.snapshot_sent_ms = self.now_ms
            return
        prev = progress.next - 1
        prev_term = self.log.term_at(prev)
        if prev_term is None:
            raise InvariantViolation(f"no term for entry {prev}")
        budget = self.settings.max_append_entries
        if not progress.probing:
            budget = min(budget, progress.match + self.settings.max_unacked_entries - prev)
        entries = self.log.slice(progress.next, budget) if budget > 0 else ()
        if not entries and not allow_empty and not progress.probing:
            return
        self._send(
            node,
            AppendEntries(
                term=self.term,
                prev_index=prev,
                prev_term=prev_term,
                entries=entries,
                commit=self.commit_index,
                sent_ms=self.now_ms,
            ),
        )
        if progress.probing:
            progress.probe_sent = True
        elif entries:
            progress.next = entries[-1].index + 1

    def _on_reply(self, sender: MemberId, message: AppendReply | HeartbeatReply) -> None:
        progress = self._progress.get(sender)
        if progress is None:
            return
        progress.last_ack_ms = self.now_ms
        progress.acked_sent_ms = max(progress.acked_sent_ms, message.sent_ms)
        if isinstance(message, HeartbeatReply):
            if progress.match < self.log.last_index:
                self._send_append(sender, allow_empty=False)
            return
        if message.needs_snapshot:
            progress.next = self.log.snapshot_index
            progress.probing = True
            progress.probe_sent = False
            progress.snapshot_sent_ms = None
            self._send_append(sender, allow_empty=True)
            return
        if not message.success:
            if progress.probing and message.rejected != progress.next - 1:
                return  # not the answer to the probe we have out
            if not progress.probing and message.rejected <= progress.match:
                return  # a late answer to something already matched
            hint = self._newest_at_or_before(message.index, message.hint_term)
            progress.next = max(progress.match + 1, min(message.rejected, hint + 1))
            progress.probing = True
            progress.probe_sent = False
            self._send_append(sender, allow_empty=True)
            return
        if progress.snapshot_sent_ms is not None:
            # The snapshot (or a later append) arrived: continue from the position it reports.
            progress.snapshot_sent_ms = None
            progress.next = max(progress.match, message.index) + 1
            progress.probing = False
            progress.probe_sent = False
        if message.index > progress.match:
            progress.match = min(message.index, self.log.last_index)
            progress.last_progress_ms = self.now_ms
            progress.next = max(progress.next, progress.match + 1)
            progress.probing = False
            progress.probe_sent = False
            if self._maybe_commit():
                if not self.is_leader:
                    return  # its own demotion or removal committed: it stepped aside, nothing to send
                self._announce_commit()
        if progress.probing:
            progress.probe_sent = False
        if progress.next <= self.log.last_index:
            self._send_append(sender, allow_empty=False)
        if sender == self._transfer_target and progress.match == self.log.last_index:
            self._send(sender, TimeoutNow(self.term))

    def _newest_at_or_before(self, index: int, term: int) -> int:
        """The newest entry at or before ``index`` whose term is at most ``term`` in our log: the
        follower's log cannot match ours after it (etcd's findConflictByTerm)."""
        index = min(index, self.log.last_index)
        while index > self.log.snapshot_index:
            held = self.log.term_at(index)
            if held is not None and held <= term:
                break
            index -= 1
        return index

    def _maybe_commit(self) -> bool:
        voters = self.membership.voters
        if not voters:
            return False
        matches = sorted((self.match_index(v) for v in voters), reverse=True)
        candidate = matches[self.membership.quorum - 1]
        if candidate <= self.commit_index or self.log.term_at(candidate) != self.term:
            return False
        self.commit_index = candidate
        if not self.membership.is_voter(self.identity) and self.commit_index >= self.log.membership_index():
            self._become_follower(self.term, None)  # our own removal or demotion is committed: step aside
        return True

    def _announce_commit(self) -> None:
        """Tell followers the new commit point at once (they apply migrations' outcomes on it)."""
        if self.role is not Role.LEADER:
            return
        for node, progress in self._progress.items():
            if progress.next > self.log.last_index or progress.probing:
                self._send(node, Heartbeat(self.term, min(progress.match, self.commit_index), self.now_ms))
            else:
                self._send_append(node, allow_empty=False)

    # --- plumbing --------------------------------------------------------------------------------

    def _advance_clock(self, now_ms: int) -> None:
        invariant(now_ms >= self.now_ms, lambda: f"raft time went backwards: {now_ms} < {self.now_ms}")
        self.now_ms = now_ms

    def _send(self, target: MemberId, message: Any) -> None:
        self._outbox.append((target, message))
