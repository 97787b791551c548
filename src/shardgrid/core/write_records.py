"""Which writes of each client a partition applied, so that a retry is answered, never applied twice.

A client names each write it sends (``MapRequest.client_id`` and ``write_id``), the same in every
attempt of it. A partition remembers, per client (a *writer*), which write ids it applied: the
highest one and a window of the ids below it, as bits, as Kafka's idempotent producer keeps its
last sequences per partition. An attempt whose write the partition applied already gets the first
answer and changes nothing; one older than the window cannot be told apart from a duplicate, and is
refused without being applied (a first attempt that waited behind thousands of its client's later
writes: the client knows it was not applied; a retry: the client knows it may have been).

The records travel with the partition's writes to its backups (in each write run), with migrations
and replica syncs, so whichever member owns the partition next answers a duplicate the same way.
They are kept only while an attempt of a recorded write may still arrive: its deadline (an attempt
past it is refused anyway) and a grace for clocks; a writer whose every record is past that is
forgotten. Everything is bounded: writers per partition, answers with values per writer and their
bytes per partition. A partition whose writers are all still live refuses a new writer (OVERLOADED)
rather than forget one early.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Annotated

import msgspec

from shardgrid.core.limits import MAX_COUNTER, MAX_OPERATIONS_PER_REQUEST
from shardgrid.core.wire import Counter, Record

# Write ids below a writer's highest one that are remembered, as bits.
WINDOW_IDS = 4_096
# Refused writes a partition remembers at once (``WriteRecords.refusals``).
MAX_REFUSALS_PER_PARTITION = 1_024
# Writers a partition remembers at once.
MAX_WRITERS_PER_PARTITION = 256
# Answers with values (a put's previous value, a put-if-absent's value that stays) kept per writer,
# and the bytes of those values per partition.
MAX_ANSWERS_PER_WRITER = 16
MAX_ANSWER_BYTES_PER_PARTITION = 1024 * 1024
# How long past an attempt's deadline its write is still remembered (clocks, the transport's guess
# of when it was sent); and how long a write whose attempt gave no deadline is.
RECORD_GRACE_MS = 5_000
NO_DEADLINE_TTL_MS = 600_000
MAX_CLIENT_ID_CHARS = 64
ClientId = Annotated[str, msgspec.Meta(max_length=MAX_CLIENT_ID_CHARS)]
# One write's answer: a value (or none) per key it wrote in the partition.
AnswerValues = Annotated[tuple[bytes | None, ...], msgspec.Meta(max_length=MAX_OPERATIONS_PER_REQUEST)]


class Seen(enum.Enum):
    """What a partition knows of one write of one client."""

    NEW = "new"  # never applied here: apply it
    APPLIED = "applied"  # applied already: answer, do not apply
    TOO_OLD = "too-old"  # older than the window: cannot tell; refused, not applied


@dataclass(slots=True)
class Answer:
    last_sequence: int  # the partition's replica sequence once this write was applied
    values: tuple[bytes | None, ...] | None  # what it answered, when it answered values


@dataclass(slots=True)
class Writer:
    high: int  # the highest write id applied
    window: int  # bit i: write id ``high - i`` was applied (i < WINDOW_IDS)
    expires_ms: int  # no attempt of a write recorded here can arrive after this (this member's clock)
    answers: dict[int, Answer] = field(default_factory=dict)  # by write id, oldest first
    # The largest replica sequence of a write whose answer is not kept (it answered no values, or
    # its answer was let go): a retry of one is settled once the partition's writes up to it are.
    forgotten_sequence: int = 0

    def applied(self, write_id: int) -> Seen:
        if write_id > self.high:
            return Seen.NEW
        offset = self.high - write_id
        if offset >= WINDOW_IDS:
            return Seen.TOO_OLD
        return Seen.APPLIED if self.window >> offset & 1 else Seen.NEW

    def mark(self, write_id: int) -> None:
        if write_id > self.high:
            shift = write_id - self.high
            self.window = ((self.window << shift) | 1) & ((1 << WINDOW_IDS) - 1) if shift < WINDOW_IDS else 1
            self.high = write_id
        elif self.high - write_id < WINDOW_IDS:
            self.window |= 1 << (self.high - write_id)
        # else older than the window: an owner refuses it; a backup has nothing to remember


class WriterRecord(Record, kw_only=True):
    """A writer as it travels to another replica (in a migration's or sync's last chunk)."""

    client_id: ClientId
    high: Counter
    window: Annotated[bytes, msgspec.Meta(max_length=WINDOW_IDS // 8)]
    ttl_ms: Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNTER)]
    answer_ids: Annotated[tuple[Counter, ...], msgspec.Meta(max_length=MAX_ANSWERS_PER_WRITER)] = ()
    answer_sequences: Annotated[tuple[Counter, ...], msgspec.Meta(max_length=MAX_ANSWERS_PER_WRITER)] = ()
    answer_values: Annotated[tuple[AnswerValues | None, ...], msgspec.Meta(max_length=MAX_ANSWERS_PER_WRITER)] = ()
    forgotten_sequence: Counter = 0


WriterRecords = Annotated[tuple[WriterRecord, ...], msgspec.Meta(max_length=MAX_WRITERS_PER_PARTITION)]


@dataclass(slots=True)
class WriteRecords:
    """One partition's writers."""

    writers: dict[str, Writer] = field(default_factory=dict)
    answer_bytes: int = 0
    # Writes this owner refused at its memory or disk limit, until when an attempt of one may still come:
    # a late copy of the attempt is refused the same way. The owner's own (a copy of a request
    # goes to the member it was sent to), not replicated; bounded, the oldest let go first.
    refusals: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)  # (expires_ms, code)

    def refuse(self, client_id: str, write_id: int, expires_ms: int, code: int) -> None:
        """Remember that this write was refused with ``code`` (a ``ReplyCode``) until ``expires_ms``."""
        self.refusals[(client_id, write_id)] = (expires_ms, code)
        while len(self.refusals) > MAX_REFUSALS_PER_PARTITION:
            del self.refusals[next(iter(self.refusals))]

    def refused(self, client_id: str, write_id: int, now_ms: int) -> int | None:
        """The code this write was refused with, while it is remembered (None: it was not)."""
        refusal = self.refusals.get((client_id, write_id))
        if refusal is None:
            return None
        if refusal[0] < now_ms:
            del self.refusals[(client_id, write_id)]
            return None
        return refusal[1]

    def seen(self, client_id: str, write_id: int, now_ms: int) -> tuple[Seen, Writer | None]:
        writer = self.writers.get(client_id)
        if writer is None or writer.expires_ms < now_ms:
            return Seen.NEW, None
        return writer.applied(write_id), writer

    def room_for(self, client_id: str, now_ms: int) -> bool:
        """Whether a write of ``client_id`` can be recorded: it is a writer already, or there is
        room for one (writers past their time make room)."""
        if client_id in self.writers or len(self.writers) < MAX_WRITERS_PER_PARTITION:
            return True
        self.forget_expired(now_ms)
        return len(self.writers) < MAX_WRITERS_PER_PARTITION

    def record(
        self,
        client_id: str,
        write_id: int,
        last_sequence: int,
        values: tuple[bytes | None, ...] | None,
        expires_ms: int,
    ) -> None:
        """Remember that this partition applied the write (the caller checked ``room_for``)."""
        writer = self.writers.get(client_id)
        if writer is None:
            writer = self.writers[client_id] = Writer(high=0, window=0, expires_ms=expires_ms)
        writer.mark(write_id)
        writer.expires_ms = max(writer.expires_ms, expires_ms)
        if values is None:
            # No answer to keep: a retry is answered OK once the writer's writes up to this one
            # are on every sync backup, SETTLING until then. (Found by an outside tester: such a
            # write left the sequence unrecorded, and a retry was answered OK while the first
            # attempt still waited for a backup that never got it.)
            writer.forgotten_sequence = max(writer.forgotten_sequence, last_sequence)
            return
        size = sum(len(v) for v in values if v is not None)
        writer.answers[write_id] = Answer(last_sequence, values)
        self.answer_bytes += size
        while len(writer.answers) > MAX_ANSWERS_PER_WRITER or (
            self.answer_bytes > MAX_ANSWER_BYTES_PER_PARTITION and writer.answers
        ):
            self._forget_answer(writer, next(iter(writer.answers)))

    def _forget_answer(self, writer: Writer, write_id: int) -> None:
        answer = writer.answers.pop(write_id)
        writer.forgotten_sequence = max(writer.forgotten_sequence, answer.last_sequence)
        self.answer_bytes -= sum(len(v) for v in answer.values or () if v is not None)

    def forget_expired(self, now_ms: int) -> None:
        for client_id in [c for c, w in self.writers.items() if w.expires_ms < now_ms]:
            writer = self.writers.pop(client_id)
            self.answer_bytes -= sum(len(v) for a in writer.answers.values() for v in a.values or () if v is not None)

    # --- moving with the partition ----------------------------------------------------------------

    def snapshot(self, now_ms: int) -> tuple[WriterRecord, ...]:
        self.forget_expired(now_ms)
        return tuple(
            WriterRecord(
                client_id=client_id,
                high=writer.high,
                window=writer.window.to_bytes(WINDOW_IDS // 8, "little"),
                ttl_ms=writer.expires_ms - now_ms,
                answer_ids=tuple(writer.answers),
                answer_sequences=tuple(a.last_sequence for a in writer.answers.values()),
                answer_values=tuple(a.values for a in writer.answers.values()),
                forgotten_sequence=writer.forgotten_sequence,
            )
            for client_id, writer in sorted(self.writers.items())
        )

    def install(self, records: tuple[WriterRecord, ...], now_ms: int) -> None:
        """Take another replica's writers whole (a migration's or a sync's), in place of these."""
        self.writers = {}
        self.answer_bytes = 0
        for record in records:
            writer = Writer(
                high=record.high,
                window=int.from_bytes(record.window, "little"),
                expires_ms=now_ms + record.ttl_ms,
                forgotten_sequence=record.forgotten_sequence,
            )
            for write_id, sequence, values in zip(
                record.answer_ids, record.answer_sequences, record.answer_values, strict=False
            ):
                writer.answers[write_id] = Answer(sequence, values)
                self.answer_bytes += sum(len(v) for v in values or () if v is not None)
            self.writers[record.client_id] = writer


def records_problem(records: tuple[WriterRecord, ...]) -> str:
    """What makes writers from a peer unfit to install ('' when nothing): the codec checked types
    and bounds; this checks what holds between fields."""
    names = [r.client_id for r in records]
    if len(set(names)) != len(names):
        return "a writer is named twice"
    for record in records:
        counts = {len(record.answer_ids), len(record.answer_sequences), len(record.answer_values)}
        if len(counts) != 1:
            return f"writer {record.client_id!r}: its answers' columns differ in length"
        if any(write_id > record.high for write_id in record.answer_ids):
            return f"writer {record.client_id!r}: an answer above its highest write id"
    return ""
