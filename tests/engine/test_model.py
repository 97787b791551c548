"""The engine against the pure-Python model (``model.py``): random sequences of puts, gets,
removes, put-if-absents, scans, metadata reads and expiry sweeps, at random times (``now_ms`` goes
back and forth, as replicas' clocks may), with TTLs per call and per entry, on a small pool of keys
so that they collide. After every step the whole store (every record in order, with its metadata,
and the counts and bytes) must equal the model's.

The last tests run the same machine against engines broken on purpose, and expect it to fail:
the comparison can catch what it is meant to."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from shardgrid._engine import MAX_COUNTER, RecordStore
from tests.engine.model import ModelStore
from tests.engine.packing import found, held, numbers, pack, unpack

STEPS = int(os.environ.get("SHARDGRID_ENGINE_STEPS", "50"))
EXAMPLES = int(os.environ.get("SHARDGRID_ENGINE_EXAMPLES", "150"))

MAPS = ("m", "é-map")
KEYS = (b"", b"a", b"b", b"\x00", b"\xff\xfe\xfd", b"key-5", b"k" * 40)
keys_strategy = st.lists(st.sampled_from(KEYS), max_size=6)
values_strategy = st.binary(max_size=24) | st.binary(min_size=100, max_size=300)
# Times near each other (entries expire within a run), and the largest allowed.
now_strategy = st.integers(0, 300) | st.just(MAX_COUNTER)
ttl_strategy = st.sampled_from((0, 1, 2, 5, 50, 200, MAX_COUNTER))


class Engine:
    """The engine behind the model's interface (lists in, lists out); the broken variants below
    override one call each."""

    def __init__(self, seed: int) -> None:
        self.store = RecordStore(seed)

    def write(self, call: str, map_name: str, keys: list[bytes], values: list[bytes], now_ms: int, ttl, previous: bool):
        kwargs: dict = {"return_previous": previous}
        if isinstance(ttl, list):
            kwargs["ttls_ms"] = b"".join(t.to_bytes(8, "little") for t in ttl)
        elif ttl is not None:
            kwargs["ttl_ms"] = ttl
        before = self.store.memory_bytes(map_name)
        answer = getattr(self.store, call)(map_name, *pack(keys), *pack(values), now_ms, **kwargs)
        assert answer[3] == self.store.memory_bytes(map_name) - before, "a write misstated its memory change"
        return found(answer, previous)

    def get(self, map_name: str, keys: list[bytes], now_ms: int) -> list:
        return found(self.store.get(map_name, *pack(keys), now_ms))

    def remove(self, map_name: str, keys: list[bytes], now_ms: int, previous: bool) -> list:
        before = self.store.memory_bytes(map_name)
        answer = self.store.remove(map_name, *pack(keys), now_ms, return_previous=previous)
        assert answer[3] == self.store.memory_bytes(map_name) - before, "a remove misstated its memory change"
        return found(answer, previous)


class EngineMachine(RuleBasedStateMachine):
    """Two engines keyed by different seeds take every call; each must answer as the model does
    (so nothing observable depends on the seed)."""

    engine_class: type[Engine] = Engine

    def __init__(self) -> None:
        super().__init__()
        self.engines = [self.engine_class(seed=0)]
        self.model = ModelStore()

    @initialize(seed=st.integers(1, 2**64 - 1))
    def a_second_engine_with_another_seed(self, seed: int) -> None:
        self.engines.append(self.engine_class(seed=seed))

    @rule(
        call=st.sampled_from(("put", "put_if_absent")),
        map_name=st.sampled_from(MAPS),
        data=st.data(),
        now_ms=now_strategy,
        previous=st.booleans(),
    )
    def write(self, call: str, map_name: str, data: st.DataObject, now_ms: int, previous: bool) -> None:
        keys = data.draw(keys_strategy)
        values = data.draw(st.lists(values_strategy, min_size=len(keys), max_size=len(keys)))
        ttl = data.draw(st.none() | ttl_strategy | st.lists(ttl_strategy, min_size=len(keys), max_size=len(keys)))
        ttls = ttl if isinstance(ttl, list) else [ttl or 0] * len(keys)
        expected = getattr(self.model, call)(map_name, keys, values, now_ms, ttls)
        if not previous:
            expected = [None if v is None else b"" for v in expected]
        for engine in self.engines:
            assert engine.write(call, map_name, keys, values, now_ms, ttl, previous) == expected

    @rule(map_name=st.sampled_from(MAPS), keys=keys_strategy, now_ms=now_strategy)
    def get(self, map_name: str, keys: list[bytes], now_ms: int) -> None:
        expected = self.model.get(map_name, keys, now_ms)
        for engine in self.engines:
            assert engine.get(map_name, keys, now_ms) == expected

    @rule(map_name=st.sampled_from(MAPS), keys=keys_strategy, now_ms=now_strategy, previous=st.booleans())
    def remove(self, map_name: str, keys: list[bytes], now_ms: int, previous: bool) -> None:
        expected = self.model.remove(map_name, keys, now_ms)
        if not previous:
            expected = [None if v is None else b"" for v in expected]
        for engine in self.engines:
            assert engine.remove(map_name, keys, now_ms, previous) == expected

    @rule(map_name=st.sampled_from(MAPS), keys=keys_strategy, now_ms=now_strategy)
    def metadata(self, map_name: str, keys: list[bytes], now_ms: int) -> None:
        expected = self.model.metadata(map_name, keys, now_ms)
        for engine in self.engines:
            packed, present = engine.store.metadata(map_name, *pack(keys), now_ms)
            per_key = numbers(packed)
            assert len(per_key) == 6 * len(keys)
            assert len(present) == len(keys)
            got = [tuple(per_key[i * 6 : i * 6 + 6]) if p else None for i, p in enumerate(present)]
            assert all(per_key[i * 6 : i * 6 + 6] == [0] * 6 for i, p in enumerate(present) if not p)
            assert got == expected

    @rule(
        map_name=st.sampled_from(MAPS),
        offset=st.integers(0, 10),
        max_entries=st.integers(0, 10),
        now_ms=now_strategy,
        keys_only=st.booleans(),
    )
    def scan(self, map_name: str, offset: int, max_entries: int, now_ms: int, keys_only: bool) -> None:
        entries, end = self.model.scan(map_name, offset, max_entries, now_ms)
        for engine in self.engines:
            keys, key_lengths, values, value_lengths, next_offset = engine.store.scan(
                map_name, offset, max_entries, now_ms, keys_only=keys_only
            )
            assert next_offset == end
            assert unpack(keys, key_lengths) == [k for k, _ in entries]
            assert unpack(values, value_lengths) == ([] if keys_only else [v for _, v in entries])

    @rule(map_name=st.sampled_from(MAPS), now_ms=now_strategy, max_entries=st.integers(0, 4), sweep=st.booleans())
    def expiry_sweep(self, map_name: str, now_ms: int, max_entries: int, sweep: bool) -> None:
        """What an owner does: ask for expired keys, then (sometimes) remove them."""
        keys = self.model.expired(map_name, now_ms, max_entries)
        for engine in self.engines:
            assert unpack(*engine.store.expired(map_name, now_ms, max_entries)) == keys
        if sweep:
            expected = self.model.remove(map_name, keys, now_ms)
            assert expected == [None] * len(keys), "an expired entry is removed as absent"
            for engine in self.engines:
                assert engine.remove(map_name, keys, now_ms, True) == expected

    @invariant()
    def the_whole_store_is_the_models(self) -> None:
        for engine in self.engines:
            self.check_store(engine.store)

    def check_store(self, store: RecordStore) -> None:
        model = self.model
        assert store.map_names() == list(model.maps)
        for name, table in model.maps.items():
            records = held(store, name)
            assert [r.key for r in records] == table.order
            assert [(r.value, r.metadata) for r in records] == [
                (table.records[k].value, table.records[k].metadata()) for k in table.order
            ]
            assert store.entry_count(name) == len(table.order)
            assert store.memory_bytes(name) == model.memory_bytes(name)
        assert store.total_entry_count() == sum(len(t.order) for t in model.maps.values())
        assert store.total_memory_bytes() == sum(model.memory_bytes(name) for name in model.maps)
        for name in set(MAPS) - set(model.maps):
            assert store.entry_count(name) == store.memory_bytes(name) == 0


MACHINE_SETTINGS = settings(
    max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def test_the_engine_behaves_as_the_model() -> None:
    run_state_machine_as_test(EngineMachine, settings=MACHINE_SETTINGS)


# --- the comparison catches a broken engine ------------------------------------------------------


class ReturnsExpiredEntries(Engine):
    """Reads as if no entry had expired."""

    def get(self, map_name: str, keys: list[bytes], now_ms: int) -> list:
        return found(self.store.get(map_name, *pack(keys), 0))


class LosesTheLastKeyOfARemove(Engine):
    def remove(self, map_name: str, keys: list[bytes], now_ms: int, previous: bool) -> list:
        answer = super().remove(map_name, keys[:-1], now_ms, previous)
        return [*answer, None] if keys else answer


class WritesWithoutExpiry(Engine):
    def write(self, call: str, map_name: str, keys: list[bytes], values: list[bytes], now_ms: int, ttl, previous: bool):
        return super().write(call, map_name, keys, values, now_ms, None, previous)


class CountsAReadTwice(Engine):
    def get(self, map_name: str, keys: list[bytes], now_ms: int) -> list:
        self.store.get(map_name, *pack(keys), now_ms)
        return super().get(map_name, keys, now_ms)


@pytest.mark.parametrize(
    "broken", [ReturnsExpiredEntries, LosesTheLastKeyOfARemove, WritesWithoutExpiry, CountsAReadTwice]
)
def test_the_comparison_catches_a_broken_engine(broken: type[Engine]) -> None:
    machine = type(f"{broken.__name__}Machine", (EngineMachine,), {"engine_class": broken})
    quick = settings(
        max_examples=300,
        stateful_step_count=STEPS,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.generate],  # the first failure is enough: no shrinking
    )
    with pytest.raises(AssertionError):
        run_state_machine_as_test(machine, settings=quick)
