"""Client API edge cases against a real cluster."""

from __future__ import annotations

import pytest

from shardgrid.client import Client


def test_a_key_of_another_type_is_refused_and_the_map_stays_readable(cluster):
    """``KeySerializer.dumps`` ignores ``key_type``: a str-keyed map takes an int key, and from then
    on ``keys()``, ``iter(m)``, ``m == {}`` raise ValueError for the whole map (one stray key makes
    the map unreadable as a mapping). Expected: the write is refused with TypeError."""
    with Client(cluster.addresses[:1], operation_call_timeout_ms=10_000) as client:
        names = client.get_map("typed-str")
        names.set("ok", 1)
        try:
            names.set(5, "five")
        except TypeError:
            return  # refused: fine
        assert sorted(names.keys(), key=str) == [5, "ok"] or names.keys() == ["ok"]


def test_an_int_keyed_map_refuses_a_str_key(cluster):
    """``get_map(..., key_type=int).set("abcd", 1)`` is accepted, and ``keys()`` then returns
    18813707108, a key nobody wrote."""
    with Client(cluster.addresses[:1], operation_call_timeout_ms=10_000) as client:
        numbers = client.get_map("typed-int", key_type=int)
        try:
            numbers.set("abcd", 1)
        except TypeError:
            return
        assert numbers.keys() in ([], ["abcd"]), f"keys() invented {numbers.keys()}"


def test_keys_of_different_types_do_not_collide(cluster):
    """The empty string and the int 0 serialize to the same 4 bytes (b'\\0\\0\\0\\0'), as do
    "a" and b"\\0\\0\\0\\x01a": a map takes keys of its own type only, so they never meet."""
    with Client(cluster.addresses[:1], operation_call_timeout_ms=10_000) as client:
        mixed = client.get_map("collide")
        mixed.set("", "empty string")
        with pytest.raises(TypeError, match="key_type=str"):
            mixed.get(0)
        assert 0 not in mixed


def test_the_sync_client_from_several_threads_with_size_during_writes(cluster):
    import threading

    with Client(cluster.addresses[:1], operation_call_timeout_ms=30_000) as client:
        shared = client.get_map("threads")
        errors: list[BaseException] = []
        sizes: list[int] = []

        def write(thread: int) -> None:
            try:
                for i in range(300):
                    shared.set(f"{thread}-{i}", i)
                    if i % 50 == 0:
                        shared.put_all({f"{thread}-b{i}-{j}": j for j in range(100)})
            except BaseException as error:
                errors.append(error)

        def count() -> None:
            try:
                for _ in range(10):
                    sizes.append(shared.size())
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=write, args=(t,)) for t in range(6)] + [threading.Thread(target=count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not any(thread.is_alive() for thread in threads)
        assert errors == []
        assert sizes == sorted(sizes)  # entries are only added
        assert shared.size() == 6 * (300 + 6 * 100)
