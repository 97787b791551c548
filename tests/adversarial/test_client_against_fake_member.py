"""The client against a fake member (no cluster): bounds of a call's time."""

from __future__ import annotations

import itertools
import threading
import time

import msgspec
import pytest

from shardgrid.client import Client, ClientClosedError, OperationTimeoutError, PartitionUnavailableError
from shardgrid.core import messages as m
from shardgrid.core.hashing import partition_ids_of_serialized
from tests.wire import map_reply

from .fake_member import PARTITIONS, FakeMember


def test_a_call_ends_within_operation_call_timeout_when_the_member_is_silent():
    """``AsyncClient._attempt`` waits the full ``attempt_timeout_ms`` (10 s by default) whatever
    is left of the call's ``operation_call_timeout_ms``: a get with a 2 s call timeout against a
    member that does not answer (paused, SIGSTOP) raises OperationTimeoutError only after 10 s."""
    with FakeMember(lambda message: []) as member, Client([member.address], operation_call_timeout_ms=2_000) as client:
        started = time.monotonic()
        with pytest.raises(OperationTimeoutError):
            client.get_map("m").get("k")
        took = time.monotonic() - started
    assert took < 4, f"a call with operation_call_timeout_ms=2000 took {took:.1f} s"


def test_a_call_told_not_ready_ends_within_its_timeout_when_the_table_refresh_goes_unanswered():
    """Found by an outside tester: calls of 3 s on the minority side ended after 4 to 5 s. Told
    NOT_READY, the client asks for the table again; that refresh had its own time, not the call's
    (and each page the attempt timeout, 10 s by default)."""

    def not_ready(message):
        return [map_reply(call_id=message.call_id, codes=(m.ReplyCode.NOT_READY,), retry_after_ms=50)]

    with (
        FakeMember(not_ready, tables_answered=1) as member,
        Client([member.address], operation_call_timeout_ms=1_500) as client,
    ):
        started = time.monotonic()
        with pytest.raises(OperationTimeoutError):
            client.get_map("m").get("k")
        took = time.monotonic() - started
    assert took < 2.5, f"a call with operation_call_timeout_ms=1500 took {took:.1f} s"


def test_a_put_all_refused_unavailable_in_one_partition_says_how_many_keys_it_wrote():
    """Found by an outside tester: put_all raised PartitionUnavailableError ('nothing applied')
    while its keys in other partitions had been written."""
    refused_pid = []

    def one_partition_unavailable(message):
        pids = partition_ids_of_serialized(message.keys.items(), PARTITIONS)
        refused_pid[:] = refused_pid or [pids[0]]
        codes = tuple(m.ReplyCode.UNAVAILABLE if pid == refused_pid[0] else m.ReplyCode.OK for pid in pids)
        reason = f"partition {refused_pid[0]} is unavailable: every replica of it is on members that stopped answering"
        return [map_reply(call_id=message.call_id, codes=codes, reason=reason)]

    with FakeMember(one_partition_unavailable) as member, Client([member.address]) as client:
        data = client.get_map("m")
        keys = [f"k{i}" for i in range(40)]
        with pytest.raises(PartitionUnavailableError) as raised:
            data.put_all(dict.fromkeys(keys, 1))
    message = str(raised.value)
    unfinished = int(message.split("(", 1)[1].split(" unfinished", 1)[0])
    assert 0 < unfinished < len(keys)
    assert f"the other {len(keys) - unfinished} were done" in message
    assert not raised.value.outcome_unknown


def test_the_client_resets_a_connection_it_gives_up_on():
    """Found by an outside tester in network namespaces: the client closed a connection whose
    request a cut-off member never acknowledged gracefully, so the kernel kept retransmitting it and
    it was applied 12 to 53 s later, over newer writes. A reset drops it."""
    with FakeMember(lambda message: []) as member:
        with Client([member.address], operation_call_timeout_ms=500) as client, pytest.raises(OperationTimeoutError):
            client.get_map("m").put("k", 1)
        deadline = time.monotonic() + 5
        while not member.endings and time.monotonic() < deadline:
            time.sleep(0.02)
        assert member.endings == ["reset"]


def test_a_scan_of_a_partition_written_between_pages_ends_within_the_call_timeout():
    """``AsyncClient.scan_partition`` starts a partition over when the map's version changed
    between pages, with ``continue``, without asking the call policy: under steady writes to a
    partition with more than one page (over 8 MiB of values: a handful of 4 MiB values), ``values()``
    never returns and never times out."""
    versions = itertools.count(1)

    def behave(message):
        if type(message) is m.ScanRequest:
            # Every page says more follows, and the map changed since the page before.
            return [
                m.ScanReply(
                    call_id=message.call_id,
                    code=m.ReplyCode.OK,
                    keys=(b"\0\0\0\1a",),
                    values=(b"\x01",),
                    total=2,
                    more=True,
                    lineage="l",
                    map_version=next(versions),
                )
            ]
        return []

    with FakeMember(behave) as member, Client([member.address], operation_call_timeout_ms=1_000) as client:
        started = time.monotonic()
        future = client._run(_start_scan(client))  # the scan runs on the client's loop
        try:
            outcome = future.result(timeout=8)  # noqa: F841
        except TimeoutError:
            pytest.fail("scan_partition was still running 8 s into a call with operation_call_timeout_ms=1000")
        except OperationTimeoutError:
            assert time.monotonic() - started < 3


async def _start_scan(client):
    import asyncio
    import concurrent.futures

    task = asyncio.ensure_future(client.async_client.scan_partition("m", 0))
    result: concurrent.futures.Future = concurrent.futures.Future()

    def done(t):
        if t.cancelled():
            result.cancel()
        elif t.exception() is not None:
            result.set_exception(t.exception())
        else:
            result.set_result(t.result())

    task.add_done_callback(done)
    return result


@pytest.mark.parametrize("delay", ["0.2", "0.6", "1.2"])
def test_closing_the_client_while_another_thread_waits_raises_client_closed(delay):
    """A call in flight in one thread while another closes the Client: the waiting thread gets
    ``concurrent.futures.CancelledError`` (the loop is stopped under it), not the documented
    ``ClientClosedError``."""
    with FakeMember(lambda message: []) as member:
        client = Client([member.address], operation_call_timeout_ms=30_000, attempt_timeout_ms=500)
        errors: list[BaseException] = []

        def call():
            try:
                client.get_map("m").get("k")
            except BaseException as error:
                errors.append(error)

        worker = threading.Thread(target=call, daemon=True)
        worker.start()
        time.sleep(float(delay))  # the call is in flight, or between attempts
        client.close()
        worker.join(10)
        assert not worker.is_alive(), "the calling thread still waits after close()"
        assert errors, "the call ended without an error"
        assert isinstance(errors[0], ClientClosedError), f"got {errors!r}"


@pytest.mark.parametrize(
    "partition_ids",
    [[-1, 0], [0, 10**6], [0, True], [0, 2**70], [0, 1.0], [0, None], [0], [0, 1, 2]],
)
def test_given_partition_ids_the_members_would_refuse_are_refused_before_anything_is_sent(partition_ids):
    """Found by an outside tester: ids the codec or the members' decoder refuse (negative, too
    large, a bool) were sent, the member closed the connection, and the call retried until its
    timeout (120 s by default), some keys of other owners written meanwhile."""
    with FakeMember(lambda message: []) as member, Client([member.address], operation_call_timeout_ms=5_000) as client:
        started = time.monotonic()
        call = client.async_client.map_call(m.PUT, "m", [b"a", b"b"], [b"1", b"2"], partition_ids=partition_ids)
        with pytest.raises(ValueError, match="partition ids"):
            client._run(call).result(timeout=5)
        assert time.monotonic() - started < 2
        assert not [message for message in member.received if type(message) is m.MapRequest]


@pytest.mark.parametrize(
    ("packed_keys", "key_lengths", "packed_values", "value_lengths"),
    [
        (b"abc", b"\x02\x00\x00\x00", b"v", b"\x01\x00\x00\x00"),  # the keys' lengths add to 2, not 3
        (b"ab", b"\x02\x00\x00", b"v", b"\x01\x00\x00\x00"),  # 3 bytes of lengths: no whole number
        (b"ab", b"\x02\x00\x00\x00", b"", b""),  # a key and no value
    ],
)
def test_a_packed_scan_page_that_does_not_add_up_is_the_members_error(
    packed_keys, key_lengths, packed_values, value_lengths
):
    """A member's packed page is checked whole before a reader builds arrays over it: lengths that
    disagree with the bytes would make Arrow read past them."""
    from shardgrid.client import MemberProtocolError

    def behave(message):
        if type(message) is m.ScanRequest:
            page = m.ScanReply(call_id=message.call_id, code=m.ReplyCode.OK, total=1, lineage="l", map_version=1)
            fields = {"packed_keys": packed_keys, "key_lengths": key_lengths}
            fields |= {"packed_values": packed_values, "value_lengths": value_lengths}
            return [msgspec.structs.replace(page, **fields)]
        return []

    with (
        FakeMember(behave) as member,
        Client([member.address], operation_call_timeout_ms=2_000) as client,
        pytest.raises(MemberProtocolError, match=r"do not match|not a whole number"),
    ):
        client._run(client.async_client.scan_partition_packed("m", 0))
