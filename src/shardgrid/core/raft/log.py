"""The replicated log: a snapshot of the state machine, then the entries after it.

The log is a Python list and a snapshot a reference to an immutable state value: compacting
costs nothing but dropping the prefix. What must reach the disk is tracked as it changes (the first
index rewritten, whether the snapshot changed) and handed out by ``take_unstable``, so a durable
server writes only what is new (``storage.py``). The configuration in effect is the newest one in
the log, committed or not (the thesis's rule for single-server changes); truncating a suffix
reverts to the one before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from shardgrid.core.errors import InvariantViolation, invariant
from shardgrid.core.raft.membership import ConfChange, Membership
from shardgrid.core.wire import Record

C = TypeVar("C")  # what an entry's command is: the codec names it, Raft never looks
S = TypeVar("S")  # what a snapshot's state is


class Entry(Record, Generic[C], kw_only=True):
    """One log entry. ``command`` is opaque to Raft (None for a new leader's empty entry).

    ``forced`` replaces the configuration outright: only an operator's recovery from a lost
    majority writes one (``RaftNode.force_new_configuration``)."""

    term: int
    index: int
    command: C | None = None
    change: ConfChange | None = None
    forced: Membership | None = None


class Snapshot(Record, Generic[S]):
    """The state machine after applying every entry up to ``index`` (``state`` is opaque)."""

    index: int
    term: int
    membership: Membership
    state: S


class RaftLog:
    """A snapshot and the entries after it; ``snapshot is None`` on a node that has nothing yet."""

    __slots__ = ("_changes", "_snapshot_changed", "_unstable_from", "entries", "snapshot")

    def __init__(self, snapshot: Snapshot | None) -> None:
        self.snapshot = snapshot
        self.entries: list[Entry] = []
        # (index, membership after it) for every configuration entry after the snapshot
        self._changes: list[tuple[int, Membership]] = []
        # Since the last take_unstable: the first index appended or truncated (0: none), and
        # whether the snapshot was replaced (a bootstrap snapshot is new to the disk too).
        self._unstable_from = 0
        self._snapshot_changed = snapshot is not None

    # --- reading ---------------------------------------------------------------------------------

    @property
    def snapshot_index(self) -> int:
        return self.snapshot.index if self.snapshot is not None else 0

    @property
    def first_index(self) -> int:
        return self.snapshot_index + 1

    @property
    def last_index(self) -> int:
        return self.snapshot_index + len(self.entries)

    @property
    def last_term(self) -> int:
        if self.entries:
            return self.entries[-1].term
        return self.snapshot.term if self.snapshot is not None else 0

    def term_at(self, index: int) -> int | None:
        """The term of the entry at ``index``; None when compacted away or beyond the end."""
        if self.snapshot is None:
            return 0 if index == 0 else None
        if index == self.snapshot.index:
            return self.snapshot.term
        position = index - self.snapshot.index - 1
        if 0 <= position < len(self.entries):
            return self.entries[position].term
        return None

    def matches(self, index: int, term: int) -> bool:
        return self.snapshot is not None and self.term_at(index) == term

    def entry(self, index: int) -> Entry:
        position = index - self.snapshot_index - 1
        invariant(0 <= position < len(self.entries), lambda: f"no entry {index} in the log")
        return self.entries[position]

    def slice(self, start: int, max_count: int) -> tuple[Entry, ...]:
        """Up to ``max_count`` entries from ``start`` (which must not be compacted)."""
        invariant(start > self.snapshot_index, lambda: f"entry {start} is compacted")
        position = start - self.snapshot_index - 1
        return tuple(self.entries[position : position + max_count])

    @property
    def membership(self) -> Membership:
        if self._changes:
            return self._changes[-1][1]
        return self.snapshot.membership if self.snapshot is not None else Membership()

    def membership_index(self) -> int:
        """The index of the entry that set the configuration in effect (the snapshot's when none)."""
        return self._changes[-1][0] if self._changes else self.snapshot_index

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Whether a log ending at (last_term, last_index) is at least as up to date as this one."""
        return (last_term, last_index) >= (self.last_term, self.last_index)

    # --- writing ---------------------------------------------------------------------------------

    def append(self, entry: Entry) -> None:
        invariant(entry.index == self.last_index + 1, lambda: f"entry {entry.index} after {self.last_index}")
        invariant(entry.term >= self.last_term, "terms in the log never decrease")
        self.entries.append(entry)
        self._mark_unstable(entry.index)
        if entry.forced is not None:
            self._changes.append((entry.index, entry.forced))
        elif entry.change is not None:
            self._changes.append((entry.index, entry.change.apply(self.membership)))

    @staticmethod
    def shape_problem(prev_index: int, prev_term: int, entries: Sequence[Entry], leader_term: int) -> str:
        """Why a leader's entries after ``prev_index`` cannot be a leader's log ('' when they can):
        indexes follow on one by one, terms never go down and never pass the leader's own (a
        server's own term, for the log it keeps on its disk)."""
        term = prev_term
        for offset, entry in enumerate(entries):
            if entry.index != prev_index + 1 + offset:
                return f"entry {entry.index} where {prev_index + 1 + offset} belongs"
            if not term <= entry.term <= leader_term:
                return f"entry {entry.index} of term {entry.term} after term {term}, with the term at {leader_term}"
            term = entry.term
        return ""

    def membership_at(self, index: int) -> Membership:
        """The configuration in effect once the entries up to ``index`` are in the log (the
        snapshot's for an index it covers)."""
        membership = self.snapshot.membership if self.snapshot is not None else Membership()
        for change_index, changed in self._changes:
            if change_index <= index:
                membership = changed
        return membership

    def changes_problem(self, prev_index: int, entries: Sequence[Entry]) -> str:
        """Why the configuration changes among ``entries`` (after ``prev_index``, which this log
        holds and at or after its snapshot) cannot apply one after another ('' when they can)."""
        membership = self.membership_at(prev_index)
        for entry in entries:
            if entry.forced is not None:
                membership = entry.forced
            elif entry.change is not None:
                problem = entry.change.problem(membership)
                if problem:
                    return f"entry {entry.index}: {problem}"
                membership = entry.change.apply(membership)
        return ""

    def append_after(self, prev_index: int, entries: Sequence[Entry], commit_index: int) -> int:
        """A leader's entries after ``prev_index`` (which matches): skip those we hold, truncate at
        the first conflict, append the rest. Returns the index of the last entry received."""
        for entry in entries:
            held = self.term_at(entry.index)
            if held == entry.term:
                continue
            if held is not None or entry.index <= self.snapshot_index:
                if entry.index <= commit_index:
                    raise InvariantViolation(f"a leader's entry conflicts with committed entry {entry.index}")
                self._truncate_from(entry.index)
            self.append(entry)
        return prev_index + len(entries)

    def _truncate_from(self, index: int) -> None:
        del self.entries[index - self.snapshot_index - 1 :]
        self._mark_unstable(index)
        while self._changes and self._changes[-1][0] >= index:
            self._changes.pop()

    def compact(self, index: int, state: Any) -> None:
        """Replace the entries up to ``index`` by a snapshot holding ``state``."""
        term = self.term_at(index)
        if term is None or index <= self.snapshot_index:
            raise InvariantViolation(f"cannot compact to {index}: the log holds {self.first_index}..{self.last_index}")
        membership = self.membership_at(index)
        del self.entries[: index - self.snapshot_index]
        self._changes = [(i, m) for i, m in self._changes if i > index]
        self.snapshot = Snapshot(index, term, membership, state)
        self._snapshot_changed = True

    def restore(self, snapshot: Snapshot) -> None:
        """Take a leader's snapshot: keep the entries after it only if our log agrees at its index."""
        if self.term_at(snapshot.index) == snapshot.term and snapshot.index <= self.last_index:
            kept = self.entries[snapshot.index - self.snapshot_index :]
        else:
            kept = []
        changes = [(i, m) for i, m in self._changes if i > snapshot.index] if kept else []
        self.snapshot = snapshot
        self.entries = kept
        self._changes = changes
        self._snapshot_changed = True
        if not kept:
            self._mark_unstable(snapshot.index + 1)  # what the disk holds after it is not ours

    # --- durability --------------------------------------------------------------------------------

    def _mark_unstable(self, index: int) -> None:
        self._unstable_from = index if not self._unstable_from else min(self._unstable_from, index)

    def take_unstable(self) -> tuple[Snapshot | None, int, tuple[Entry, ...]]:
        """What changed since the last call, as ``RaftWrite`` applies it: the snapshot if it was
        replaced, and the first index rewritten (0: none) with the entries from it on."""
        snapshot = self.snapshot if self._snapshot_changed else None
        start = self._unstable_from
        if start:
            start = max(start, self.snapshot_index + 1)  # a newer snapshot covers what lies before
        entries = tuple(self.entries[start - self.snapshot_index - 1 :]) if start else ()
        self._snapshot_changed = False
        self._unstable_from = 0
        return snapshot, start, entries

    def mark_stable(self) -> None:
        """Everything held is on the disk already (a log rebuilt from it)."""
        self._snapshot_changed = False
        self._unstable_from = 0
