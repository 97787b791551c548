"""What a client does with each answer to a map call, as pure functions (seed 001's call semantics).

The smart client and the simulator's clients both ask these functions, so the retry rules are
written once and tested without a network:

- ``operation_call_timeout_ms`` (default 120,000) bounds a whole call, every retry included; past
  it the call ends with OperationTimeoutError, which says whether the outcome is unknown (a write
  some attempt of which may have been applied).
- ``fail_on_indeterminate_operation_state`` (default off): on, a write ends with
  IndeterminateOperationStateError as soon as an attempt may have been applied without being
  confirmed (an INDETERMINATE answer, or no answer at all: the owner may have left before
  replying); off, the write is sent again (to the new owner) until it is confirmed or the call
  times out: at-least-once. Reads are always retried: they change nothing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from shardgrid.core.errors import require
from shardgrid.core.messages import RETRYABLE, ReplyCode


@dataclass(frozen=True, slots=True)
class CallSettings:
    operation_call_timeout_ms: int = 120_000
    fail_on_indeterminate_operation_state: bool = False
    min_retry_backoff_ms: int = 50  # never retry sooner than this, whatever a member suggests
    max_retry_backoff_ms: int = 1_000  # nor later (a member's retry hint is capped here)

    def validate(self) -> None:
        require(self.operation_call_timeout_ms > 0, "operation_call_timeout_ms must be positive")
        require(
            0 < self.min_retry_backoff_ms <= self.max_retry_backoff_ms,
            "retry backoffs must be positive, the minimum no larger than the maximum",
        )


class Verdict(enum.Enum):
    DONE = "done"  # answered OK
    RETRY = "retry"  # send the call again at ``at_ms``
    REJECTED = "rejected"  # refused whole; not applied, and retrying will not help
    TIMED_OUT = "timed-out"  # OperationTimeoutError
    INDETERMINATE = "indeterminate"  # IndeterminateOperationStateError
    UNAVAILABLE = "unavailable"  # PartitionUnavailableError: not applied by this attempt
    MEMORY_FULL = "memory-full"  # MemoryFullError: the owner is at max_memory_bytes; not applied by this attempt
    DISK_FULL = "disk-full"  # DiskFullError: the owner's disk is short of room; not applied by this attempt


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    at_ms: int = 0  # when to send again (RETRY)
    refresh_table: bool = False  # ask for the partition table before sending again
    outcome_unknown: bool = False  # a write that may or may not have been applied (TIMED_OUT, INDETERMINATE)


@dataclass(slots=True)
class CallProgress:
    """One call, across its attempts; the caller keeps it and passes it in."""

    started_ms: int
    mutating: bool
    maybe_applied: bool = False  # some attempt of this write may have been applied

    def deadline_ms(self, settings: CallSettings) -> int:
        return self.started_ms + settings.operation_call_timeout_ms


def on_answer(
    settings: CallSettings, call: CallProgress, status: ReplyCode, retry_after_ms: int, now_ms: int
) -> Decision:
    """A member answered an attempt with ``status``."""
    if status is ReplyCode.OK:
        return Decision(Verdict.DONE)
    if status is ReplyCode.REJECTED:
        # Refused whole by the member that answered; an earlier attempt may still have been applied.
        return Decision(Verdict.REJECTED, outcome_unknown=call.mutating and call.maybe_applied)
    if status is ReplyCode.INDETERMINATE:
        return _after_uncertain_attempt(settings, call, now_ms)
    if status is ReplyCode.UNAVAILABLE:
        # Every replica of the partition is on members that stopped answering: said at once, as
        # Redis Cluster does for a slot it cannot serve, rather than after the call's whole time.
        return Decision(Verdict.UNAVAILABLE, outcome_unknown=call.mutating and call.maybe_applied)
    if status is ReplyCode.MEMORY_FULL:
        # The owner holds its max_memory_bytes of records: said at once, as Redis answers OOM at
        # maxmemory; it takes writes again once data is removed or expires, or members join.
        return Decision(Verdict.MEMORY_FULL, outcome_unknown=call.mutating and call.maybe_applied)
    if status is ReplyCode.DISK_FULL:
        # The owner's data directory is short of the room it keeps: said at once, as for memory;
        # it takes writes again once its disk has room.
        return Decision(Verdict.DISK_FULL, outcome_unknown=call.mutating and call.maybe_applied)
    if status is ReplyCode.EXPIRED:
        # This attempt came after the call's deadline and was not applied; an earlier one may have
        # been. Its time is up: sending again would only be refused the same way.
        return Decision(Verdict.TIMED_OUT, outcome_unknown=call.mutating and call.maybe_applied)
    if status is ReplyCode.WRONG_OWNER:
        return _retry(settings, call, now_ms, now_ms, refresh_table=False)  # to the owner the answer names
    if status is ReplyCode.SETTLING:
        # An earlier attempt was applied (it waits for its backups): whatever ends the call now, the
        # write may be there (found by an outside tester: a retry then refused by a cluster gone
        # PASSIVE ended the call as never applied, and the write was read later).
        call.maybe_applied = call.maybe_applied or call.mutating
    if status in RETRYABLE:
        backoff = min(max(retry_after_ms, settings.min_retry_backoff_ms), settings.max_retry_backoff_ms)
        # A member not ready may be an owner cut off from the leader, whose partitions the others
        # have given to another member since: the client, which may still reach it, asks for the
        # table again rather than wait on it for the call's whole time (found by the simulator's
        # search of splits with a cache map: a client that reached both sides was told NOT_READY
        # by the cut-off owner for 25 s, until the split healed).
        refresh = status in (ReplyCode.SHUTTING_DOWN, ReplyCode.NOT_READY)
        return _retry(settings, call, now_ms, now_ms + backoff, refresh_table=refresh)
    return Decision(Verdict.REJECTED, outcome_unknown=call.mutating and call.maybe_applied)


def on_no_answer(settings: CallSettings, call: CallProgress, now_ms: int) -> Decision:
    """An attempt got no answer in time, or its connection was lost: the member may have applied
    it (and died, or been cut off) before answering."""
    return _after_uncertain_attempt(settings, call, now_ms)


def on_not_sent(settings: CallSettings, call: CallProgress, now_ms: int) -> Decision:
    """An attempt could not be sent (no connection to any member that could take it): nothing of
    it was applied, so it changes nothing of what is known; it is tried again after a table
    refresh, within the call's time."""
    return _retry(settings, call, now_ms, now_ms + settings.min_retry_backoff_ms, refresh_table=True)


def on_deadline(settings: CallSettings, call: CallProgress, now_ms: int, in_flight: bool = False) -> Decision | None:
    """The call's own clock: a TIMED_OUT decision once it ran out of time, else None. With an
    attempt still ``in_flight`` (sent, not answered), a write's outcome is unknown."""
    if now_ms >= call.deadline_ms(settings):
        unknown = call.mutating and (call.maybe_applied or in_flight)
        return Decision(Verdict.TIMED_OUT, outcome_unknown=unknown)
    return None


def _after_uncertain_attempt(settings: CallSettings, call: CallProgress, now_ms: int) -> Decision:
    if call.mutating:
        call.maybe_applied = True
        if settings.fail_on_indeterminate_operation_state:
            return Decision(Verdict.INDETERMINATE, outcome_unknown=True)
    # Sent again, after a table refresh: the owner may have changed (at-least-once for a write).
    return _retry(settings, call, now_ms, now_ms + settings.min_retry_backoff_ms, refresh_table=True)


def _retry(settings: CallSettings, call: CallProgress, now_ms: int, at_ms: int, refresh_table: bool) -> Decision:
    timed_out = on_deadline(settings, call, max(now_ms, at_ms))
    if timed_out is not None:
        return timed_out
    return Decision(Verdict.RETRY, at_ms, refresh_table)
