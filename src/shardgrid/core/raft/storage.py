"""What a Raft server must keep across a crash, and the writes that keep it.

Raft is safe across restarts only if a server never forgets, once it has said so to anyone, the
term it reached, the vote it cast in it, and the entries it acknowledged (the Raft paper, figure
2; etcd's raft library hands them to its caller in each ``Ready``). A ``RaftNode`` collects what
changed in these since it was last asked as one ``RaftWrite`` (``take_write``); the caller makes
it durable before it sends any of the node's messages taken after it. ``RaftStorage`` is what those
writes add up to: replaying the writes that reached the disk, in order, rebuilds it, and
``RaftNode.restored`` starts a server from it.

The commit index is kept too (as etcd's HardState does), though Raft would learn it again from
the leader: a member restarted with it applies its committed metadata at once, instead of running
on its snapshot's older table until a leader speaks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shardgrid.core.errors import invariant
from shardgrid.core.identity import MemberId
from shardgrid.core.raft.log import Entry, RaftLog, Snapshot
from shardgrid.core.wire import Counter, Record


class HardState(Record):
    """The term this server reached, whom it voted for in it, and how far it knows entries committed."""

    term: Counter
    voted_for: MemberId | None
    commit: Counter


@dataclass(frozen=True, slots=True, kw_only=True)
class RaftWrite:
    """One step's changes, applied in this order: ``snapshot`` replaces the entries it covers;
    the entries from ``entries_from`` on are replaced by ``entries``; then ``hard_state``.

    ``entries_from`` is 0 when the entries are unchanged (``entries`` is then empty)."""

    hard_state: HardState | None = None
    snapshot: Snapshot | None = None
    entries_from: int = 0
    entries: tuple[Entry, ...] = ()

    def __post_init__(self) -> None:
        invariant(self.entries_from > 0 or not self.entries, "entries without their first index")
        invariant(
            all(entry.index == self.entries_from + offset for offset, entry in enumerate(self.entries)),
            "a write's entries follow one another from entries_from",
        )

    @property
    def empty(self) -> bool:
        return self.hard_state is None and self.snapshot is None and self.entries_from == 0


@dataclass(slots=True)
class RaftStorage:
    """The durable state of one server: its hard state, its snapshot and the entries after it.

    A loaded one is checked whole (``problem``) before a server starts from it: a disk that holds
    what no server could have written is corrupt, and a member must not vote or lead on it."""

    hard_state: HardState = field(default_factory=lambda: HardState(0, None, 0))
    snapshot: Snapshot | None = None
    entries: list[Entry] = field(default_factory=list)

    @property
    def snapshot_index(self) -> int:
        return self.snapshot.index if self.snapshot is not None else 0

    @property
    def last_index(self) -> int:
        return self.entries[-1].index if self.entries else self.snapshot_index

    def apply(self, write: RaftWrite) -> None:
        """Take one write (the same order a server produced them in)."""
        if write.snapshot is not None:
            index = write.snapshot.index
            self.entries = [entry for entry in self.entries if entry.index > index]
            self.snapshot = write.snapshot
        if write.entries_from:
            first = max(write.entries_from, self.snapshot_index + 1)
            if first != self.last_index + 1:  # a conflict rewrites the tail (an append just adds)
                self.entries = [entry for entry in self.entries if entry.index < first]
            self.entries.extend(entry for entry in write.entries if entry.index >= first)
        if write.hard_state is not None:
            self.hard_state = write.hard_state

    def problem(self) -> str:
        """Why no server could have left this state ('' when one could)."""
        snapshot_term = self.snapshot.term if self.snapshot is not None else 0
        shape = RaftLog.shape_problem(self.snapshot_index, snapshot_term, self.entries, self.hard_state.term)
        if shape:
            return shape
        if self.hard_state.term < snapshot_term:
            return f"the term {self.hard_state.term} is below its snapshot's {snapshot_term}"
        if self.snapshot is None and self.entries:
            return "entries without a snapshot before them"
        if self.hard_state.commit < self.snapshot_index:
            return f"commit {self.hard_state.commit} below the snapshot's {self.snapshot_index}"
        if self.hard_state.commit > self.last_index:
            return f"commit {self.hard_state.commit} beyond the log's last entry {self.last_index}"
        if self.snapshot is not None:
            # Configuration changes that cannot follow one another (found by an outside tester:
            # they passed the load and crashed the restart with an invariant violation).
            changes = RaftLog(self.snapshot).changes_problem(self.snapshot_index, self.entries)
            if changes:
                return changes
        return ""

    def write_problem(self, write: RaftWrite) -> str:
        """Why no server that left this storage could write ``write`` next ('' when one could):
        its term never goes back, nor its vote within a term, nor its commit point, nor its
        snapshot, and no entry it knew committed is written again. A record of another time
        replayed into the file passes its checksum, not this (found by an outside tester)."""
        held = self.hard_state
        hard = write.hard_state
        if hard is not None:
            if hard.term < held.term:
                return f"the term goes back from {held.term} to {hard.term}"
            if hard.term == held.term and held.voted_for is not None and hard.voted_for != held.voted_for:
                return f"the vote of term {hard.term} changes"
            if hard.commit < held.commit:
                return f"the commit point goes back from {held.commit} to {hard.commit}"
        if write.snapshot is not None and write.snapshot.index < self.snapshot_index:
            return f"the snapshot goes back from {self.snapshot_index} to {write.snapshot.index}"
        if write.entries_from and write.entries_from <= held.commit:
            return f"entry {write.entries_from} is written again though {held.commit} was committed"
        return ""
