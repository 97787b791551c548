"""The simulator's history checker: what a read of a single-writer key may return."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shardgrid.sim.workload import ACKED, FAILED, MAYBE, Ledger, Write

KEY = b"k"


def _ledger(*outcomes: str) -> Ledger:
    ledger = Ledger()
    ledger.writes[KEY] = [Write(f"v{i}".encode(), issued_ms=i, outcome=o) for i, o in enumerate(outcomes)]
    return ledger


def test_a_read_may_return_the_last_acknowledged_value_or_a_later_maybe() -> None:
    ledger = _ledger(ACKED, MAYBE, ACKED, MAYBE, FAILED)
    assert ledger.allowed_final_values(KEY) == {b"v2", b"v3"}
    for value in (b"v2", b"v3"):
        _ledger(ACKED, MAYBE, ACKED, MAYBE, FAILED).check_read(KEY, value, 0, 1, "m1")
    ledger.check_read(KEY, b"v2", 0, 1, "m1")
    assert not ledger.read_violations


def test_a_value_older_than_a_newer_acknowledged_write_is_stale() -> None:
    ledger = _ledger(ACKED, MAYBE, ACKED)
    ledger.check_read(KEY, b"v1", 0, 1, "m1")  # a timed-out write that landed after v2 was acknowledged
    ledger.check_read(KEY, None, 0, 1, "m1")  # the key's acknowledged writes gone
    assert len(ledger.read_violations) == 2


def test_a_write_seen_once_cannot_be_replaced_by_an_earlier_one() -> None:
    """v2 was read, so it was applied; v1 showing after it was applied late, or twice (the
    outside tester's "resurrected" class), although both are allowed on their own."""
    ledger = _ledger(ACKED, MAYBE, MAYBE)
    ledger.check_read(KEY, b"v2", 0, 1, "m1")
    ledger.check_read(KEY, b"v1", 2, 3, "m1")
    assert len(ledger.read_violations) == 1
    assert ledger.allowed_final_values(KEY) == {b"v2"}


@given(st.lists(st.sampled_from([ACKED, MAYBE, FAILED]), max_size=8), st.lists(st.integers(0, 9), max_size=8))
def test_reads_in_write_order_never_violate_and_a_step_back_always_does(outcomes: list[str], picks: list[int]) -> None:
    ledger = _ledger(*outcomes)
    last_acked = max((i for i, o in enumerate(outcomes) if o == ACKED), default=-1)
    candidates = [i for i, o in enumerate(outcomes) if i == last_acked or (i > last_acked and o == MAYBE)]
    seen = -1
    for pick in sorted(picks):
        chosen = [i for i in candidates if i >= seen]
        if not chosen:
            break
        index = chosen[pick % len(chosen)]
        ledger.check_read(KEY, f"v{index}".encode(), 0, 1, "m1")
        seen = index
    assert not ledger.read_violations
    earlier = [i for i in range(seen) if outcomes[i] != FAILED]
    if seen >= 0 and earlier:
        ledger.check_read(KEY, f"v{earlier[-1]}".encode(), 0, 1, "m1")
        assert ledger.read_violations
