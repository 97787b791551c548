"""The owner's side of replication: per partition, the writes still waiting for backups.

Writes of a partition get consecutive replica sequences and backups acknowledge cumulatively (the
sequence they now hold), so the writes a partition waits on form a queue in sequence order: an
acknowledgement pops from its front, and a timeout looks only at its front (every call has the
same time budget, so deadlines grow along the queue). Nothing here scans every pending write.

What was sent stays, as the runs that carried it, until every backup holds it, so that a backup
that missed a batch gets it again from exactly where it stands.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from shardgrid.core.identity import Replica
from shardgrid.core.messages import OperationResult, WriteRun


@dataclass(slots=True)
class PendingCall:
    client_address: str
    call_id: int
    results: list[OperationResult | None]
    open_writes: int
    deadline_ms: int


@dataclass(slots=True)
class PendingWrite:
    sequence: int
    call: PendingCall
    index: int  # position of the operation in the call
    backups: tuple[Replica, ...]  # the partition's backups when the owner applied it


@dataclass(slots=True)
class PendingPartition:
    writes: deque[PendingWrite] = field(default_factory=deque)
    runs: deque[WriteRun] = field(default_factory=deque)
    acked: dict[Replica, int] = field(default_factory=dict)  # the sequence each backup said it holds
    last_sent_ms: int = 0

    def acknowledge(self, backup: Replica, sequence: int) -> None:
        if sequence > self.acked.get(backup, -1):
            self.acked[backup] = sequence

    def holds(self, backup: Replica, sequence: int) -> bool:
        return self.acked.get(backup, -1) >= sequence

    def complete(self, required: set[Replica]) -> list[PendingWrite]:
        """Pop the writes at the front that every backup of theirs still required holds."""
        done = []
        writes = self.writes
        while writes:
            write = writes[0]
            if not all(self.holds(b, write.sequence) for b in write.backups if b in required):
                break
            done.append(writes.popleft())
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
        return writes

    def runs_for(self, backup: Replica) -> tuple[WriteRun, ...]:
        """What ``backup`` has not acknowledged yet (whole runs: it skips what it already holds)."""
        held = self.acked.get(backup, -1)
        return tuple(run for run in self.runs if run.last_sequence > held)

    def _prune_runs(self) -> None:
        oldest = self.writes[0].sequence if self.writes else None
        while self.runs and (oldest is None or self.runs[0].last_sequence < oldest):
            self.runs.popleft()


@dataclass(slots=True)
class _OpenRun:
    lineage: str
    first_sequence: int
    kind: str
    map_name: str
    keys: list[bytes]
    values: list[bytes]


class Outbox:
    """The writes of one handled event, gathered into runs per partition, then one batch per
    backup: a put_all of a thousand keys costs each backup one message, not a thousand."""

    def __init__(self) -> None:
        self._runs: dict[int, list[_OpenRun]] = {}
        self._backups: dict[int, tuple[Replica, ...]] = {}

    def add(
        self,
        pid: int,
        lineage: str,
        sequence: int,
        kind: str,
        map_name: str,
        key: bytes,
        value: bytes | None,
        backups: tuple[Replica, ...],
    ) -> None:
        runs = self._runs.setdefault(pid, [])
        self._backups[pid] = backups
        last = runs[-1] if runs else None
        if (
            last is None
            or last.kind != kind
            or last.map_name != map_name
            or last.lineage != lineage
            or last.first_sequence + len(last.keys) != sequence
        ):
            last = _OpenRun(lineage, sequence, kind, map_name, [], [])
            runs.append(last)
        last.keys.append(key)
        if value is not None:
            last.values.append(value)

    def take(self) -> list[tuple[int, tuple[WriteRun, ...], tuple[Replica, ...]]]:
        """Each partition's runs and backups, in the order the partitions were first written."""
        out = []
        for pid, runs in self._runs.items():
            built = tuple(
                WriteRun(pid, r.lineage, r.first_sequence, r.kind, r.map_name, tuple(r.keys), tuple(r.values))
                for r in runs
            )
            out.append((pid, built, self._backups[pid]))
        self._runs.clear()
        self._backups.clear()
        return out
