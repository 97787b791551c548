"""``shardgrid bench member`` at small sizes: the exchanges complete and the figures add up."""

from __future__ import annotations

from shardgrid.cli.bench_member import TARGETS, data_path, migration, slowest_handle, targets_of


def test_the_data_path_serves_every_operation_through_the_codec() -> None:
    report = data_path(batches=2, single_puts=20, rounds=3)
    assert report["put_all"]["entries"] == 2_000
    assert report["get_all"]["entries"] == 2_000
    assert report["put_all"]["entries_per_second"] == sorted(report["put_all"]["each_round"])[1]  # the median
    assert len(report["get_all"]["each_round"]) == 3
    assert report["single_put"]["calls"] == 20


def test_a_graceful_shutdown_moves_the_loaded_partition_and_memory_is_measured() -> None:
    report = migration(entries=2_000, measure_memory=True)
    assert report["partitions_moved"] == 1
    assert report["peak_extra_bytes"] > 0
    assert report["destination_copy_bytes"] > 2_000 * 100
    assert report["data_bytes"] >= 2_000 * 100


def test_the_slowest_handle_is_named() -> None:
    report = slowest_handle(partitions=271, members=3)
    assert report["ms"] > 0
    assert report["event"]


def missed(figures: dict[str, float]) -> list[str]:
    return [target.name for target in targets_of(figures) if not target.met]


def test_rates_are_floors_and_times_are_ceilings() -> None:
    met = {name: wanted for name, (_, _, wanted) in TARGETS.items()}
    assert missed(met) == []
    slow = {**met, "put_all_entries_per_second": 1, "max_handle_ms": 51.0, "migration_transfer_overhead_bytes": 10**9}
    assert missed(slow) == ["put_all_entries_per_second", "migration_transfer_overhead_bytes", "max_handle_ms"]
