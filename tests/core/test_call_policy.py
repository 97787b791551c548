"""Seed 001's call semantics as pure decisions: timeouts, indeterminate writes, retries."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardgrid.core.call_policy import (
    CallProgress,
    CallSettings,
    Verdict,
    on_answer,
    on_deadline,
    on_no_answer,
)
from shardgrid.core.errors import ConfigError
from shardgrid.core.messages import RETRYABLE, ReplyCode

AT_LEAST_ONCE = CallSettings(operation_call_timeout_ms=10_000)
FAIL_FAST = CallSettings(operation_call_timeout_ms=10_000, fail_on_indeterminate_operation_state=True)


def test_the_defaults_are_seed_001s() -> None:
    settings = CallSettings()
    assert settings.operation_call_timeout_ms == 120_000
    assert not settings.fail_on_indeterminate_operation_state


def test_an_indeterminate_write_fails_at_once_only_when_asked_to() -> None:
    write = CallProgress(0, mutating=True)
    decision = on_answer(FAIL_FAST, write, ReplyCode.INDETERMINATE, 0, 100)
    assert (decision.verdict, decision.outcome_unknown) == (Verdict.INDETERMINATE, True)
    write = CallProgress(0, mutating=True)
    decision = on_answer(AT_LEAST_ONCE, write, ReplyCode.INDETERMINATE, 0, 100)
    assert decision.verdict is Verdict.RETRY
    assert decision.refresh_table  # the owner may have changed
    assert write.maybe_applied


def test_a_write_nobody_answered_may_have_been_applied_a_read_is_just_sent_again() -> None:
    write = CallProgress(0, mutating=True)
    assert on_no_answer(FAIL_FAST, write, 2_000).verdict is Verdict.INDETERMINATE
    read = CallProgress(0, mutating=False)
    decision = on_no_answer(FAIL_FAST, read, 2_000)
    assert decision.verdict is Verdict.RETRY
    assert not read.maybe_applied


def test_retries_wait_what_the_member_asks_within_bounds_and_a_wrong_owner_goes_at_once() -> None:
    call = CallProgress(0, mutating=True)
    assert on_answer(AT_LEAST_ONCE, call, ReplyCode.MIGRATING, 300, 1_000).at_ms == 1_300
    assert on_answer(AT_LEAST_ONCE, call, ReplyCode.MIGRATING, 0, 1_000).at_ms == 1_050
    assert on_answer(AT_LEAST_ONCE, call, ReplyCode.OVERLOADED, 60_000, 1_000).at_ms == 2_000
    assert on_answer(AT_LEAST_ONCE, call, ReplyCode.WRONG_OWNER, 0, 1_000).at_ms == 1_000
    assert on_answer(AT_LEAST_ONCE, call, ReplyCode.SHUTTING_DOWN, 0, 1_000).refresh_table
    assert on_answer(AT_LEAST_ONCE, call, ReplyCode.NOT_READY, 0, 1_000).refresh_table  # it may be cut off
    assert not on_answer(AT_LEAST_ONCE, call, ReplyCode.MIGRATING, 0, 1_000).refresh_table


def test_a_call_times_out_as_a_whole_saying_whether_its_outcome_is_unknown() -> None:
    refused_only = CallProgress(0, mutating=True)
    decision = on_answer(AT_LEAST_ONCE, refused_only, ReplyCode.MIGRATING, 500, 9_800)
    assert (decision.verdict, decision.outcome_unknown) == (Verdict.TIMED_OUT, False)  # never applied
    uncertain = CallProgress(0, mutating=True)
    on_no_answer(AT_LEAST_ONCE, uncertain, 2_000)
    decision = on_deadline(AT_LEAST_ONCE, uncertain, 10_000)
    assert decision is not None
    assert (decision.verdict, decision.outcome_unknown) == (Verdict.TIMED_OUT, True)
    assert on_deadline(AT_LEAST_ONCE, uncertain, 9_999) is None
    # An attempt still unanswered at the deadline may yet be applied.
    pending = on_deadline(AT_LEAST_ONCE, CallProgress(0, mutating=True), 10_000, in_flight=True)
    assert pending is not None
    assert pending.outcome_unknown
    read = on_deadline(AT_LEAST_ONCE, CallProgress(0, mutating=False), 10_000, in_flight=True)
    assert read is not None
    assert not read.outcome_unknown


def test_a_rejected_write_is_not_applied_unless_an_earlier_attempt_may_have_been() -> None:
    assert not on_answer(AT_LEAST_ONCE, CallProgress(0, True), ReplyCode.REJECTED, 0, 1).outcome_unknown
    earlier = CallProgress(0, True)
    on_no_answer(AT_LEAST_ONCE, earlier, 2_000)
    assert on_answer(AT_LEAST_ONCE, earlier, ReplyCode.REJECTED, 0, 2_100).outcome_unknown


def test_a_write_told_to_wait_for_its_backups_may_have_been_applied_whatever_ends_it() -> None:
    """SETTLING says an earlier attempt was applied: a refusal, a timeout or an unavailable
    partition after it leaves the write's outcome unknown, never 'not applied'."""
    for ending in (ReplyCode.REJECTED, ReplyCode.UNAVAILABLE, ReplyCode.EXPIRED, ReplyCode.MEMORY_FULL):
        call = CallProgress(0, mutating=True)
        settling = on_answer(AT_LEAST_ONCE, call, ReplyCode.SETTLING, 10, 5)
        assert settling.verdict is Verdict.RETRY
        assert on_answer(AT_LEAST_ONCE, call, ending, 0, 20).outcome_unknown, ending


@pytest.mark.parametrize(
    "settings",
    [CallSettings(operation_call_timeout_ms=0), CallSettings(min_retry_backoff_ms=0), CallSettings(50, False, 100, 10)],
)
def test_settings_out_of_bounds_are_refused(settings: CallSettings) -> None:
    with pytest.raises(ConfigError):
        settings.validate()


@given(
    st.lists(st.sampled_from([*ReplyCode, None]), min_size=1, max_size=300),
    st.booleans(),
    st.booleans(),
    st.integers(0, 5_000),
)
def test_every_call_ends_by_its_deadline_and_a_read_never_ends_unknown(
    answers: list[ReplyCode | None], mutating: bool, fail_fast: bool, retry_after_ms: int
) -> None:
    settings = FAIL_FAST if fail_fast else AT_LEAST_ONCE
    call = CallProgress(0, mutating)
    now = 0
    for answer in answers:
        now += 10
        decision = (
            on_no_answer(settings, call, now)
            if answer is None
            else on_answer(settings, call, answer, retry_after_ms, now)
        )
        if decision.verdict is not Verdict.RETRY:
            assert decision.outcome_unknown <= mutating
            return
        assert decision.at_ms < call.deadline_ms(settings)  # no retry is ever planned past the deadline
        assert answer in (*RETRYABLE, ReplyCode.WRONG_OWNER, ReplyCode.INDETERMINATE, None)
        now = decision.at_ms
