"""Found by an outside tester: answers no member writes were believed. A reply with a code short
(or one too many) for its keys made a put_all report every key written and a get_all report keys
absent; an OK read without its values read as None; and a split answer's parts were joined in
first_index order without checking that they covered the keys end to end (a gap shifted every
later value onto another key). Each is now the member's error: the call is refused, nothing in
it reported done."""

from __future__ import annotations

import pytest

from shardgrid.client import Client, OperationRejectedError
from shardgrid.client import connection as connection_module
from shardgrid.core import messages as m
from tests.wire import map_reply

from .fake_member import FakeMember

OK = m.ReplyCode.OK


def _short(message: m.MapRequest) -> list[m.MapReply]:
    return [map_reply(call_id=message.call_id, codes=(OK,) * (len(message.keys) - 1))]


def _long(message: m.MapRequest) -> list[m.MapReply]:
    return [map_reply(call_id=message.call_id, codes=(OK,) * (len(message.keys) + 1))]


def _no_values(message: m.MapRequest) -> list[m.MapReply]:
    return [map_reply(call_id=message.call_id, codes=(OK,) * len(message.keys))]


def _parts(message: m.MapRequest, firsts: tuple[int, ...]) -> list[m.MapReply]:
    """The answer to three keys in parts starting at ``firsts`` (a key each, the last the rest)."""
    count = len(message.keys)
    parts = []
    for number, first in enumerate(firsts):
        last = number == len(firsts) - 1
        size = count - number if last else 1
        values = tuple(b"value %d" % (first + i) for i in range(size))
        parts.append(
            map_reply(call_id=message.call_id, codes=(OK,) * size, values=values, first_index=first, more=not last)
        )
    return parts


CASES = {
    "a code short": (_short, "2 codes for 3 keys"),
    "a code too many": (_long, "4 codes for 3 keys"),
    "OK without values": (_no_values, "answered OK without their values"),
    "a part that leaves a gap": (lambda message: _parts(message, (0, 2)), "do not fit together"),
    "parts that overlap": (lambda message: _parts(message, (0, 0)), "do not fit together"),
    "one part not from the first key": (lambda message: _parts(message, (1,)), "do not fit together"),
}
KEYS = [b"a", b"b", b"c"]  # the fake member owns every partition: one request, one answer
CALLS = {  # (kind, values, previous values asked for)
    "get": (m.GET, None, False),
    "put": (m.PUT, [b"v"] * 3, False),
    "put, previous values": (m.PUT, [b"v"] * 3, True),
    "remove": (m.REMOVE, None, False),
}


def _call(behave, call: str) -> list[bytes | None]:
    kind, values, previous = CALLS[call]

    def answer(message):
        return behave(message) if type(message) is m.MapRequest else []

    with FakeMember(answer) as member, Client([member.address], operation_call_timeout_ms=2_000) as client:
        return client._run(client.async_client.map_call(kind, "m", KEYS, values, previous=previous))


@pytest.mark.parametrize("call", list(CALLS))
@pytest.mark.parametrize("case", list(CASES))
def test_an_answer_no_member_writes_refuses_the_call(case: str, call: str) -> None:
    behave, said = CASES[case]
    if case == "OK without values" and not (CALLS[call][0] in m.READS or CALLS[call][2]):
        # A write asks for no values: all OK without them is the answer a member writes.
        assert _call(behave, call) == [None, None, None]
        return
    with pytest.raises(OperationRejectedError, match=said):
        _call(behave, call)


def test_an_answer_split_into_more_parts_than_keys_is_refused_before_it_is_joined(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Parts held for a call are bounded: a member splits its answer at most once per key."""
    monkeypatch.setattr(connection_module, "MAX_OPERATIONS_PER_REQUEST", 5)

    def endless(message: m.MapRequest) -> list[m.MapReply]:
        return [
            map_reply(call_id=message.call_id, codes=(OK,), values=(b"v",), first_index=index, more=True)
            for index in range(50)
        ]

    with pytest.raises(OperationRejectedError, match="6 parts and more to come"):
        _call(endless, "get")
