"""A write takes effect before its deadline or not at all (found by an outside tester in network
namespaces: a write held up by the kernel during a partition reached its owner after the heal and
replaced a newer acknowledged write). The client stamps each attempt with how long it may still
take effect; an owner that gets it later refuses it whole, applying none of it."""

from __future__ import annotations

from shardgrid.core import messages as m
from shardgrid.core.call_policy import CallProgress, CallSettings, Verdict, on_answer
from shardgrid.core.inputs import Receive
from tests.core.test_map_replication import B_A_C, put
from tests.core.test_member import A, B, following, grant_lease, key_in, replies
from tests.wire import codes


def stamped(call_id: int, value: bytes, sent_ms: int, deadline_ms: int) -> m.MapRequest:
    request = put(call_id, "m", value=value)
    return m.MapRequest(
        call_id=request.call_id,
        kind=request.kind,
        map_name=request.map_name,
        keys=request.keys,
        values=request.values,
        sent_ms=sent_ms,
        deadline_ms=deadline_ms,
    )


def test_an_attempt_past_its_deadline_is_refused_whole_and_changes_nothing():
    owner, now = following(B, B_A_C)
    now = grant_lease(owner, now)
    late = stamped(1, b"late", sent_ms=now - 500, deadline_ms=400)
    (reply,) = replies(owner.handle(now, Receive("c", None, None, late, now - 500)))
    assert codes(reply) == (m.ReplyCode.EXPIRED,)
    assert "100 ms after its deadline" in reply.reason
    held = owner.data.view(0)
    assert held is None or key_in(0) not in held.maps.get("m", {})


def test_an_attempt_within_its_deadline_is_applied():
    owner, now = following(B, B_A_C)
    now = grant_lease(owner, now)
    timely = stamped(1, b"timely", sent_ms=now - 300, deadline_ms=400)
    owner.handle(now, Receive("c", None, None, timely, now - 300))
    assert owner.data.view(0).maps["m"][key_in(0)] == b"timely"
    (reply,) = replies(owner.handle(now + 1, Receive(A.address, A, B.uuid, m.BackupAckBatch(((0, 1),)))))
    assert codes(reply) == (m.ReplyCode.OK,)


def test_no_deadline_or_no_known_sending_time_is_served_as_before():
    owner, now = following(B, B_A_C)
    now = grant_lease(owner, now)
    owner.handle(now, Receive("c", None, None, stamped(1, b"v", sent_ms=0, deadline_ms=0), now - 10_000))
    assert owner.data.view(0).maps["m"][key_in(0)] == b"v"


def test_a_client_ends_a_call_whose_attempt_expired_as_timed_out():
    settings = CallSettings(operation_call_timeout_ms=1_000)
    fresh = CallProgress(started_ms=0, mutating=True)
    decision = on_answer(settings, fresh, m.ReplyCode.EXPIRED, 0, 1_000)
    assert (decision.verdict, decision.outcome_unknown) == (Verdict.TIMED_OUT, False)
    earlier_unanswered = CallProgress(started_ms=0, mutating=True, maybe_applied=True)
    decision = on_answer(settings, earlier_unanswered, m.ReplyCode.EXPIRED, 0, 1_000)
    assert (decision.verdict, decision.outcome_unknown) == (Verdict.TIMED_OUT, True)
