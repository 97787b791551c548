"""The member's Raft node and the metadata it applied from the log: the one owner of both.

Other concerns read ``state`` (the applied metadata) and, on the leader, hand commands to
``propose``; the commands of one handled event go into one log entry (so many migrations that end
together cost one commit). ``flush`` runs at the end of every event: it proposes what was
gathered, sends what Raft wants sent and applies what Raft committed, telling the member what
changed so each concern can react.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from shardgrid.core.effects import DiskFile, WriteMode
from shardgrid.core.errors import invariant
from shardgrid.core.identity import MemberId
from shardgrid.core.member.context import Context
from shardgrid.core.messages import Bootstrap
from shardgrid.core.metadata import Changes, MetadataState, apply_commands
from shardgrid.core.raft import ConfChange, Membership, RaftNode, Snapshot
from shardgrid.core.raft.messages import RAFT_MESSAGE_TYPES, InstallSnapshot
from shardgrid.core.raft.storage import RaftStorage
from shardgrid.core.raft_disk import RaftFile

# Commands gathered into one entry at most (one entry at a time is in flight while gathering).
MAX_COMMANDS_PER_ENTRY = 1_000
# Applying an entry may lead a concern to propose again (a single voter commits at once); the
# rounds of one event are bounded, and what remains is applied with the next event.
MAX_FLUSH_ROUNDS = 16
ANSWERED_LATELY_HEARTBEATS = 3  # a member that answered within this many heartbeats is answering
# A persistent member short of disk snapshots its log every snapshot_every_entries / 16, but no
# more often than this.
MIN_SNAPSHOT_EVERY_ENTRIES_WHEN_TIGHT = 16

Done = Callable[[bool], None]  # told True when the proposal was applied, False when it was lost


class AppliedListener(Protocol):
    def on_state_loaded(self, available_again: list[int] | None = None) -> None: ...
    def on_applied(self, index: int, term: int, changes: Changes) -> None: ...
    def on_leadership(self, leader: MemberId | None, term: int, was_leader: bool) -> None: ...


class Consensus:
    def __init__(self, ctx: Context, listener: AppliedListener) -> None:
        self.ctx = ctx
        self.listener = listener
        self.raft = RaftNode(
            ctx.identity, ctx.config.raft_settings(), random.Random(ctx.rng.getrandbits(64)), None, ctx.now_ms
        )
        self.state = MetadataState(ctx.config.partition_count)
        self.has_state = False
        self.applied_index = 0
        self._commands: list[object] = []
        self._done: list[Done] = []
        self._waiting: list[tuple[int, int, Done]] = []  # (index, term, callback)
        self._leader: MemberId | None = None
        self._term = 0
        self._was_leader = False
        self._checkpoint: tuple[int, MetadataState] | None = None
        self.admitted_by: set[str] = set()  # addresses we asked to join: their raft messages are taken
        self.founding: Bootstrap | None = None  # what this member founded its cluster from
        # A persistent member's Raft file: each step's write goes to it before the step's sends.
        self._file: RaftFile | None = RaftFile() if ctx.config.persistent else None
        # Its writes not yet synced: (the write's number among the member's Persist effects, the
        # last index of the log it holds), oldest first.
        self._unsynced: deque[tuple[int, int]] = deque()
        self._track_durability()

    # --- starting ----------------------------------------------------------------------------------

    def bootstrap(self, founding: Bootstrap) -> None:
        """Start the log of a brand-new cluster (every founding member builds the same snapshot)."""
        invariant(not self.has_state and self.founding is None, "a member bootstraps at most once")
        self.founding = founding
        members, voters = founding.members, founding.voters
        others = [m.id for m in members if m.id not in voters]
        snapshot = Snapshot(
            0, 0, Membership.of(voters, others), MetadataState(self.ctx.config.partition_count, members=members)
        )
        self.raft = RaftNode(
            self.ctx.identity,
            self.ctx.config.raft_settings(),
            random.Random(self.ctx.rng.getrandbits(64)),
            snapshot,
            self.ctx.now_ms,
        )
        self._track_durability()

    def _track_durability(self, durable_index: int = 0) -> None:
        """A persistent member's leader counts its own log only as far as it is synced."""
        if self._file is not None:
            self.raft.durable_index = durable_index
            self._unsynced.clear()

    def restore(self, storage: RaftStorage, file_bytes: int) -> None:
        """Come back from the Raft storage this member left on its disk: the log up to the commit
        point it kept is applied at once (as a snapshot is, without a change reported for each
        entry), and its writes go on after the ``file_bytes`` its file holds."""
        invariant(not self.has_state and self.founding is None, "a member restores into a fresh state")
        self.raft = RaftNode.restored(
            self.ctx.identity,
            self.ctx.config.raft_settings(),
            random.Random(self.ctx.rng.getrandbits(64)),
            storage,
            self.ctx.now_ms,
        )
        if self._file is not None:
            self._file = RaftFile(storage, file_bytes)
        self._track_durability(storage.last_index)
        ready = self.raft.take_ready()
        invariant(ready.snapshot is not None, "a restored log starts with its snapshot")
        state = ready.snapshot.state
        invariant(isinstance(state, MetadataState), "a snapshot holds the metadata state")
        available_again: set[int] = set()
        for entry in ready.entries:
            if entry.command:
                state, changes = apply_commands(state, entry.command)
                available_again.update(changes.available)
        self.state = state
        self.has_state = True
        self.applied_index = ready.entries[-1].index if ready.entries else ready.snapshot.index
        # What its own snapshot holds, this member applied before it stopped (or took as a
        # snapshot, and then reacted to it whole): only the entries after it are news.
        self.listener.on_state_loaded(sorted(available_again))

    # --- queries -----------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.raft.is_leader

    @property
    def leader(self) -> MemberId | None:
        return self.raft.leader

    @property
    def term(self) -> int:
        return self.raft.term

    def answered_lately(self, member: MemberId) -> bool:
        """Whether ``member`` answered this leader within the last few heartbeats: what counts as
        alive before a change that would leave it the one to count on (a voter's removal, a
        leaving member's copy emptied)."""
        within_ms = ANSWERED_LATELY_HEARTBEATS * self.ctx.config.raft_heartbeat_interval_ms
        return self.ctx.now_ms - self.raft.answered_since_ms(member) <= within_ms

    @property
    def leader_ready(self) -> bool:
        """A leader whose applied state includes every entry committed before its term."""
        return self.raft.is_leader and self.applied_index >= self.raft.term_start_index

    def takes_raft_from(self, sender: MemberId) -> bool:
        """Raft's terms make any sender's message safe to take (a vote is given only to a voter of
        our configuration); a leader we do not know yet may be the one that added us. A process
        with no log yet follows only a cluster it asked to join."""
        return self.has_state or sender.address in self.admitted_by

    @staticmethod
    def is_raft_message(message: Any) -> bool:
        return type(message) in RAFT_MESSAGE_TYPES

    # --- inputs ------------------------------------------------------------------------------------

    def step(self, sender: MemberId, message: Any) -> None:
        if isinstance(message, InstallSnapshot) and not self._fits(message.snapshot.state):
            return  # a state for another partition count: not this cluster's, whoever sent it
        self.raft.step(self.ctx.now_ms, sender, message)

    def _fits(self, state: object) -> bool:
        count = self.ctx.config.partition_count
        if not isinstance(state, MetadataState) or state.partition_count != count:
            return False
        return state.table is None or state.table.partition_count == count

    def tick(self) -> None:
        self.raft.tick(self.ctx.now_ms)

    def propose(self, command: object, done: Done | None = None) -> bool:
        """Add ``command`` to this event's entry; False when this member cannot propose now."""
        if not self.leader_ready:
            return False
        self._commands.append(command)
        if done is not None:
            self._done.append(done)
        return True

    def propose_change(self, change: ConfChange, commands: tuple[object, ...] = (), done: Done | None = None) -> bool:
        """A configuration change in an entry of its own (with the commands that go with it)."""
        if not self.leader_ready or self.raft.change_problem(change):
            return False
        self._propose_gathered(now=True)
        index = self.raft.propose(commands, change)
        if index is None:
            return False
        if done is not None:
            self._waiting.append((index, self.raft.term, done))
        return True

    def change_problem(self, change: ConfChange) -> str:
        if not self.leader_ready:
            return "not a leader with a current state"
        return self.raft.change_problem(change)

    # --- the end of every event ----------------------------------------------------------------------

    def flush(self, gather: Callable[[], None]) -> None:
        """``gather`` lets the concerns add their proposals before each round."""
        for _ in range(MAX_FLUSH_ROUNDS):
            gather()
            self._propose_gathered()
            self.persist()
            for target, message in self.raft.take_messages():
                self.ctx.send(target, message)
            self._notice_leadership()
            ready = self.raft.take_ready()
            if ready.snapshot is None and not ready.entries:
                return
            if ready.snapshot is not None:
                self._load(ready.snapshot)
            for entry in ready.entries:
                self._apply(entry.index, entry.term, entry.command)
        # Still committing after the bound: the rest is applied with the next event.

    def forget_disk(self) -> None:
        """This member left the cluster (its replicas handed over): its Raft file is emptied, so
        that a process started on its directory is a new member, not this one back without the
        data it dropped."""
        if self._file is not None:
            self.ctx.persist(DiskFile.RAFT, b"", mode=WriteMode.REPLACE)
            self._file = None

    def persist(self) -> None:
        """Make what Raft must not forget durable before this step's sends (a persistent member's
        runtime holds them until the write is synced)."""
        if self._file is None:
            return
        write = self.raft.take_write()
        if write is not None:
            room_bytes, tight = self._room()
            data, replace = self._file.record(write, room_bytes, tight=tight)
            number = self.ctx.persist(DiskFile.RAFT, data, mode=WriteMode.REPLACE if replace else WriteMode.APPEND)
            if write.entries_from:  # what earlier writes held from there on is rewritten
                cap = write.entries_from - 1
                self._unsynced = deque((n, min(index, cap)) for n, index in self._unsynced)
            self._unsynced.append((number, self.raft.log.last_index))

    def _room(self) -> tuple[int | None, bool]:
        """The disk's free space as the runtime last said (None: not known), and whether it is
        tight: under ``disk_reserve_bytes`` and room to rewrite what the Raft file holds."""
        free_bytes = self.ctx.disk.free_bytes
        if free_bytes < 0:
            return None, False
        needed_bytes = self.ctx.config.disk_reserve_bytes + self.ctx.disk.file_bytes(DiskFile.RAFT)
        return free_bytes, free_bytes < needed_bytes

    def synced(self, persisted: int) -> None:
        """The member's first ``persisted`` Persist effects are durable."""
        index = None
        while self._unsynced and self._unsynced[0][0] <= persisted:
            index = self._unsynced.popleft()[1]
        if index is not None and self.raft.durable_index is not None:
            self.raft.synced(index)

    def _propose_gathered(self, now: bool = False) -> None:
        if not self._commands:
            return
        raft = self.raft
        in_flight = raft.last_index > raft.commit_index
        if in_flight and not now and self.leader_ready and len(self._commands) < MAX_COMMANDS_PER_ENTRY:
            # Group commit: while an entry of ours is on its way, gather what follows into the next
            # one (many migrations that end together then cost one commit, not one each).
            return
        commands, self._commands = tuple(self._commands), []
        done, self._done = self._done, []
        index = raft.propose(commands) if self.leader_ready else None
        if index is None:
            for callback in done:
                callback(False)
            return
        for callback in done:
            self._waiting.append((index, self.raft.term, callback))

    def _load(self, snapshot: Snapshot) -> None:
        state = snapshot.state
        invariant(isinstance(state, MetadataState), "a snapshot holds the metadata state")
        self.state = state
        self.has_state = True
        self.applied_index = snapshot.index
        self._checkpoint = None
        self.listener.on_state_loaded()

    def _apply(self, index: int, term: int, command: Any) -> None:
        invariant(index == self.applied_index + 1, lambda: f"entry {index} applied after {self.applied_index}")
        if command:
            self.state, changes = apply_commands(self.state, command)
        else:
            changes = Changes()
        self.applied_index = index
        self.listener.on_applied(index, term, changes)
        still_waiting = []
        for wanted_index, wanted_term, callback in self._waiting:
            if wanted_index == index:
                callback(wanted_term == term)
            elif wanted_index > index:
                still_waiting.append((wanted_index, wanted_term, callback))
        self._waiting = still_waiting
        self._maybe_compact()

    def _maybe_compact(self) -> None:
        every = self.ctx.config.snapshot_every_entries
        if self._file is not None and self._room()[1]:
            # A disk short of room: the log is cut into a snapshot sixteen times as often.
            every = max(MIN_SNAPSHOT_EVERY_ENTRIES_WHEN_TIGHT, every // 16)
        if self.applied_index % every != 0:
            return
        if self._checkpoint is not None and self._checkpoint[0] > self.raft.log.snapshot_index:
            self.raft.compact(*self._checkpoint)
        self._checkpoint = (self.applied_index, self.state)

    def _notice_leadership(self) -> None:
        leader, term, is_leader = self.raft.leader, self.raft.term, self.raft.is_leader
        if leader == self._leader and term == self._term and is_leader == self._was_leader:
            return
        was_leader = self._was_leader
        self._leader, self._term, self._was_leader = leader, term, is_leader
        if was_leader and not is_leader:
            # What this leader proposed may or may not commit under the next one: report it lost.
            waiting, self._waiting = self._waiting, []
            for _, _, callback in waiting:
                callback(False)
        self.listener.on_leadership(leader, term, was_leader)
