"""``shardgrid backup`` and ``shardgrid restore`` as a user runs them: a running cluster copied
while a client writes to it, the copy written into a new cluster with another partition count,
each record keeping the time it had left to live; a used directory, a map that holds entries and
a damaged backup are refused, the last before anything is written."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from shardgrid.client import Client
from tests.runtime.local_cluster import LocalCluster

VALUE = b"v" * 100


def _shardgrid(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardgrid", *args], capture_output=True, text=True, timeout=180)


def _write_while(client: Client, stop: threading.Event, acknowledged: dict[str, int]) -> None:
    """Overwrite the keys ``hot-0`` .. ``hot-99`` with rising numbers until ``stop``."""
    hot = client.get_map("data")
    round_ = 0
    while not stop.is_set():
        round_ += 1
        hot.put_all({f"hot-{i}": round_ for i in range(100)})
        acknowledged.update({f"hot-{i}": round_ for i in range(100)})


def test_a_backup_of_a_running_cluster_restores_into_a_new_cluster(tmp_path: Path) -> None:
    backup = tmp_path / "backup"
    entries = {f"k{i}": i for i in range(5_000)}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with LocalCluster(tmp_path / "a", 3, "--partition-count", "31") as first:
        first.wait_formed()
        members = ",".join(first.addresses)
        with Client(first.addresses, operation_call_timeout_ms=30_000) as client:
            client.wait_until_safe(60)
            client.get_map("data").put_all(entries)
            client.get_map("sessions").put_all({f"s{i}": i for i in range(100)}, ttl=120)
            client.get_map("brief").put_all({f"b{i}": i for i in range(50)}, ttl=3)
            brief_put = time.monotonic()
            before: dict[str, int] = {}
            stop = threading.Event()
            writer = threading.Thread(target=_write_while, args=(client, stop, before))
            writer.start()
            try:
                time.sleep(0.3)
                acknowledged_before = dict(before)  # every hot key's value when the backup began
                taken = _shardgrid("backup", "--to", str(backup), "--members", members, "--json")
            finally:
                stop.set()
                writer.join()
            assert taken.returncode == 0, taken.stderr
            final = dict(before)
        manifest = json.loads(taken.stdout)
        assert {m["name"] for m in manifest["maps"]} == {"data", "sessions", "brief"}
        assert manifest["partition_count"] == 31
        assert "partitions" in taken.stderr  # progress, on stderr
        again = _shardgrid("backup", "--to", str(backup), "--members", members)
        assert again.returncode == 1
        assert "not an empty directory" in again.stderr
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".backup.partial")]
    assert _shardgrid("restore", "--from", str(backup), "--check").returncode == 0
    time.sleep(max(0.0, brief_put + 3.2 - time.monotonic()))  # the brief map's entries expire
    with LocalCluster(tmp_path / "b", 2, "--partition-count", "17") as second:
        second.wait_formed()
        members = ",".join(second.addresses)
        restored = _shardgrid("restore", "--from", str(backup), "--members", members)
        assert restored.returncode == 0, restored.stderr
        assert "50 expired" in restored.stdout
        with Client(second.addresses, operation_call_timeout_ms=30_000) as client:
            data = client.get_map("data")
            assert data.get_all(list(entries)) == entries
            hot = data.get_all([f"hot-{i}" for i in range(100)])
            for key, value in hot.items():  # each key as one write left it, between the two points
                assert acknowledged_before.get(key, 0) <= value <= final[key], key
            sessions = client.get_map("sessions")
            assert sessions.get_all([f"s{i}" for i in range(100)]) == {f"s{i}": i for i in range(100)}
            view = sessions.get_entry_view("s1")
            assert view is not None
            assert 100 < view.ttl_ms / 1000 <= 120  # the time it had left, not a new TTL
            assert client.get_map("brief").size() == 0
            refused = _shardgrid("restore", "--from", str(backup), "--members", members)
            assert refused.returncode == 1
            assert "map 'data' holds 5100 entries in this cluster" in refused.stderr, refused.stderr
            # A damaged backup is refused whole, before anything is written.
            document = json.loads((backup / "manifest.json").read_text())
            sessions_file = backup / next(m["file"] for m in document["maps"] if m["name"] == "sessions")
            damaged = bytearray(sessions_file.read_bytes())
            damaged[len(damaged) // 2] ^= 0x01
            sessions_file.write_bytes(bytes(damaged))
            sessions.clear()
            checked = _shardgrid("restore", "--from", str(backup), "--check")
            assert checked.returncode == 1
            assert sessions_file.name in checked.stderr
            merged = _shardgrid("restore", "--from", str(backup), "--members", members, "--merge")
            assert merged.returncode == 1
            assert sessions_file.name in merged.stderr
            assert sessions.size() == 0


def test_a_backup_interrupted_gives_the_cluster_its_state_back_and_leaves_no_directory(tmp_path: Path) -> None:
    """Found by an outside tester: a backup with --pause-writes interrupted (Ctrl-C, SIGTERM) left
    the cluster PASSIVE, refusing writes, and its unfinished directory behind."""
    (tmp_path / "a").mkdir()
    with LocalCluster(tmp_path / "a", 3, "--partition-count", "31") as running:
        running.wait_formed()
        with Client(running.addresses, operation_call_timeout_ms=30_000) as client:
            client.wait_until_safe(60)
            client.get_map("data").put_all({f"k{i}": i for i in range(1_000)})
            leader = client.cluster_status().leader
        held = next(a for a in running.addresses if a != leader)
        running.processes[held].send_signal(signal.SIGSTOP)  # its partitions hold the copy up
        try:
            command = ["backup", "--to", str(tmp_path / "b"), "--map", "data", "--pause-writes", "--timeout", "60"]
            backup = subprocess.Popen(
                [sys.executable, "-m", "shardgrid", *command, "--members", leader],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            deadline = time.monotonic() + 30
            while _state(leader) != "passive":
                assert time.monotonic() < deadline, "the backup never paused the writes"
                time.sleep(0.2)
            time.sleep(1.0)
            backup.send_signal(signal.SIGTERM)
            _, err = backup.communicate(timeout=60)
            assert backup.returncode == 1
            assert "interrupted" in err
        finally:
            running.processes[held].send_signal(signal.SIGCONT)
        assert _state(leader) == "active"
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".b.partial") or p.name == "b"]


def _state(address: str) -> str:
    shown = _shardgrid("state", "get", "--members", address)
    return shown.stdout.strip().split()[-1]
