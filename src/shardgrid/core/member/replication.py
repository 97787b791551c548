"""The owner's side of replication: per partition, the writes still waiting for backups.

Writes of a partition get consecutive replica sequences and backups acknowledge cumulatively (the
sequence they now hold), so the writes a partition waits on form a queue in sequence order: an
acknowledgement pops from its front, and a timeout looks only at its front (every call has the
same time budget, so deadlines grow along the queue). Nothing here scans every pending write.

What was sent stays, as the runs that carried it, until every backup of the partition holds it
(async backups, and those that get only the sequence, included), so that any backup that missed a
batch gets it again from exactly where it stands: one lost batch to an async backup must not leave
it holding everything after it (and stall the next sync write of another map). What is kept for
backups nobody waits on is bounded in bytes per partition; beyond it the oldest such runs go, and
the backups that lacked them are brought back by a sync.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from shardgrid.core.identity import MemberId
from shardgrid.core.limits import MAX_GET_ANSWER_BYTES
from shardgrid.core.member.answer import Answer, Indexes
from shardgrid.core.messages import PartitionRedirect, ReplyCode, WriteRun

_NOBODY: frozenset[MemberId] = frozenset()
# Runs held per partition for backups (async, or getting only the sequence) that did not
# acknowledge them yet: a bound in count as well as in bytes (a sequence-only run has no bytes).
MAX_HELD_RUNS = 10_000


@dataclass(slots=True, kw_only=True)
class PendingCall:
    """A client request waiting for its writes' backups: its answer, filled in as columns."""

    client_address: str
    call_id: int
    codes: list[ReplyCode]
    values: Answer | None  # None when the request asked for no values back
    redirects: dict[int, PartitionRedirect]
    open_writes: int  # pending writes (one per partition written) still waiting
    deadline_ms: int
    reason: str = ""
    # What a get may still answer in values' bytes: its reads stop there, and the keys left are
    # answered OVERLOADED (the client asks again for them, and each round brings that much more).
    answer_budget_bytes: int = MAX_GET_ANSWER_BYTES

    def mark(self, indexes: Indexes, status: ReplyCode) -> None:
        if isinstance(indexes, range):  # a partition's keys sent side by side: one slice
            self.codes[indexes.start : indexes.stop] = [status] * len(indexes)
            return
        codes = self.codes
        for index in indexes:
            codes[index] = status


@dataclass(slots=True, kw_only=True)
class PendingWrite:
    """One request's writes to one partition: replica sequences ``first_sequence..last_sequence``."""

    first_sequence: int
    last_sequence: int
    call: PendingCall
    indexes: Indexes  # the keys of the call they answer
    backups: tuple[MemberId, ...]  # the partition's backups when the owner applied them
    size_bytes: int = 0  # their keys and values, held (for resending) until every backup has them


@dataclass(slots=True, kw_only=True)
class PendingPartition:
    required: set[MemberId]  # the partition's backups now: only they are waited on
    writes: deque[PendingWrite] = field(default_factory=deque)
    # Each run with its keys and values in bytes and when it was first sent.
    runs: deque[tuple[WriteRun, int, int]] = field(default_factory=deque)
    acked: dict[MemberId, int] = field(default_factory=dict)  # the sequence each backup said it holds
    last_sent_ms: int = 0
    runs_bytes: int = 0  # keys and values of ``runs``

    @property
    def idle(self) -> bool:
        """Nothing waits and every backup holds everything: the partition is settled."""
        return not self.writes and not self.runs

    def add_run(self, run: WriteRun, size_bytes: int, now_ms: int) -> None:
        self.runs.append((run, size_bytes, now_ms))
        self.runs_bytes += size_bytes

    def overdue(self, now_ms: int, timeout_ms: int) -> set[MemberId] | frozenset[MemberId]:
        """The backups that have not acknowledged a run sent ``timeout_ms`` ago or more: nobody
        may be waiting on them (an async backup, or one that gets only the sequence), but a
        backup that cannot take the owner's runs (it lost its store, or holds another lineage)
        keeps the partition unsettled until a sync brings it back."""
        if not self.runs or now_ms - self.runs[0][2] < timeout_ms:
            return _NOBODY
        last = self.runs[0][0].last_sequence
        return {backup for backup in self.required if not self.holds(backup, last)}

    def acknowledge(self, backup: MemberId, sequence: int) -> None:
        if sequence > self.acked.get(backup, -1):
            self.acked[backup] = sequence

    def holds(self, backup: MemberId, sequence: int) -> bool:
        return self.acked.get(backup, -1) >= sequence

    def complete(self) -> list[PendingWrite]:
        """Pop the writes at the front that every backup of theirs still required holds."""
        done = []
        writes = self.writes
        required = self.required
        acked = self.acked
        while writes:
            write = writes[0]
            last = write.last_sequence
            # (A loop, not all() over a generator: this runs once per write on the hot path.)
            for backup in write.backups:
                if acked.get(backup, -1) < last and backup in required:
                    break
            else:
                done.append(writes.popleft())
                continue
            break
        self._prune_runs()
        return done

    def expire(self, now_ms: int) -> list[PendingWrite]:
        """Pop the writes at the front whose call ran out of time."""
        expired = []
        while self.writes and now_ms >= self.writes[0].call.deadline_ms:
            expired.append(self.writes.popleft())
        self._prune_runs()
        return expired

    def take_all(self) -> list[PendingWrite]:
        writes = list(self.writes)
        self.writes.clear()
        self.runs.clear()
        self.runs_bytes = 0
        return writes

    def drop_unwaited_runs(self, max_bytes: int) -> set[MemberId] | frozenset[MemberId]:
        """Over ``max_bytes`` (or ``MAX_HELD_RUNS`` runs), drop the oldest runs from before every
        waiting write; returns the backups that lacked them: they need a sync now (one may be a
        sync backup of a waiting write that got only the sequence of a dropped run)."""
        if self.runs_bytes <= max_bytes and len(self.runs) <= MAX_HELD_RUNS:
            return _NOBODY
        lagging: set[MemberId] = set()
        oldest_waiting = self.writes[0].first_sequence if self.writes else None
        while (self.runs_bytes > max_bytes or len(self.runs) > MAX_HELD_RUNS) and self.runs:
            run, size_bytes, _ = self.runs[0]
            if oldest_waiting is not None and run.last_sequence >= oldest_waiting:
                break
            self.runs.popleft()
            self.runs_bytes -= size_bytes
            lagging.update(b for b in self.required if not self.holds(b, run.last_sequence))
        return lagging

    def runs_for(self, backup: MemberId) -> list[tuple[WriteRun, int]]:
        """What ``backup`` has not acknowledged yet (whole runs: it skips what it already holds)."""
        held = self.acked.get(backup, -1)
        return [(run, size) for run, size, _ in self.runs if run.last_sequence > held]

    def runs_due_for(self, backup: MemberId, now_ms: int, after_ms: int) -> list[tuple[WriteRun, int]]:
        """What ``backup`` has not acknowledged, when the oldest of it was first sent ``after_ms``
        ago or more; nothing otherwise. Under steady load a partition always has runs on their
        way: sending those again before they could have been answered only doubled the work of
        the owner, the backup and the link (a member spent a tenth of its time on it)."""
        held = self.acked.get(backup, -1)
        oldest_ms = next((sent_ms for run, _, sent_ms in self.runs if run.last_sequence > held), None)
        if oldest_ms is None or now_ms - oldest_ms < after_ms:
            return []
        return self.runs_for(backup)

    def _prune_runs(self) -> None:
        runs = self.runs
        if not runs:
            return
        acked = self.acked
        required = self.required
        if len(required) == 1:
            floor = acked.get(next(iter(required)), -1)
        else:
            floor = min((acked.get(backup, -1) for backup in required), default=runs[-1][0].last_sequence)
        while runs and runs[0][0].last_sequence <= floor:
            self.runs_bytes -= runs.popleft()[1]
