"""Conditional writes on the owner: replace, replace_if_same, remove_if_same, each atomic per key
(the owner handles one event at a time) and replicated as the plain PUT or REMOVE of the keys it
wrote; a retry gets the first answer; and entry views, which count no read."""

from __future__ import annotations

from dataclasses import replace

from shardgrid.client.entry_view import entry_view_of
from shardgrid.core import messages as m
from shardgrid.core.inputs import Receive
from shardgrid.core.limits import MAX_VALUE_BYTES
from shardgrid.core.table import PartitionTable
from tests.core.test_expiry import keys_in_0
from tests.core.test_member import CONFIG, A, B, following, grant_lease, replies, sent
from tests.wire import codes, map_request, run_keys, run_values, values

B_A = PartitionTable.from_lists([[B, A]] * 4, [1, 1, 1, 1])
B_ALONE = PartitionTable.from_lists([[B]] * 4, [1, 1, 1, 1])
ALONE = replace(CONFIG, backup_count=0)
K, L = keys_in_0(2)


def call(
    call_id: int,
    kind: m.OpKind,
    keys: list[bytes],
    values: list[bytes] = (),  # type: ignore[assignment]
    expected: list[bytes] = (),  # type: ignore[assignment]
    write_id: int = 0,
) -> m.MapRequest:
    return map_request(
        call_id=call_id,
        kind=kind,
        map_name="m",
        keys=tuple(keys),
        values=tuple(values),
        expected=tuple(expected),
        previous=True,
        client_id="c" if write_id else "",
        write_id=write_id,
    )


def owner_alone() -> tuple[object, int]:
    owner, now = following(B, B_ALONE, config=ALONE)
    return owner, grant_lease(owner, now)


def ask(owner, now: int, request: m.MapRequest) -> m.MapReply:
    (reply,) = replies(owner.handle(now, Receive("c", None, None, request)))
    return reply


def held(owner) -> dict[bytes, bytes]:
    view = owner.data.view(0)
    return view.maps.get("m", {}) if view is not None else {}


def test_replace_writes_only_a_key_that_has_a_value() -> None:
    owner, now = owner_alone()
    assert values(ask(owner, now, call(1, m.REPLACE, [K], [b"x"]))) == (None,)
    assert held(owner) == {}
    ask(owner, now + 1, call(2, m.PUT, [K], [b"1"]))
    reply = ask(owner, now + 2, call(3, m.REPLACE, [K, L], [b"2", b"y"]))
    assert codes(reply) == (m.ReplyCode.OK, m.ReplyCode.OK)
    assert values(reply) == (b"1", None)
    assert held(owner) == {K: b"2"}


def test_replace_if_same_is_a_compare_and_set_judged_key_by_key_in_order() -> None:
    owner, now = owner_alone()
    ask(owner, now, call(1, m.PUT, [K], [b"1"]))
    missed = ask(owner, now + 1, call(2, m.REPLACE_IF_SAME, [K], [b"2"], expected=[b"0"]))
    assert values(missed) == (b"1",)  # not what was expected: nothing written
    assert held(owner) == {K: b"1"}
    # Twice in one request: the second is judged on what the first left.
    both = ask(owner, now + 2, call(3, m.REPLACE_IF_SAME, [K, K], [b"2", b"3"], expected=[b"1", b"2"]))
    assert values(both) == (b"1", b"2")
    assert held(owner) == {K: b"3"}
    absent = ask(owner, now + 3, call(4, m.REPLACE_IF_SAME, [L], [b"2"], expected=[b""]))
    assert values(absent) == (None,)
    assert held(owner) == {K: b"3"}


def test_remove_if_same_removes_only_that_value_and_the_backup_gets_a_plain_remove() -> None:
    owner, now = following(B, B_A)
    now = grant_lease(owner, now)
    owner.handle(now, Receive("c", None, None, call(1, m.PUT, [K], [b"1"])))
    effects = owner.handle(now + 1, Receive("c", None, None, call(2, m.REMOVE_IF_SAME, [K], [b"0"])))
    assert not sent(effects, m.BackupBatch)  # not the value held: nothing written, nothing sent
    effects = owner.handle(now + 2, Receive("c", None, None, call(3, m.REMOVE_IF_SAME, [K], [b"1"])))
    (batch,) = sent(effects, m.BackupBatch)
    (run,) = batch.runs
    assert (run.kind, run_keys(run), run_values(run)) == (m.REMOVE, (K,), ())
    assert held(owner) == {}


def test_a_retried_conditional_write_gets_its_first_answer() -> None:
    owner, now = owner_alone()
    ask(owner, now, call(1, m.PUT, [K], [b"1"]))
    first = ask(owner, now + 1, call(2, m.REPLACE_IF_SAME, [K], [b"2"], expected=[b"1"], write_id=7))
    again = ask(owner, now + 2, call(3, m.REPLACE_IF_SAME, [K], [b"2"], expected=[b"1"], write_id=7))
    assert values(first) == values(again) == (b"1",)  # the client reads "replaced" both times
    assert held(owner) == {K: b"2"}


def test_an_entry_view_carries_the_metadata_and_counts_no_read() -> None:
    owner, now = owner_alone()
    ask(owner, now, call(1, m.PUT, [K], [b"1"]))
    ask(owner, now + 5, call(2, m.PUT, [K], [b"2"]))
    ask(owner, now + 6, call(3, m.GET, [K, K]))
    (view_data, absent) = values(ask(owner, now + 7, call(4, m.ENTRY_VIEW, [K, L])))
    assert absent is None
    view = entry_view_of(view_data, bytes)
    assert view.value == b"2"
    assert (view.created_ms, view.updated_ms, view.accessed_ms, view.expire_at_ms) == (now, now + 5, now + 6, 0)
    assert (view.hits, view.version) == (2, 2)
    again = entry_view_of(values(ask(owner, now + 8, call(5, m.ENTRY_VIEW, [K])))[0], bytes)
    assert (again.hits, again.accessed_ms) == (2, now + 6)


def test_an_entry_view_of_the_largest_value_is_answered() -> None:
    # A view is its value and 48 bytes of metadata, so it is larger than any value the member
    # holds: putting the reply together once refused it (and the member's handle raised).
    owner, now = owner_alone()
    largest = b"x" * MAX_VALUE_BYTES
    assert codes(ask(owner, now, call(1, m.PUT, [K], [largest]))) == (m.ReplyCode.OK,)
    reply = ask(owner, now + 1, call(2, m.ENTRY_VIEW, [K]))
    assert codes(reply) == (m.ReplyCode.OK,)
    assert entry_view_of(values(reply)[0], bytes).value == largest


def test_conditional_requests_that_break_the_rules_are_refused_whole() -> None:
    owner, now = owner_alone()
    for request in (
        call(1, m.REPLACE_IF_SAME, [K], [b"2"]),  # no expected value
        call(2, m.REPLACE, [K], [b"2"], expected=[b"1"]),  # an expected value where none goes
        call(3, m.REMOVE_IF_SAME, [K]),  # no value to compare
        call(4, m.ENTRY_VIEW, [K], [b"1"]),  # a read with values
    ):
        reply = ask(owner, now, request)
        assert codes(reply) == (m.ReplyCode.REJECTED,), request
    assert held(owner) == {}
