"""``put_encoded``: columns already packed go out as they are when one owner holds them, and
every key a first answer leaves unfinished (migrating, moved, over the limits) goes on as a put's,
through the same retries; columns that do not hold together are refused before anything is
sent."""

from __future__ import annotations

import asyncio
import struct

import pytest

from shardgrid.client import Client
from shardgrid.client.encoded_columns import EncodedColumns
from shardgrid.client.errors import OperationRejectedError
from shardgrid.core import messages as m
from shardgrid.core.hashing import partition_id_of_serialized, partition_ids_of_serialized
from shardgrid.core.limits import MAX_KEY_BYTES
from tests.adversarial.fake_member import PARTITIONS, FakeMember
from tests.wire import map_reply, run_keys

KEYS = [b"\0\0\0\4key%d" % i for i in range(40)]
VALUES = [b"value %d" % i for i in range(40)]


def _encoded(keys: list[bytes], values: list[bytes], with_pids: bool = True) -> EncodedColumns:
    pids = [partition_id_of_serialized(key, PARTITIONS) for key in keys]  # keys past the limit too
    return EncodedColumns(
        keys=m.Column(b"".join(keys), struct.pack(f"<{len(keys)}I", *map(len, keys))),
        values=m.Column.of(values),
        partitions=tuple(sorted(set(pids))) if with_pids else (),
    )


def _storing(stored: dict[bytes, bytes], refuse_first: set[bytes] | None = None):
    """A member that stores what it is sent; ``refuse_first``: keys answered MIGRATING once."""
    refused = set(refuse_first or ())

    def behave(message):
        if type(message) is not m.MapRequest:
            return []
        codes = []
        for key, value in zip(message.keys.items(), message.values.items(), strict=True):
            if key in refused:
                refused.discard(key)
                codes.append(m.ReplyCode.MIGRATING)
                continue
            stored[key] = value
            codes.append(m.ReplyCode.OK)
        return [map_reply(call_id=message.call_id, codes=tuple(codes), retry_after_ms=1)]

    return behave


def _put(client: Client, columns: EncodedColumns, kind: m.OpKind = m.PUT) -> None:
    client._run(client.async_client.put_encoded(kind, "m", columns))


def test_columns_of_one_owner_go_as_one_request_as_they_are():
    stored: dict[bytes, bytes] = {}
    with FakeMember(_storing(stored)) as member, Client([member.address]) as client:
        _put(client, _encoded(KEYS, VALUES))
        requests = [r for r in member.received if type(r) is m.MapRequest]
    assert stored == dict(zip(KEYS, VALUES, strict=True))
    assert len(requests) == 1
    assert requests[0].keys.items() == KEYS


def test_keys_answered_migrating_go_again_alone():
    stored: dict[bytes, bytes] = {}
    with FakeMember(_storing(stored, {KEYS[3], KEYS[17]})) as member, Client([member.address]) as client:
        _put(client, _encoded(KEYS, VALUES))
        requests = [r for r in member.received if type(r) is m.MapRequest]
    assert stored == dict(zip(KEYS, VALUES, strict=True))
    assert [len(run_keys(r)) for r in requests] == [40, 2]
    assert set(run_keys(requests[1])) == {KEYS[3], KEYS[17]}


def test_a_moved_partition_follows_its_redirect():
    stored: dict[bytes, bytes] = {}
    holder: dict[str, str] = {}

    def moved(message):
        if type(message) is not m.MapRequest:
            return []
        pids = sorted(set(partition_ids_of_serialized(message.keys.items(), PARTITIONS)))
        redirects = tuple(m.PartitionRedirect(pid, 5, holder["b"]) for pid in pids)
        return [
            map_reply(
                call_id=message.call_id, codes=(m.ReplyCode.WRONG_OWNER,) * len(message.keys), redirects=redirects
            )
        ]

    with FakeMember(moved) as a, FakeMember(_storing(stored)) as b:
        holder["b"] = b.address
        with Client([a.address]) as client:
            _put(client, _encoded(KEYS, VALUES))
    assert stored == dict(zip(KEYS, VALUES, strict=True))


def test_columns_over_owners_or_without_their_partitions_are_put_key_by_key():
    stored: dict[bytes, bytes] = {}
    with FakeMember(_storing(stored)) as a, FakeMember(_storing(stored)) as b:
        with Client([a.address]) as client:
            client._run(client.async_client.refresh_table())
            owners = client.async_client.table.owners
            for index, pid in enumerate(partition_ids_of_serialized(KEYS, PARTITIONS)):
                owners[pid] = a.address if index % 2 else b.address
            _put(client, _encoded(KEYS, VALUES))
            _put(client, _encoded([b"other"], [b"1"], with_pids=False))
        to_a = [r for r in a.received if type(r) is m.MapRequest]
        to_b = [r for r in b.received if type(r) is m.MapRequest]
    assert stored == dict(zip([*KEYS, b"other"], [*VALUES, b"1"], strict=True))
    assert to_a  # split between the owners the table names
    assert to_b


def test_columns_that_do_not_hold_together_are_refused_before_sending():
    with FakeMember(_storing({})) as member, Client([member.address]) as client:
        good = _encoded(KEYS, VALUES)
        short = EncodedColumns(**{**_fields(good), "values": m.Column.of(VALUES[:39])})
        with pytest.raises(ValueError, match="hold 40 keys and 39 values"):
            _put(client, short)
        cut = EncodedColumns(**{**_fields(good), "values": m.Column(good.values.data[:-1], good.values.lengths)})
        with pytest.raises(ValueError, match="do not hold together"):
            _put(client, cut)
        with pytest.raises(ValueError, match="not a put"):
            _put(client, good, m.GET)
        too_long = _encoded([b"k" * (MAX_KEY_BYTES + 1)], [b"v"])
        with pytest.raises(OperationRejectedError, match="a key is at most"):
            _put(client, too_long)
        with pytest.raises(ValueError, match="a map name is 1 to"):
            client._run(client.async_client.put_encoded(m.PUT, "", good))
        with pytest.raises(ValueError, match="TTL column holds 8 bytes"):
            _put(client, EncodedColumns(**{**_fields(good), "ttls_ms": bytes(8)}))
        assert not [r for r in member.received if type(r) is m.MapRequest]


def _fields(columns: EncodedColumns) -> dict[str, object]:
    return {name: getattr(columns, name) for name in EncodedColumns.__slots__}


def test_columns_a_member_would_refuse_never_leave():
    """Found by an outside tester: such columns went out as they were, the member refused them (or
    closed the connection at the bad frame), and a put in flight on it lost its answer (failing as
    indeterminate under fail_on_indeterminate_operation_state). Now they fail before sending."""
    good = _encoded(KEYS, VALUES)
    hostile = {
        "lengths past the data": EncodedColumns(
            **{**_fields(good), "keys": m.Column(good.keys.data, good.keys.lengths[:-4] + struct.pack("<I", 10**6))}
        ),
        "a trailing byte": EncodedColumns(
            **{**_fields(good), "keys": m.Column(good.keys.data + b"x", good.keys.lengths)}
        ),
        "lengths cut short": EncodedColumns(
            **{**_fields(good), "values": m.Column(good.values.data, good.values.lengths[:-3])}
        ),
    }
    stored: dict[bytes, bytes] = {}
    with FakeMember(_storing(stored)) as member:
        with Client(
            [member.address], operation_call_timeout_ms=60_000, fail_on_indeterminate_operation_state=True
        ) as client:
            aio = client.async_client

            async def hostile_beside_a_put(columns: EncodedColumns) -> None:
                innocent = asyncio.ensure_future(aio.map_call(m.PUT, "other", KEYS[:10], VALUES[:10]))
                await asyncio.sleep(0)
                with pytest.raises(ValueError, match=r"do not hold together"):
                    await aio.put_encoded(m.PUT, "m", columns)
                await innocent

            for columns in hostile.values():
                client._run(hostile_beside_a_put(columns))
        requests = [r for r in member.received if type(r) is m.MapRequest]
    assert all(r.map_name == "other" for r in requests)
    assert stored == dict(zip(KEYS[:10], VALUES[:10], strict=True))
