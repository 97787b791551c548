"""A map call's ``ttl`` argument as the client checks and sends it (in ms, -1 for the map's own)."""

from __future__ import annotations

import pytest

from shardgrid.client.aio import ttl_ms_of
from shardgrid.core.limits import MAX_TTL_SECONDS


def test_ttl_seconds_become_milliseconds_and_none_the_maps_own() -> None:
    assert ttl_ms_of(None) == -1
    assert ttl_ms_of(0) == 0
    assert ttl_ms_of(1.5) == 1_500
    assert ttl_ms_of(0.001) == 1
    assert ttl_ms_of(MAX_TTL_SECONDS) == MAX_TTL_SECONDS * 1000


@pytest.mark.parametrize("bad", [-1, 0.0001, MAX_TTL_SECONDS + 1, True, "5", float("nan"), float("inf")])
def test_a_ttl_out_of_range_or_of_another_type_is_refused_before_anything_is_sent(bad: object) -> None:
    with pytest.raises(ValueError, match="ttl"):
        ttl_ms_of(bad)  # type: ignore[arg-type]
