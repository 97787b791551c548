"""The parallel migration schedule of seed 003: serial per partition, bounded per member."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardgrid.core.errors import ConfigError
from shardgrid.core.identity import MemberId, MemberInfo
from shardgrid.core.migration import Migration
from shardgrid.core.placement import arrange
from shardgrid.core.rebalance import plan_rebalance
from shardgrid.core.schedule import ScheduledMigration, next_migrations, participants_of, schedule_rounds
from shardgrid.core.table import PartitionTable

A, B, C, D = (MemberId(f"uuid-{n}", f"127.0.0.1:{5701 + i}") for i, n in enumerate("ABCD"))


def test_a_backup_copy_keeps_the_owner_busy_too() -> None:
    copy = Migration(
        source=None,
        source_current_index=-1,
        source_new_index=-1,
        destination=C,
        destination_current_index=-1,
        destination_new_index=1,
    )
    assert participants_of(copy, A) == (A, C)
    move = Migration(
        source=A,
        source_current_index=0,
        source_new_index=-1,
        destination=D,
        destination_current_index=-1,
        destination_new_index=0,
    )
    assert participants_of(move, A) == (A, D)
    clear = Migration(
        source=B,
        source_current_index=1,
        source_new_index=-1,
        destination=None,
        destination_current_index=-1,
        destination_new_index=-1,
    )
    assert participants_of(clear, A) == (B,)


def test_one_migration_per_partition_and_only_the_head_of_its_queue() -> None:
    pending = {
        0: [
            Migration(
                source=A,
                source_current_index=0,
                source_new_index=-1,
                destination=C,
                destination_current_index=-1,
                destination_new_index=0,
            ),
            Migration(
                source=B,
                source_current_index=1,
                source_new_index=-1,
                destination=D,
                destination_current_index=-1,
                destination_new_index=1,
            ),
        ]
    }
    started = next_migrations(pending, (), 10, owner_of=lambda pid: A)
    assert [s.migration for s in started] == [pending[0][0]]
    running = next_migrations(pending, started, 10, owner_of=lambda pid: A)
    assert running == []


def test_no_member_takes_part_in_more_than_the_limit() -> None:
    pending = {
        pid: [
            Migration(
                source=A,
                source_current_index=0,
                source_new_index=-1,
                destination=B,
                destination_current_index=-1,
                destination_new_index=0,
            )
        ]
        for pid in range(5)
    }
    started = next_migrations(pending, (), 2, owner_of=lambda pid: A)
    assert [s.partition_id for s in started] == [0, 1]
    in_flight = [
        ScheduledMigration(
            7,
            Migration(
                source=None,
                source_current_index=-1,
                source_new_index=-1,
                destination=D,
                destination_current_index=-1,
                destination_new_index=1,
            ),
            (A, D),
        )
    ]
    started = next_migrations(pending, in_flight, 2, owner_of=lambda pid: A)
    assert [s.partition_id for s in started] == [0]


def test_the_limit_must_be_sane() -> None:
    with pytest.raises(ConfigError, match="max_parallel_migrations"):
        next_migrations({}, (), 0, owner_of=lambda pid: None)


def _plan_for(partitions: int, members: int, seed: int) -> tuple[PartitionTable, dict[int, tuple[Migration, ...]]]:
    rng = random.Random(seed)
    start = [MemberId(f"m{i:03d}", f"h:{i}") for i in range(members)]
    table = arrange([MemberInfo(m) for m in start], PartitionTable.empty(partitions), rng, backup_count=2)
    grown = [*start, MemberId("new-1", "h:new1"), MemberId("new-2", "h:new2")]
    survivors = [m for m in grown if m != start[0]]
    plan = plan_rebalance([MemberInfo(m) for m in survivors], table, rng, backup_count=2)
    return table, dict(plan.migrations)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(min_value=20, max_value=600),
    st.integers(min_value=2, max_value=12),
    st.integers(min_value=1, max_value=12),
    st.integers(min_value=0, max_value=2**32),
)
def test_rounds_respect_every_bound_and_run_the_whole_plan(
    partitions: int, members: int, limit: int, seed: int
) -> None:
    table, plan = _plan_for(partitions, members, seed)
    rounds = schedule_rounds(table, plan, limit)
    started = [s for r in rounds for s in r]
    assert Counter(s.partition_id for s in started) == Counter({pid: len(q) for pid, q in plan.items()})
    for round_ in rounds:
        assert len({s.partition_id for s in round_}) == len(round_)  # one per partition per round
        load = Counter(m for s in round_ for m in s.participants)
        assert max(load.values()) <= limit
    for pid, queue in plan.items():  # each partition's migrations in plan order
        assert [s.migration for s in started if s.partition_id == pid] == list(queue)


def test_schedule_is_deterministic() -> None:
    table, plan = _plan_for(300, 6, seed=5)
    assert schedule_rounds(table, plan, 3) == schedule_rounds(table, plan, 3)
