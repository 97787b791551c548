"""Clients that write unique values and keep a ledger of what the grid acknowledged.

Each client owns its keys (no other client writes them) and works through its budget of
operations one at a time, routing each to the partition owner from a table it fetches and
corrects on WRONG_OWNER. A write's outcome in the ledger is ``acked`` (the owner and every backup
had it), ``failed`` (definitely not applied) or ``maybe`` (it may or may not have been applied:
timed out, or indeterminate).

Values are unique and a key's writes and reads come from one client, one at a time, so both
checks are exact: a read, and the final state, may show only the key's last acknowledged value (or
nothing, before any) or the value of a later ``maybe`` write, and never one older than a value a
read already returned. Anything else is a lost acknowledged write, a stale read (from a member that
should no longer have served it), or a resurrected write (applied late, or twice, over a newer one).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from shardgrid.core.call_policy import (
    CallProgress,
    CallSettings,
    Decision,
    Verdict,
    on_answer,
    on_deadline,
    on_no_answer,
)
from shardgrid.core.errors import InvariantViolation
from shardgrid.core.hashing import partition_id_of_serialized, serialize_key
from shardgrid.core.messages import (
    EMPTY_COLUMN,
    GET,
    PUT,
    REPLACE_IF_SAME,
    Column,
    MapReply,
    MapRequest,
    ReplyCode,
    TableReply,
    TableRequest,
)

MAP_NAME = "ledger"
# With async backups configured, half of each client's keys live in this map: the same sync
# backups as the ledger, and async backups in the slots after them.
ASYNC_MAP_NAME = "ledger-async"
# With a cache map configured, a third of each client's keys live in this map, which a stand-in
# serves from empty while its partition is unavailable (``serve_when_unavailable``): a read of one
# may come back empty, but never older than a value acknowledged or read before.
CACHE_MAP_NAME = "ledger-cache"
# A map whose entries live TTL_MAP_SECONDS (its time_to_live_seconds): its keys may read empty once
# their last write could have expired, and must never read a value that surely expired.
TTL_MAP_NAME = "ledger-ttl"
TTL_MAP_SECONDS = 1
# A map whose entries go after IDLE_MAP_SECONDS unread and unwritten (its max_idle_seconds): its
# keys may read empty at any time (idleness is judged by its owner, from the reads it served), and
# never read a value older than one acknowledged.
IDLE_MAP_NAME = "ledger-idle"
IDLE_MAP_SECONDS = 1
DEADLINE_MARGIN_MS = 20  # the smart client's (client/aio.py)
ACKED = "acked"
MAYBE = "maybe"
FAILED = "failed"


@dataclass(slots=True)
class Write:
    value: bytes
    issued_ms: int
    outcome: str = FAILED
    finished_ms: int = 0  # when its call ended (an applied write was applied by then)
    # Its call overlapped the time since a crashed member's last sync (``fsync`` other than
    # ``always``): it may be lost, and may show in reads until its partition's replicas agree.
    maybe_lost: bool = False


@dataclass(slots=True)
class Ledger:
    writes: dict[bytes, list[Write]] = field(default_factory=dict)
    reads_checked: int = 0
    read_violations: list[tuple[bytes, str]] = field(default_factory=list)  # (key, what was wrong)
    # Per key, the index of the latest of its writes a read returned: that write was applied, and
    # an earlier one may not show again (it would have been applied late, or twice).
    observed: dict[bytes, int] = field(default_factory=dict)
    cache_keys: set[bytes] = field(default_factory=set)  # in the cache map: may come back empty
    ttl_keys: dict[bytes, int] = field(default_factory=dict)  # in the TTL map: how long a write lives, ms
    # How far two members' record clocks may be apart: an entry may expire that much sooner or
    # later on its next owner than on the one that wrote it.
    ttl_slack_ms: int = 0
    # Crashes of members that sync on a timer: (last sync, crash) times, within which a write
    # may be lost even though it was acknowledged.
    lossy_windows: list[tuple[int, int]] = field(default_factory=list)

    def check_read(self, key: bytes, value: bytes | None, started_ms: int, now_ms: int, member: str) -> None:
        self.reads_checked += 1
        allowed = self.allowed_final_values(key, now_ms)
        ttl_ms = self.ttl_keys.get(key)
        if ttl_ms is not None and value is not None:
            # A write is applied by the time its call ends, and expires ttl_ms after it was
            # applied: a read sent later than that may not return it.
            written = next((w for w in self.writes.get(key, []) if w.value == value), None)
            latest_ms = written.finished_ms + ttl_ms + self.ttl_slack_ms if written is not None else 0
            if written is not None and written.finished_ms and latest_ms <= started_ms:
                self.read_violations.append(
                    (
                        key,
                        f"read of {key!r} sent at {started_ms} ms, answered at {now_ms} ms by {member}, returned "
                        f"{value!r}, written by a call that ended at {written.finished_ms} ms: expired at "
                        f"{latest_ms} ms at the latest",
                    )
                )
                return
        if value not in allowed:
            shown = sorted(map(repr, allowed))
            self.read_violations.append(
                (
                    key,
                    f"read of {key!r} sent at {started_ms} ms, answered at {now_ms} ms by {member}, "
                    f"returned {value!r}; allowed {shown}",
                )
            )
            return
        writes = self.writes.get(key, [])
        index = next((i for i, w in enumerate(writes) if value is not None and w.value == value), -1)
        if index > self.observed.get(key, -1) and not (index >= 0 and writes[index].maybe_lost):
            self.observed[key] = index

    def allowed_final_values(self, key: bytes, now_ms: int | None = None) -> set[bytes | None]:
        """The last acknowledged write's value and those of the maybe writes after it, from the
        latest a read already returned on (nothing before the first acknowledged or seen write).
        Anything else is lost, stale (older than a newer acknowledged write) or resurrected (a
        write applied after a later one had been read). A key of the TTL map may also be empty
        once that value could have expired (at ``now_ms``; None: at the end, when any may have)."""
        writes = self.writes.get(key, [])
        last_acked = max((i for i, w in enumerate(writes) if w.outcome == ACKED), default=-1)
        floor = max(last_acked, self.observed.get(key, -1))
        allowed: set[bytes | None] = {w.value for w in writes[floor + 1 :] if w.outcome == MAYBE}
        if floor >= 0:
            allowed.add(writes[floor].value)
        if floor < 0 or key in self.cache_keys:
            allowed.add(None)
        ttl_ms = self.ttl_keys.get(key)
        soonest_ms = writes[floor].issued_ms + (ttl_ms or 0) - self.ttl_slack_ms if floor >= 0 else 0
        if ttl_ms is not None and floor >= 0 and (now_ms is None or soonest_ms <= now_ms):
            allowed.add(None)
        return allowed

    def lossy_crash(self, synced_ms: int, crashed_ms: int) -> None:
        """A member that syncs on a timer (``fsync`` other than ``always``) crashed at
        ``crashed_ms``, its disk last synced at ``synced_ms``: a write whose call overlapped that
        span may be lost (the member may have applied it, as owner or backup, after its last
        sync), acknowledged or not. Those finished are counted as maybe now, those still in flight
        when they finish (``settle``); a read that returned one no longer bounds what may come
        back."""
        self.lossy_windows.append((synced_ms, crashed_ms))
        for key, writes in self.writes.items():
            downgraded = False
            for write in writes:
                if write.outcome == ACKED and write.finished_ms >= synced_ms and write.issued_ms <= crashed_ms:
                    write.outcome = MAYBE
                    downgraded = True
                if write.issued_ms <= crashed_ms and (write.finished_ms >= synced_ms or not write.finished_ms):
                    write.maybe_lost = True
            if downgraded or key in self.observed:
                self._unobserve(key)

    def settle(self, key: bytes, write: Write) -> None:
        """A write's call ended: acknowledged within a lossy crash's span, it may be lost."""
        if write.outcome != ACKED:
            return
        if any(write.finished_ms >= synced and write.issued_ms <= crashed for synced, crashed in self.lossy_windows):
            write.outcome = MAYBE
            write.maybe_lost = True
            self._unobserve(key)

    def _unobserve(self, key: bytes) -> None:
        """A read's floor no higher than the key's last acknowledged write: what a read returned
        after it may have been lost since."""
        observed = self.observed.get(key)
        if observed is None:
            return
        writes = self.writes.get(key, [])
        last_acked = max((i for i, w in enumerate(writes) if w.outcome == ACKED), default=-1)
        if observed > last_acked:
            self.observed[key] = last_acked

    def counts(self) -> dict[str, int]:
        result = {ACKED: 0, MAYBE: 0, FAILED: 0}
        for writes in self.writes.values():
            for write in writes:
                result[write.outcome] += 1
        return result


@dataclass(slots=True, kw_only=True)
class Call:
    call_id: int
    key: bytes
    kind: str  # PUT or GET
    partition_id: int
    write: Write | None
    map_name: str
    progress: CallProgress
    attempts: int = 0
    sent_ms: int = 0
    retry_at_ms: int = 0
    target: str | None = None
    first_sent_ms: int = 0
    write_id: int = 0  # a write's name at its client, the same in every attempt (0: a read)
    expected: bytes | None = None  # a compare-and-set's: the value it replaces
    swapped: bool | None = None  # a compare-and-set's answer: whether the key held ``expected``


class SimClient:
    """One client: ``tick`` and ``on_message`` return the messages it sends, as (address, message)."""

    MAX_ATTEMPTS = 200  # a bound under the call timeout's (at the minimum backoff)
    ATTEMPT_TIMEOUT_MS = 2_000  # by default, an attempt unanswered this long: its member may be gone
    THINK_MS = 5

    def __init__(
        self,
        name: str,
        rng: random.Random,
        ledger: Ledger,
        partition_count: int,
        key_count: int,
        use_async_map: bool = False,
        settings: CallSettings | None = None,
        use_cache_map: bool = False,
        attempt_timeout_ms: int = ATTEMPT_TIMEOUT_MS,
        use_ttl_map: bool = False,
        ttl_slack_ms: int = 0,
        compare_and_set: bool = False,
        use_idle_map: bool = False,
    ) -> None:
        # A share of the writes are compare-and-sets (REPLACE_IF_SAME) of the key's last
        # acknowledged value: applied only where the key still holds it, as the answer says.
        self.compare_and_set = compare_and_set
        self.attempt_timeout_ms = attempt_timeout_ms
        self.address = name
        self.settings = settings or CallSettings()
        self.rng = rng
        self.ledger = ledger
        self.partition_count = partition_count
        self.keys = [serialize_key(f"{name}-key-{i}") for i in range(key_count)]
        self.map_of = {key: ASYNC_MAP_NAME if use_async_map and i % 2 else MAP_NAME for i, key in enumerate(self.keys)}
        if use_cache_map:
            for key in self.keys[2::3]:
                self.map_of[key] = CACHE_MAP_NAME
                ledger.cache_keys.add(key)
        if use_ttl_map:
            for key in self.keys[1::3]:
                self.map_of[key] = TTL_MAP_NAME
                ledger.ttl_keys[key] = TTL_MAP_SECONDS * 1000
        if use_idle_map:
            for key in self.keys[0::3]:
                self.map_of[key] = IDLE_MAP_NAME
                ledger.cache_keys.add(key)  # may read empty, never older
        ledger.ttl_slack_ms = ttl_slack_ms
        self.owners: list[str | None] = [None] * partition_count
        self.budget = 0
        self.call: Call | None = None
        self.counter = 0
        self.next_op_ms = 0
        self.completed_ops = 0

    def give(self, operations: int) -> None:
        self.budget += operations

    @property
    def idle(self) -> bool:
        return self.call is None and self.budget == 0

    def abandon(self) -> None:
        """The run ends with this call unanswered: its write may or may not have been applied."""
        if self.call is not None and self.call.write is not None:
            self.call.write.outcome = MAYBE
        self.call = None
        self.budget = 0

    def tick(self, now_ms: int, members: list[str]) -> list[tuple[str, Any]]:
        if not members:
            return []
        call = self.call
        if call is None:
            if self.budget == 0 or now_ms < self.next_op_ms:
                return []
            self.budget -= 1
            self.call = call = self._new_call(now_ms)
            call.retry_at_ms = now_ms
        waiting = call.sent_ms and not call.retry_at_ms
        if waiting and now_ms - call.sent_ms > self.attempt_timeout_ms:
            return self._decide(now_ms, on_no_answer(self.settings, call.progress, now_ms), members)
        expired = on_deadline(self.settings, call.progress, now_ms)
        if expired is not None and not waiting:
            return self._decide(now_ms, expired, members)
        if call.retry_at_ms and now_ms >= call.retry_at_ms:
            return self._send(now_ms, members)
        return []

    def _new_call(self, now_ms: int) -> Call:
        self.counter += 1
        key = self.rng.choice(self.keys)
        pid = partition_id_of_serialized(key, self.partition_count)
        expected = None
        if self.rng.random() < 0.7:
            write = Write(f"{self.address}:{self.counter}".encode(), now_ms)
            kind = PUT
            if self.compare_and_set and self.rng.random() < 0.3:
                acked = [w for w in self.ledger.writes.get(key, []) if w.outcome == ACKED]
                if acked:
                    kind, expected = REPLACE_IF_SAME, acked[-1].value
            self.ledger.writes.setdefault(key, []).append(write)
        else:
            write = None
            kind = GET
        return Call(
            call_id=self.counter,
            key=key,
            kind=kind,
            partition_id=pid,
            write=write,
            map_name=self.map_of[key],
            progress=CallProgress(now_ms, write is not None),
            write_id=self.counter if write is not None else 0,
            expected=expected,
        )

    def _send(self, now_ms: int, members: list[str]) -> list[tuple[str, Any]]:
        call = self.call
        if call is None:
            raise InvariantViolation("a client sends only while it has a call")
        call.attempts += 1
        if call.attempts > self.MAX_ATTEMPTS:
            self._finish(now_ms, MAYBE if call.progress.maybe_applied else FAILED)
            return []
        target = self.owners[call.partition_id] or self.rng.choice(members)
        call.target = target
        call.sent_ms = now_ms
        if call.attempts == 1:
            call.first_sent_ms = now_ms
        call.retry_at_ms = 0
        self.counter += 1
        call.call_id = self.counter
        values = Column.of([call.write.value]) if call.write is not None else EMPTY_COLUMN
        # As the smart client does: the attempt may take effect until the client stops waiting for
        # it (its timeout, within the call's), less a margin; a member that gets it later refuses
        # it (EXPIRED), so a write given up on is never applied after the client moved on.
        deadline_ms = min(call.progress.deadline_ms(self.settings), now_ms + self.attempt_timeout_ms)
        deadline_ms -= DEADLINE_MARGIN_MS
        request = MapRequest(
            call_id=call.call_id,
            kind=call.kind,
            map_name=call.map_name,
            keys=Column.of([call.key]),
            values=values,
            sent_ms=now_ms,
            deadline_ms=max(1, deadline_ms - now_ms),
            client_id=self.address if call.write_id else "",
            write_id=call.write_id,
            previous=call.expected is not None,
            expected=Column.of([call.expected]) if call.expected is not None else EMPTY_COLUMN,
        )
        return [(target, request)]

    def connection_lost(self, now_ms: int, lost: set[str], members: list[str]) -> list[tuple[str, Any]]:
        """The connections to ``lost`` broke (a split): an attempt in flight to one of them gets no
        answer, and the call goes on as the policy says at once, as the smart client's does on
        ConnectionLost, while the attempt itself may still be on its way (a split may hold it)."""
        call = self.call
        if call is None or not call.sent_ms or call.retry_at_ms or call.target not in lost:
            return []
        return self._decide(now_ms, on_no_answer(self.settings, call.progress, now_ms), members)

    def on_message(self, now_ms: int, message: Any, members: list[str]) -> list[tuple[str, Any]]:
        if isinstance(message, TableReply):
            if message.partition_count != self.partition_count:
                return []
            for offset, row in enumerate(message.replicas):
                owner = row[0] if row else -1
                self.owners[message.first_partition + offset] = message.addresses[owner] if owner >= 0 else None
            for pid in message.unavailable:
                if 0 <= pid < self.partition_count:
                    self.owners[pid] = None  # its owner does not answer: any member says where it is served
            if message.more:
                next_part = TableRequest(message.first_partition + len(message.replicas))
                return [(self.rng.choice(members), next_part)]
            return []
        call = self.call
        if not isinstance(message, MapReply) or call is None or message.call_id != call.call_id:
            return []  # a late answer to a call already given up on
        status = ReplyCode(message.codes[0]) if len(message.codes) == 1 else ReplyCode.REJECTED  # makes no sense
        values = message.value_list()
        if status is ReplyCode.OK and call.write is None:
            value = values[0] if values else None
            self.ledger.check_read(call.key, value, call.first_sent_ms, now_ms, call.target or "?")
        if status is ReplyCode.OK and call.expected is not None:
            # The value the key held when the owner judged the compare-and-set: a read, checked
            # as one (before this write, which is not in the ledger's reach yet), and whether the
            # write was applied.
            held = values[0] if values else None
            call.swapped = held == call.expected
            self._check_held(call, held, now_ms)
        if status is ReplyCode.WRONG_OWNER:
            redirect = next((r for r in message.redirects if r.partition_id == call.partition_id), None)
            self.owners[call.partition_id] = redirect.owner_address if redirect is not None else None
        decision = on_answer(self.settings, call.progress, status, message.retry_after_ms, now_ms)
        return self._decide(now_ms, decision, members)

    def _decide(self, now_ms: int, decision: Decision, members: list[str]) -> list[tuple[str, Any]]:
        """Carry out what the call policy decided for the call in progress."""
        call = self.call
        if call is None:
            raise InvariantViolation("a client decides only for a call it has")
        verdict = decision.verdict
        if verdict is Verdict.RETRY:
            call.retry_at_ms = max(decision.at_ms, now_ms)
            call.sent_ms = 0
            if decision.refresh_table:
                self.owners[call.partition_id] = None
                return [(self.rng.choice(members), TableRequest())]
            return []
        if verdict is Verdict.DONE:
            self._finish(now_ms, ACKED)
        else:  # refused, timed out or indeterminate: applied only if the outcome is unknown
            self._finish(now_ms, MAYBE if decision.outcome_unknown else FAILED)
        return []

    def _check_held(self, call: Call, held: bytes | None, now_ms: int) -> None:
        """A compare-and-set's answer, checked as a read of the key just before the write: the
        write itself is set aside while the ledger looks (it is the key's latest)."""
        writes = self.ledger.writes[call.key]
        own = writes.pop()
        try:
            self.ledger.check_read(call.key, held, call.first_sent_ms, now_ms, call.target or "?")
        finally:
            writes.append(own)

    def _finish(self, now_ms: int, outcome: str) -> None:
        call = self.call
        if call is None:
            raise InvariantViolation("a client finishes only a call it has")
        if call.swapped is False and outcome == ACKED:
            outcome = FAILED  # answered: the key held another value, and nothing was written
            call.progress.maybe_applied = False
        if call.write is not None:
            call.write.outcome = MAYBE if (outcome == FAILED and call.progress.maybe_applied) else outcome
            call.write.finished_ms = now_ms
            self.ledger.settle(call.key, call.write)
        self.call = None
        self.completed_ops += 1
        self.next_op_ms = now_ms + self.THINK_MS
