"""The migration planner: seed 000's worked examples exactly, and its safety properties."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from shardgrid.core.identity import MemberId
from shardgrid.core.limits import MAX_REPLICA_COUNT
from shardgrid.core.migration import NO_INDEX, Migration, MigrationKind, apply_migration
from shardgrid.core.planner import (
    eliminate_cycles,
    plan_migrations,
    prioritize_copies_and_shift_ups,
    replica_count,
)

A, B, C, D, E, F, G, H = (MemberId(f"uuid-{name}", f"10.0.0.{i}:5701") for i, name in enumerate("ABCDEFGH"))
MEMBERS = [A, B, C, D, E, F, G, H]


def M(src: MemberId | None, src_cur: int, src_new: int, dst: MemberId | None, dst_cur: int, dst_new: int) -> Migration:
    return Migration(
        source=src,
        source_current_index=src_cur,
        source_new_index=src_new,
        destination=dst,
        destination_current_index=dst_cur,
        destination_new_index=dst_new,
    )


# --- seed 000, section 3.2.2: every worked example, with the exact migrations ---------------------


def test_move_of_the_owner() -> None:
    assert plan_migrations([A, B, C], [D, B, C]) == [M(A, 0, -1, D, -1, 0)]
    assert plan_migrations([A, B, C], [D, B, C])[0].kind is MigrationKind.MOVE


def test_copy_into_an_empty_backup_slot() -> None:
    plan = plan_migrations([A, None, C], [A, D, C])
    assert plan == [M(None, -1, -1, D, -1, 1)]
    assert plan[0].kind is MigrationKind.COPY


def test_shift_down_of_the_owner_into_an_empty_slot_is_one_atomic_migration() -> None:
    plan = plan_migrations([A, None, C], [D, A, C])
    assert plan == [M(A, 0, 1, D, -1, 0)]
    assert plan[0].kind is MigrationKind.SHIFT_DOWN


def test_shift_ups_fill_a_hole_in_the_middle() -> None:
    plan = plan_migrations([A, None, B, C], [A, B, C, None])
    assert plan == [M(None, -1, -1, B, 2, 1), M(None, -1, -1, C, 3, 2)]
    assert [m.kind for m in plan] == [MigrationKind.SHIFT_UP, MigrationKind.SHIFT_UP]


def test_moves_from_the_coldest_index_when_a_shift_up_would_lose_a_replica() -> None:
    plan = plan_migrations([A, B, C, D], [A, C, D, E])
    assert plan == [M(D, 3, -1, E, -1, 3), M(C, 2, -1, D, -1, 2), M(B, 1, -1, C, -1, 1)]
    assert all(m.kind is MigrationKind.MOVE for m in plan)


def test_shift_up_at_a_colder_index_before_moving_the_owner() -> None:
    plan = plan_migrations([A, B, C, D], [B, D, C, None])
    assert plan == [M(B, 1, -1, D, 3, 1), M(A, 0, -1, B, -1, 0)]
    assert [m.kind for m in plan] == [MigrationKind.SHIFT_UP, MigrationKind.MOVE]


def test_shift_down_onto_an_occupied_slot_becomes_two_moves() -> None:
    # Section 3.1.3, case 2: A hands the ownership to D and takes B's slot; B's copy stays until A has one.
    plan = plan_migrations([A, B, C], [D, A, C])
    assert plan == [M(A, 0, -1, D, -1, 0), M(B, 1, -1, A, -1, 1)]


def test_a_slot_the_target_leaves_empty_is_cleared() -> None:
    plan = plan_migrations([A, B, C], [A, B, None])
    assert plan == [M(C, 2, -1, None, -1, -1)]
    assert plan[0].kind is MigrationKind.CLEAR


def test_cycles_are_reverted_and_produce_no_migration() -> None:
    # Section 3.2.1: A -> index 2, B -> index 0, C -> index 1 is a cycle.
    assert eliminate_cycles([A, B, C], [B, C, A])[:3] == (A, B, C)
    assert plan_migrations([A, B, C], [B, C, A]) == []
    # A two-slot swap is a cycle too; the rest of the target still applies.
    assert plan_migrations([A, B, C], [B, A, D]) == [M(C, 2, -1, D, -1, 2)]


def test_the_floor_holds_where_seed_000_would_drop_a_replica() -> None:
    # Seed 000's algorithm shifts C up over B (dropping B, wanted at index 0) while the count is
    # already at its floor of 3, then copies B back; the planner copies D into the empty slot first.
    plan = plan_migrations([A, B, C, None], [B, C, None, D])
    _assert_safe_replay([A, B, C, None], [B, C, None, D], plan)
    assert len(plan) == 3


def test_prioritization_moves_a_copy_ahead_of_an_unrelated_move() -> None:
    plan = [M(A, 0, -1, D, -1, 0), M(None, -1, -1, E, -1, 2)]
    assert prioritize_copies_and_shift_ups(plan) == [plan[1], plan[0]]


def test_prioritization_keeps_order_with_a_common_participant() -> None:
    common = [M(A, 0, -1, D, -1, 0), M(None, -1, -1, D, -1, 2)]
    assert prioritize_copies_and_shift_ups(common) == common


def test_a_copy_overtakes_a_move_whatever_the_moves_index() -> None:
    """The issue's defect: a MOVE on a colder index held a COPY back."""
    colder_move = [M(C, 3, -1, D, -1, 3), M(None, -1, -1, E, -1, 1)]
    assert prioritize_copies_and_shift_ups(colder_move) == [colder_move[1], colder_move[0]]
    shift_up_from_empty = [M(C, 2, -1, D, -1, 2), M(None, -1, -1, E, 3, 1)]
    assert prioritize_copies_and_shift_ups(shift_up_from_empty) == [shift_up_from_empty[1], shift_up_from_empty[0]]


def test_prioritization_passes_a_shift_down_only_to_a_colder_index() -> None:
    hotter = [M(A, 0, 1, D, -1, 0), M(None, -1, -1, E, -1, 2)]
    assert prioritize_copies_and_shift_ups(hotter) == hotter
    same = [M(A, 0, 2, D, -1, 0), M(None, -1, -1, E, -1, 2)]
    assert prioritize_copies_and_shift_ups(same) == same
    colder = [M(A, 0, 3, D, -1, 0), M(None, -1, -1, E, -1, 2)]
    assert prioritize_copies_and_shift_ups(colder) == [colder[1], colder[0]]


def test_copies_keep_their_order_among_themselves() -> None:
    copies = [M(None, -1, -1, D, -1, 2), M(None, -1, -1, E, -1, 1)]
    assert prioritize_copies_and_shift_ups(copies) == copies


# --- properties -------------------------------------------------------------------------------


@st.composite
def replica_arrays(draw: st.DrawFn) -> list[MemberId | None]:
    """A current replica array: members that crashed leave holes anywhere."""
    length = draw(st.integers(min_value=1, max_value=MAX_REPLICA_COUNT))
    members = draw(st.permutations(MEMBERS))
    present = draw(st.lists(st.booleans(), min_size=length, max_size=length))
    return [m if keep else None for m, keep in zip(members, present, strict=False)]


@st.composite
def target_arrays(draw: st.DrawFn) -> list[MemberId | None]:
    """A target as repartitioning makes it: the first ``count`` slots filled, the rest empty."""
    count = draw(st.integers(min_value=0, max_value=MAX_REPLICA_COUNT))
    members = draw(st.permutations(MEMBERS))
    return list(members[:count])


def _assert_safe_replay(
    current: Sequence[MemberId | None], target: Sequence[MemberId | None], plan: Sequence[Migration]
) -> None:
    expected = eliminate_cycles(current, target)
    state = list(current) + [None] * (MAX_REPLICA_COUNT - len(current))
    floor = min(replica_count(state), replica_count(expected))
    for migration in plan:
        state = apply_migration(state, migration)  # raises if the migration does not fit the state
        present = [r for r in state if r is not None]
        assert len(present) == len(set(present)), f"a member twice after {migration}: {state}"
        assert len(present) >= floor, f"{len(present)} replicas < floor {floor} after {migration}"
    assert tuple(state) == expected


@settings(max_examples=3000, deadline=None)
@given(replica_arrays(), target_arrays())
def test_any_plan_replays_safely_to_the_cycle_free_target(
    current: list[MemberId | None], target: list[MemberId | None]
) -> None:
    plan = plan_migrations(current, target)
    _assert_safe_replay(current, target, plan)
    _assert_safe_replay(current, target, prioritize_copies_and_shift_ups(plan))


def test_a_leaving_member_displaced_by_a_shift_up_is_parked_and_cleared_last() -> None:
    """Three members, two leaving: the one that stays shifts up to owner. Dropped in the same
    step, the leaving owner's copy was gone while the leave went on, and a crash of the member
    that stays lost the partition although the leaving member still ran."""
    assert plan_migrations([A, C], [C, None]) == [M(A, 0, -1, C, 1, 0)]
    assert plan_migrations([A, C], [C, None], keep={A}) == [M(A, 0, 1, C, 1, 0), M(A, 1, -1, None, -1, -1)]


@settings(max_examples=2000, deadline=None)
@given(replica_arrays(), target_arrays(), st.sets(st.sampled_from(MEMBERS), max_size=3))
def test_a_kept_member_leaves_a_partition_only_by_a_move_or_a_clear(
    current: list[MemberId | None], target: list[MemberId | None], keep: set[MemberId]
) -> None:
    plan = plan_migrations(current, target, keep)
    _assert_safe_replay(current, target, plan)
    _assert_safe_replay(current, target, prioritize_copies_and_shift_ups(plan))
    for migration in plan:
        if migration.source in keep and migration.source_new_index == NO_INDEX:
            assert migration.kind in (MigrationKind.MOVE, MigrationKind.CLEAR), f"{migration} drops a kept copy"


@settings(max_examples=1000, deadline=None)
@given(replica_arrays(), target_arrays())
def test_prioritization_leaves_no_copy_behind_a_migration_it_may_pass(
    current: list[MemberId | None], target: list[MemberId | None]
) -> None:
    plan = prioritize_copies_and_shift_ups(plan_migrations(current, target))
    for earlier, migration in itertools.pairwise(plan):
        if migration.source is not None or migration.kind not in (MigrationKind.COPY, MigrationKind.SHIFT_UP):
            continue
        held_back = (
            earlier.source is None
            or migration.destination in earlier.participants
            or NO_INDEX != earlier.source_new_index <= migration.destination_new_index
        )
        assert held_back, f"{migration} waits behind {earlier} in {plan}"


@settings(max_examples=1000, deadline=None)
@given(replica_arrays(), target_arrays())
def test_plans_are_minimal_where_nothing_has_to_move(
    current: list[MemberId | None], target: list[MemberId | None]
) -> None:
    cycle_free = eliminate_cycles(current, target)
    plan = plan_migrations(current, target)
    changed_slots = sum(1 for c, t in zip(list(current) + [None] * 7, cycle_free, strict=False) if c != t)
    assert (changed_slots == 0) == (plan == [])
    assert len(plan) <= 2 * changed_slots


@settings(max_examples=500, deadline=None)
@given(target_arrays())
def test_cycle_elimination_is_idempotent_and_keeps_the_member_set(target: list[MemberId | None]) -> None:
    current = list(reversed(target))
    once = eliminate_cycles(current, target)
    assert eliminate_cycles(current, once) == once
    assert sorted(r.uuid for r in once if r) == sorted(r.uuid for r in target if r)
