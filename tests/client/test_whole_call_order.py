"""Found by an outside tester: the client's shortcut for a request that carries its whole call
(``len(batch) == len(keys)``) sent the keys in call order, but a retry round's indexes came in the
order the first round's answers did (one owner's keys, then another's). When every key of a call
was retried and the retry went whole to one owner, the request carried keys 0,1,2,3 and the reply
was read against indexes [0,2,1,3]: a get's values and a put's codes landed on the wrong keys
(a put then lost a write and succeeded)."""

from __future__ import annotations

import random

from shardgrid.client import Client
from shardgrid.core import messages as m
from shardgrid.core.hashing import partition_id_of_serialized
from tests.adversarial.fake_member import PARTITIONS, FakeMember
from tests.wire import map_reply

KEYS = [b"\0\0\0\1a", b"\0\0\0\1b", b"\0\0\0\1c", b"\0\0\0\1d"]


def _moved_to(holder: dict[str, str]):
    """The first owner of keys 0 and 2: every key is now the other member's."""

    def behave(message):
        if type(message) is not m.MapRequest:
            return []
        pids = sorted({partition_id_of_serialized(key, PARTITIONS) for key in message.keys.items()})
        redirects = tuple(m.PartitionRedirect(pid, 5, holder["b"]) for pid in pids)
        return [
            map_reply(
                call_id=message.call_id, codes=(m.ReplyCode.WRONG_OWNER,) * len(message.keys), redirects=redirects
            )
        ]

    return behave


def _split_between(client: Client, a: str, b: str) -> None:
    aio = client.async_client
    client._run(aio.refresh_table())
    for index, pid in enumerate(partition_id_of_serialized(key, PARTITIONS) for key in KEYS):
        aio.table.owners[pid] = a if index % 2 == 0 else b


def test_a_retried_whole_call_answers_each_key_with_its_own_value():
    assert len({partition_id_of_serialized(key, PARTITIONS) for key in KEYS}) == 4
    holder: dict[str, str] = {}
    migrating_once = {"left": 1}

    def behave_b(message):  # owner of keys 1 and 3, migrating for a moment, then of them all
        if type(message) is not m.MapRequest:
            return []
        if migrating_once["left"]:
            migrating_once["left"] -= 1
            return [
                map_reply(call_id=message.call_id, codes=(m.ReplyCode.MIGRATING,) * len(message.keys), retry_after_ms=1)
            ]
        values = tuple(b"value of " + key for key in message.keys.items())
        return [map_reply(call_id=message.call_id, codes=(m.ReplyCode.OK,) * len(message.keys), values=values)]

    with FakeMember(_moved_to(holder)) as a, FakeMember(behave_b) as b:
        holder["b"] = b.address
        with Client([a.address], operation_call_timeout_ms=10_000) as client:
            _split_between(client, a.address, b.address)
            results = client._run(client.async_client.map_call(m.GET, "m", KEYS))
    assert results == [b"value of " + key for key in KEYS]


def test_a_retried_whole_put_writes_every_key():
    """A key the owner answered MIGRATING for was taken as written (its status read as another
    key's OK) and never sent again."""
    values = [b"1", b"2", b"3", b"4"]
    holder: dict[str, str] = {}
    stored: dict[bytes, bytes] = {}
    round_of_b = {"n": 0}

    def behave_b(message):
        if type(message) is not m.MapRequest:
            return []
        round_of_b["n"] += 1
        if round_of_b["n"] == 1:  # migrating for a moment
            return [
                map_reply(call_id=message.call_id, codes=(m.ReplyCode.MIGRATING,) * len(message.keys), retry_after_ms=1)
            ]
        codes = []
        for key, value in zip(message.keys.items(), message.values.items(), strict=True):
            if round_of_b["n"] == 2 and key == KEYS[1]:  # key 1's partition migrates a moment longer
                codes.append(m.ReplyCode.MIGRATING)
                continue
            stored[key] = value
            codes.append(m.ReplyCode.OK)
        return [map_reply(call_id=message.call_id, codes=tuple(codes), retry_after_ms=1)]

    with FakeMember(_moved_to(holder)) as a, FakeMember(behave_b) as b:
        holder["b"] = b.address
        with Client([a.address], operation_call_timeout_ms=10_000) as client:
            _split_between(client, a.address, b.address)
            client._run(client.async_client.map_call(m.PUT, "m", KEYS, values))
    assert stored == dict(zip(KEYS, values, strict=True))


def test_random_retry_rounds_answer_and_write_each_key_as_its_own():
    """The class: calls over two owners whose keys are refused at random (moved to one owner, or
    migrating) for a round or more; every get answers each key with its own value and every put
    writes each key's."""
    rng = random.Random(2026_11_23)
    holder: dict[str, str] = {}
    stored: dict[bytes, bytes] = {}
    plan = {"refuse_rate": 0.0, "moved_to": ""}

    def behave(message):
        if type(message) is not m.MapRequest:
            return []
        codes, redirects = [], []
        keys, written = message.keys.items(), message.values.items()
        for index, key in enumerate(keys):
            roll = rng.random()
            if roll < plan["refuse_rate"] / 3:
                codes.append(m.ReplyCode.MIGRATING)
            elif roll < plan["refuse_rate"]:
                codes.append(m.ReplyCode.WRONG_OWNER)
                pid = partition_id_of_serialized(key, PARTITIONS)
                redirects.append(m.PartitionRedirect(pid, 10**6, plan["moved_to"]))
            else:
                codes.append(m.ReplyCode.OK)
                if message.kind is m.PUT:
                    stored[key] = written[index]
        values = None
        if message.kind is m.GET:  # a refused key's value is never read: any bytes stand in for it
            values = tuple(
                b"value of " + key if s is m.ReplyCode.OK else b"" for key, s in zip(keys, codes, strict=True)
            )
        plan["refuse_rate"] /= 2  # refusals die out: the call ends
        return [
            map_reply(
                call_id=message.call_id, codes=tuple(codes), values=values, redirects=tuple(redirects), retry_after_ms=1
            )
        ]

    with FakeMember(behave) as a, FakeMember(behave) as b:
        holder.update(a=a.address, b=b.address)
        with Client([a.address], operation_call_timeout_ms=20_000) as client:
            aio = client.async_client
            client._run(aio.refresh_table())
            for trial in range(60):
                count = rng.randint(2, 8)
                keys = list(dict.fromkeys(b"\0\0\0\2k%d-%d" % (trial, rng.randrange(10**6)) for _ in range(count)))
                for pid in range(PARTITIONS):
                    aio.table.owners[pid] = a.address if rng.random() < 0.5 else b.address
                plan.update(refuse_rate=rng.choice([0.5, 0.9, 1.0]), moved_to=rng.choice([a.address, b.address]))
                if trial % 2:
                    assert client._run(aio.map_call(m.GET, "m", keys)) == [b"value of " + key for key in keys]
                else:
                    values = [b"%d" % rng.randrange(10**9) for _ in keys]
                    client._run(aio.map_call(m.PUT, "m", keys, values))
                    assert {key: stored[key] for key in keys} == dict(zip(keys, values, strict=True))
