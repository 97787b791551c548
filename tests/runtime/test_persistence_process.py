"""Persistent member processes (``--data-dir``): three members SIGKILLed at once while a client
writes come back from their directories as themselves, with every acknowledged write; a data
directory another member holds, or one that is damaged, is refused at start, naming the file."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator

import pytest

from shardgrid.cli.local_cluster import member_command
from shardgrid.client import Client, DiskFullError, PartitionUnavailableError
from shardgrid.core.disk_records import RecordKind, encode_record
from tests.runtime.local_cluster import FAST_SETTINGS, LocalCluster, free_ports

VALUE = b"v" * 100


def _start_all(running: LocalCluster, tmp_path, addresses: list[str], *settings: str) -> None:
    for address in addresses:
        port = address.rpartition(":")[2]
        running.start(address, addresses, 3, "--data-dir", str(tmp_path / f"data-{port}"), *settings)


@contextlib.contextmanager
def _three_persistent_members(tmp_path, *settings: str) -> Iterator[tuple[LocalCluster, list[str]]]:
    """Three members, each with its own data directory under ``tmp_path``, formed."""
    addresses = [f"127.0.0.1:{port}" for port in free_ports(3)]
    with LocalCluster(tmp_path, 3, "--partition-count", "31", started=0) as running:
        running.addresses = addresses
        _start_all(running, tmp_path, addresses, *settings)
        running.wait_formed()
        yield running, addresses


def test_every_member_killed_at_once_comes_back_from_its_disk_with_every_acknowledged_write(tmp_path) -> None:
    with _three_persistent_members(tmp_path) as (running, addresses):
        acknowledged: dict[str, bytes] = {}
        with Client(addresses, operation_call_timeout_ms=30_000) as client:
            client.wait_until_safe(60)
            data = client.get_map("data")
            uuids = {status.address: status.uuid for status in map(client.member_status, addresses)}
            for batch in range(10):
                entries = {f"k{batch}-{i}": VALUE + str(i).encode() for i in range(200)}
                data.put_all(entries)
                acknowledged.update(entries)
            for address in addresses:  # a power cut: no member leaves, none syncs once more
                running.kill(address)
        _start_all(running, tmp_path, addresses)
        for address in addresses:
            running.wait_for_log(address, "member-restored", timeout_s=60)
        with Client(addresses, operation_call_timeout_ms=60_000) as client:
            client.wait_until_safe(90)
            assert {status.address: status.uuid for status in map(client.member_status, addresses)} == uuids
            held = client.get_map("data").get_all(list(acknowledged))
            assert held == acknowledged


def test_a_data_directory_another_member_holds_is_refused(tmp_path) -> None:
    port, other = free_ports(2)
    directory = str(tmp_path / "data")
    with LocalCluster(tmp_path, 1, started=0) as running:
        address = running.start(f"127.0.0.1:{port}", [f"127.0.0.1:{port}"], 1, "--data-dir", directory)
        running.wait_for_log(address, "leader-changed")
        second = subprocess.run(
            member_command(other, [f"127.0.0.1:{other}"], 1, (*FAST_SETTINGS, "--data-dir", directory)),
            capture_output=True,
            timeout=60,
        )
        assert second.returncode == 1
        assert b"is open in another process" in second.stderr
        running.kill(address)
        # The only voter of its cluster, started elsewhere: nobody could rename it there.
        moved = subprocess.run(
            member_command(other, [f"127.0.0.1:{other}"], 1, (*FAST_SETTINGS, "--data-dir", directory)),
            capture_output=True,
            timeout=60,
        )
        assert moved.returncode == 1
        assert f"only voter of, at 127.0.0.1:{port}: start it there".encode() in moved.stderr, moved.stderr[-2000:]


def test_a_damaged_raft_file_is_refused_naming_it(tmp_path) -> None:
    (port,) = free_ports(1)
    directory = tmp_path / "data"
    with LocalCluster(tmp_path, 1, started=0) as running:
        address = running.start(f"127.0.0.1:{port}", [f"127.0.0.1:{port}"], 1, "--data-dir", str(directory))
        running.wait_for_log(address, "leader-changed")
        time.sleep(0.5)
        running.kill(address)
    raft = directory / "raft"
    damaged = bytearray(raft.read_bytes())
    damaged[20] ^= 0xFF  # inside the first record's payload
    raft.write_bytes(bytes(damaged))
    again = subprocess.run(
        member_command(port, [f"127.0.0.1:{port}"], 1, (*FAST_SETTINGS, "--data-dir", str(directory))),
        capture_output=True,
        timeout=60,
    )
    assert again.returncode == 1
    assert b"raft is corrupt at byte 0" in again.stderr, again.stderr[-2000:]


def test_a_directory_that_lost_its_member_file_or_its_log_is_refused_not_written_over(tmp_path) -> None:
    """Found by an outside tester: with its member file deleted, or its Raft file cut short, a
    member started as a new one and wrote its replicas away."""
    (port,) = free_ports(1)
    directory = tmp_path / "data"
    with LocalCluster(tmp_path, 1, started=0) as running:
        address = running.start(f"127.0.0.1:{port}", [f"127.0.0.1:{port}"], 1, "--data-dir", str(directory))
        running.wait_for_log(address, "leader-changed")
        with Client([address]) as client:
            client.wait_until_safe(60)
            client.get_map("data").put_all({f"k{i}": VALUE for i in range(100)})
        running.kill(address)
    replicas = (directory / "replicas").read_bytes()
    member = (directory / "member").read_bytes()
    command = member_command(port, [f"127.0.0.1:{port}"], 1, (*FAST_SETTINGS, "--data-dir", str(directory)))
    (directory / "member").unlink()
    again = subprocess.run(command, capture_output=True, timeout=60)
    assert again.returncode == 1
    assert b"replicas but no member file" in again.stderr, again.stderr[-2000:]
    assert (directory / "replicas").read_bytes() == replicas
    (directory / "member").write_bytes(member)
    raft = directory / "raft"
    raft.write_bytes(raft.read_bytes()[:5])
    again = subprocess.run(command, capture_output=True, timeout=60)
    assert again.returncode == 1
    assert b"replicas but a Raft file with no log" in again.stderr, again.stderr[-2000:]
    assert (directory / "replicas").read_bytes() == replicas


def test_a_member_short_of_disk_refuses_writes_with_a_clear_error_and_takes_them_again(tmp_path) -> None:
    """The data directory's file system fills up (another file on it grows past what the member
    keeps free): writes are refused DISK_FULL, naming the member, while reads go on and the status
    says so; once the file is gone, writes are taken again, and nothing the disk held was lost."""
    (port,) = free_ports(1)
    address = f"127.0.0.1:{port}"
    directory = tmp_path / "data"
    directory.mkdir()
    stats = os.statvfs(directory)
    free_bytes = stats.f_bavail * stats.f_frsize
    headroom_bytes = 128 * 2**20
    if free_bytes < 4 * headroom_bytes:
        pytest.skip(f"{free_bytes} bytes free: too little to fill past a reserve")
    # The member keeps all but 128 MiB of what is free now: a 256 MiB file takes it under.
    reserve = free_bytes - headroom_bytes
    filler = tmp_path / "filler"
    with LocalCluster(tmp_path, 1, started=0) as running:
        running.start(address, [address], 1, "--data-dir", str(directory), "--set", f"disk_reserve_bytes={reserve}")
        running.wait_for_log(address, "leader-changed")
        with Client([address], operation_call_timeout_ms=20_000) as client:
            client.wait_until_safe(60)
            data = client.get_map("data")
            data.put_all({f"k{i}": VALUE for i in range(100)})
            status = client.member_status(address)
            assert status.persistent
            assert status.disk_bytes > 0
            assert not status.disk_full
            with filler.open("wb") as out:
                for _ in range(2 * headroom_bytes // 2**20):
                    out.write(b"\0" * 2**20)
                out.flush()
                os.fsync(out.fileno())
            deadline = time.monotonic() + 30
            while not client.member_status(address).disk_full:
                assert time.monotonic() < deadline, "the member never saw its disk short of room"
                time.sleep(0.2)
            with pytest.raises(DiskFullError, match=f"member {address} has .* bytes free") as refused:
                data.put("another", VALUE)
            assert "refused (not applied)" in str(refused.value)
            assert data.get("another") is None
            assert data.get_all([f"k{i}" for i in range(100)]) == {f"k{i}": VALUE for i in range(100)}
            data.remove("k0")  # removes go on
            filler.unlink()
            deadline = time.monotonic() + 30
            while client.member_status(address).disk_full:
                assert time.monotonic() < deadline, "the member never saw the room come back"
                time.sleep(0.2)
            data.put("another", VALUE)
            assert data.get("another") == VALUE


def test_members_that_sync_every_second_come_back_consistent_losing_at_most_that_second(tmp_path) -> None:
    """fsync = every_ms: writes are acknowledged before their sync. Every member SIGKILLed at once
    loses at most what was written within the interval before the kill; the owners start new
    lineages, their backups take their copies whole, and the cluster is safe again with every
    write acknowledged before that interval."""
    interval_ms = 500
    settings = ("--set", "fsync=every_ms", "--set", f"fsync_interval_ms={interval_ms}")
    with _three_persistent_members(tmp_path, *settings) as (running, addresses):
        acknowledged: list[tuple[float, dict[str, bytes]]] = []
        with Client(addresses, operation_call_timeout_ms=30_000) as client:
            client.wait_until_safe(60)
            data = client.get_map("data")
            for batch in range(30):
                entries = {f"k{batch}-{i}": VALUE + str(i).encode() for i in range(100)}
                data.put_all(entries)
                acknowledged.append((time.monotonic(), entries))
            time.sleep(2 * interval_ms / 1000)  # the first batches are synced by now
            for batch in range(30, 40):
                entries = {f"k{batch}-{i}": VALUE for i in range(100)}
                data.put_all(entries)
                acknowledged.append((time.monotonic(), entries))
            killed_at = time.monotonic()
            for address in addresses:
                running.kill(address)
        _start_all(running, tmp_path, addresses, *settings)
        for address in addresses:
            running.wait_for_log(address, "member-restored", timeout_s=60)
        with Client(addresses, operation_call_timeout_ms=60_000) as client:
            client.wait_until_safe(90)
            data = client.get_map("data")
            margin_s = 2 * interval_ms / 1000  # the interval, and the time a sync takes, with room
            for written_at, entries in acknowledged:
                held = data.get_all(list(entries))
                if written_at < killed_at - margin_s:
                    assert held == entries, "a write acknowledged well before the interval was lost"
                else:
                    assert all(held.get(key) in (None, value) for key, value in entries.items())


def test_a_cluster_shut_down_comes_back_from_its_directories_with_every_entry(tmp_path) -> None:
    """shardgrid shutdown --cluster, then every member started again on its directory: the same
    members come back with every entry, and the cluster is ACTIVE again (Hazelcast's hot restart
    after a cluster shutdown)."""
    with _three_persistent_members(tmp_path) as (running, addresses):
        entries = {f"k{i}": VALUE + str(i).encode() for i in range(2_000)}
        with Client(addresses, operation_call_timeout_ms=30_000) as client:
            client.wait_until_safe(60)
            client.get_map("data").put_all(entries)
            uuids = {status.address: status.uuid for status in map(client.member_status, addresses)}
            client.wait_until_safe(60)
            client.shutdown_cluster()
        for address in addresses:
            assert running.processes[address].wait(timeout=60) == 0
        _start_all(running, tmp_path, addresses)
        for address in addresses:
            running.wait_for_log(address, "member-restored", timeout_s=60)
        with Client(addresses, operation_call_timeout_ms=60_000) as client:
            client.wait_until_safe(90, members=3)
            assert {status.address: status.uuid for status in map(client.member_status, addresses)} == uuids
            assert client.get_cluster_state().value == "active"
            data = client.get_map("data")
            assert data.get_all(list(entries)) == entries
            data.put("after", VALUE)  # it takes writes again


def test_a_rolling_restart_moves_almost_nothing(tmp_path) -> None:
    """Each member SIGKILLed and started again on its directory in turn, as for an upgrade: the
    cluster is safe with all three after each, and the records moved (migrations and replica
    syncs) stay under 5% of what re-replicating each member's copies would move."""
    with _three_persistent_members(tmp_path) as (running, addresses):
        entries = {f"k{i}": VALUE for i in range(3_000)}
        with Client(addresses, operation_call_timeout_ms=60_000) as client:
            client.wait_until_safe(60)
            client.get_map("data").put_all(entries)
            moved = held = 0
            for address in addresses:
                client.wait_until_safe(90, members=3)
                time.sleep(1.0)  # a member counts its records once a tick
                held += client.member_status(address).entries
                before = {a: _moved(client.member_status(a)) for a in addresses}
                running.kill(address)
                port = address.rpartition(":")[2]
                running.start(address, addresses, 3, "--data-dir", str(tmp_path / f"data-{port}"))
                running.wait_for_log(address, "member-restored", timeout_s=60)
                client.wait_until_safe(90, members=3)
                after = {a: _moved(client.member_status(a)) for a in addresses}
                moved += after[address] + sum(after[a] - before[a] for a in addresses if a != address)
            assert held >= 3_000  # each member holds about two thirds of the 6,000 copies
            assert moved < 0.05 * held, f"{moved} records moved of {held} held"
            assert client.get_map("data").get_all(list(entries)) == entries


def _moved(status) -> int:
    return status.entries_migrated + status.entries_synced


def test_a_torn_tail_is_cut_and_the_member_comes_back_with_what_was_synced(tmp_path) -> None:
    """A power cut in the middle of a write leaves the files ending inside a record (here, the
    first half of a record appended to each): the member cuts the torn tails off, says how many
    bytes it dropped, and comes back with every acknowledged write."""
    (port,) = free_ports(1)
    address = f"127.0.0.1:{port}"
    directory = tmp_path / "data"
    entries = {f"k{i}": VALUE for i in range(500)}
    with LocalCluster(tmp_path, 1, started=0) as running:
        running.start(address, [address], 1, "--data-dir", str(directory))
        running.wait_for_log(address, "leader-changed")
        with Client([address]) as client:
            client.wait_until_safe(60)
            client.get_map("data").put_all(entries)
        running.kill(address)
        torn = 0
        for name in ("raft", "replicas"):
            path = directory / name
            data = path.read_bytes()
            tail = encode_record(RecordKind.REPLICA_RUN, b"\x01" * 300)[:150]  # a record cut short
            path.write_bytes(data + tail)
            torn += len(tail)
        running.start(address, [address], 1, "--data-dir", str(directory))
        running.wait_for_log(address, "member-restored", timeout_s=60)
        assert f"torn_bytes={torn}" in running.log_text(address)
        with Client([address]) as client:
            client.wait_until_safe(60)
            assert client.get_map("data").get_all(list(entries)) == entries


def test_a_member_returning_late_from_its_directory_rejoins_as_a_new_member(tmp_path) -> None:
    """SIGKILLed and kept away past the failure timeout, a member is removed and its partitions
    repaired from their backups; started again on its directory, it learns it was removed, drops
    its stale copies and joins as a new member, and the cluster holds every entry."""
    with _three_persistent_members(tmp_path) as (running, addresses):
        entries = {f"k{i}": VALUE for i in range(1_000)}
        late = addresses[2]
        with Client(addresses, operation_call_timeout_ms=60_000) as client:
            client.wait_until_safe(60)
            client.get_map("data").put_all(entries)
            old_uuid = client.member_status(late).uuid
            running.kill(late)
            deadline = time.monotonic() + 60
            while late in client.cluster_status().members:
                assert time.monotonic() < deadline, "the member that stayed away was not removed"
                time.sleep(0.2)
            client.wait_until_safe(60)
            port = late.rpartition(":")[2]
            running.start(late, addresses, 3, "--data-dir", str(tmp_path / f"data-{port}"))
            client.wait_until_safe(90, members=3)
            assert client.member_status(late).uuid != old_uuid
            assert client.get_map("data").get_all(list(entries)) == entries


def test_a_member_restarted_at_another_address_is_renamed_with_its_data(tmp_path) -> None:
    """SIGKILLed, then started on its directory at another port (a host that took its volume over):
    the member asks its cluster to rename it there, keeps its uuid and its replicas (no partition
    moves, its backups catch up from their sequences), and the cluster holds every entry."""
    with _three_persistent_members(tmp_path) as (running, addresses):
        entries = {f"k{i}": VALUE for i in range(2_000)}
        gone = addresses[2]
        with Client(addresses, operation_call_timeout_ms=60_000) as client:
            client.wait_until_safe(60)
            client.get_map("data").put_all(entries)
            time.sleep(1.0)  # a member counts its records once a tick
            status = client.member_status(gone)
            held, old_uuid = status.entries, status.uuid
            owned = sum(p.owner == gone for p in client.partitions())
            before = {a: _moved(client.member_status(a)) for a in addresses[:2]}
            running.kill(gone)
        port = gone.rpartition(":")[2]
        moved_to = running.start(None, addresses[:2], 3, "--data-dir", str(tmp_path / f"data-{port}"))
        running.wait_for_log(moved_to, "member-moved", timeout_s=60)
        assert "member-moving" in running.log_text(moved_to)
        members = [*addresses[:2], moved_to]
        with Client(members, operation_call_timeout_ms=60_000) as client:
            client.wait_until_safe(90, members=3)
            assert set(client.cluster_status().members) == set(members)
            assert client.member_status(moved_to).uuid == old_uuid
            partitions = client.partitions()
            assert not [p for p in partitions if gone in p.replicas]
            assert sum(p.owner == moved_to for p in partitions) == owned
            after = {a: _moved(client.member_status(a)) for a in addresses[:2]}
            moved = sum(after[a] - before[a] for a in addresses[:2]) + _moved(client.member_status(moved_to))
            assert moved < 0.05 * held, f"{moved} records moved of the {held} it held"
            assert client.get_map("data").get_all(list(entries)) == entries
        # Its member file names it at its new address now: killed and started there again, it
        # comes back as itself, restored, not moving.
        running.kill(moved_to)
        running.start(moved_to, members, 3, "--data-dir", str(tmp_path / f"data-{port}"))
        running.wait_for_log(moved_to, "member-restored", timeout_s=60)
        with Client(members, operation_call_timeout_ms=60_000) as client:
            client.wait_until_safe(90, members=3)
            assert client.member_status(moved_to).uuid == old_uuid
            assert client.get_map("data").get_all(list(entries)) == entries


def _killed_then_two_back(
    tmp_path, policy: str, *settings: str
) -> Iterator[tuple[LocalCluster, list[str], dict[str, bytes], str]]:
    """Three persistent members (partitions 31, one backup unless ``settings`` say otherwise) with
    2,000 entries, every one SIGKILLed at once, and two started again: yields the cluster, the
    addresses, the entries, and the third member's address (away)."""
    hot = ("--set", "hot_restart_timeout_ms=4000", "--set", f"hot_restart_policy={policy}", *settings)
    with _three_persistent_members(tmp_path, *hot) as (running, addresses):
        entries = {f"k{i}": VALUE for i in range(2_000)}
        with Client(addresses, operation_call_timeout_ms=60_000) as client:
            client.wait_until_safe(60)
            client.get_map("data").put_all(entries)
        for address in addresses:
            running.kill(address)
        away = addresses[2]
        _start_all(running, tmp_path, addresses[:2], *hot)
        for address in addresses[:2]:
            running.wait_for_log(address, "member-restored", timeout_s=60)
        yield running, addresses, entries, away


def _wait_for_log_of_any(running: LocalCluster, addresses: list[str], needle: str, timeout_s: float = 60) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for address in addresses:
            if needle in running.log_text(address):
                return address
        time.sleep(0.1)
    raise AssertionError(f"no {needle!r} within {timeout_s} s")


def test_a_hot_restart_waits_for_a_member_that_stays_away_with_full_recovery_only(tmp_path) -> None:
    """Every member SIGKILLed, two back: the leader waits for the third past the failure timeout
    and past hot_restart_timeout_ms (full_recovery_only waits on), says whom it waits for, removes
    nobody and moves nothing; the third comes back as itself and every entry is there."""
    with contextlib.contextmanager(_killed_then_two_back)(tmp_path, "full_recovery_only") as (
        running,
        addresses,
        entries,
        away,
    ):
        back = addresses[:2]
        with Client(back, operation_call_timeout_ms=60_000) as client:
            deadline = time.monotonic() + 30
            while f"waits for {away}" not in (status := client.cluster_status()).unsafe_reason:
                assert time.monotonic() < deadline, status.unsafe_reason
                time.sleep(0.2)
            _wait_for_log_of_any(running, back, "hot-restart-incomplete")
            time.sleep(2.0)  # past failure_timeout_ms (5 s) and hot_restart_timeout_ms (4 s)
            assert away in client.cluster_status().members  # not removed
            uuid = {a: client.member_status(a).uuid for a in back}
        _start_all(running, tmp_path, [away])
        running.wait_for_log(away, "member-restored", timeout_s=60)
        with Client(addresses, operation_call_timeout_ms=60_000) as client:
            client.wait_until_safe(90, members=3)
            assert {a: client.member_status(a).uuid for a in back} == uuid
            assert sum(_moved(client.member_status(a)) for a in addresses) == 0
            assert client.get_map("data").get_all(list(entries)) == entries


def test_a_partial_restart_most_recent_gives_the_member_away_up_and_reports_what_only_it_held_lost(tmp_path) -> None:
    """Without backups, every member SIGKILLed and two back: past hot_restart_timeout_ms the third
    is removed at once and its partitions are reported lost (served again, empty); the rest is
    there. Started again later, it rejoins as a new member, its stale replicas dropped."""
    with contextlib.contextmanager(_killed_then_two_back)(
        tmp_path, "partial_recovery_most_recent", "--set", "backup_count=0"
    ) as (running, addresses, entries, away):
        back = addresses[:2]
        leader = _wait_for_log_of_any(running, back, "hot-restart-incomplete", timeout_s=60)
        running.wait_for_log(leader, "partition-lost")
        with Client(back, operation_call_timeout_ms=60_000) as client:
            client.wait_until_safe(90, members=2)
            held = client.get_map("data").get_all(list(entries))
            assert 0 < len(held) < len(entries)
            assert all(held[key] == entries[key] for key in held)
            old_uuid_gone = away not in client.cluster_status().members
            assert old_uuid_gone
        _start_all(running, tmp_path, [away], "--set", "backup_count=0")
        running.wait_for_log(away, "removed-from-cluster", timeout_s=60)
        with Client(addresses, operation_call_timeout_ms=60_000) as client:
            client.wait_until_safe(90, members=3)
            assert client.get_map("data").get_all(list(entries)) == held  # nothing stale came back


def test_a_partial_restart_most_complete_keeps_what_only_the_member_away_holds_until_it_returns(tmp_path) -> None:
    """Without backups, every member SIGKILLed and two back: past hot_restart_timeout_ms the third
    is handled as a crashed member that holds the last replicas of its partitions: unavailable,
    named in the error, not lost; started again, it serves them whole."""
    with contextlib.contextmanager(_killed_then_two_back)(
        tmp_path, "partial_recovery_most_complete", "--set", "backup_count=0"
    ) as (running, addresses, entries, away):
        back = addresses[:2]
        leader = _wait_for_log_of_any(running, back, "hot-restart-incomplete", timeout_s=60)
        running.wait_for_log(leader, "partitions-unavailable")
        with Client(back, operation_call_timeout_ms=10_000) as client:
            deadline = time.monotonic() + 30
            while not (unavailable := [p for p in client.partitions() if p.unavailable]):
                assert time.monotonic() < deadline, "no partition is unavailable"
                time.sleep(0.2)
            assert all(p.owner == away for p in unavailable)
            with pytest.raises(PartitionUnavailableError, match=away):
                client.get_map("data").get_all(list(entries))
        _start_all(running, tmp_path, [away], "--set", "backup_count=0")
        running.wait_for_log(away, "member-restored", timeout_s=60)
        with Client(addresses, operation_call_timeout_ms=60_000) as client:
            client.wait_until_safe(90, members=3)
            assert client.get_map("data").get_all(list(entries)) == entries
