"""Member processes on 127.0.0.1 and the client against them: the data path, a SIGKILL, a graceful
leave, and hostile connections. Every process is started and ended by PID (``LocalCluster``)."""

from __future__ import annotations

import importlib.util
import signal
import socket
import struct
import subprocess
import sys
import time

import pytest

from shardgrid.client import (
    AuthenticationError,
    BytesSerializer,
    Client,
    ClusterUnavailableError,
    OperationRejectedError,
)
from shardgrid.core import codec
from shardgrid.core import messages as m

from .local_cluster import LocalCluster

CALL_TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(tmp_path_factory.mktemp("three"), 3) as running:
        running.wait_formed()
        yield running


def test_map_operations_round_trip(cluster):
    with Client(cluster.addresses[:1], operation_call_timeout_ms=CALL_TIMEOUT_MS) as client:
        users = client.get_map("users")
        assert users.put("ada", {"born": 1815}) is None
        assert users.put("ada", {"born": 1816}) == {"born": 1815}
        assert users.get("ada") == {"born": 1816}
        users["alan"] = [1, 2]
        assert users["alan"] == [1, 2]
        assert "alan" in users
        assert "nobody" not in users
        with pytest.raises(KeyError):
            users["nobody"]
        entries = {f"user-{i}": i for i in range(5_000)}
        users.put_all(entries)
        assert users.get_all([*entries, "missing"]) == entries
        assert len(users) == 5_002
        assert set(users.keys()) == {*entries, "ada", "alan"}
        assert dict(users.entries())["user-42"] == 42
        assert users.remove("ada") == {"born": 1816}
        assert users.get("ada") is None
        del users["alan"]
        with pytest.raises(KeyError):
            del users["alan"]
        assert users.put_if_absent("grace", 1906) is None
        assert users.put_if_absent("grace", 1907) == 1906
        users.put_all_if_absent({"grace": 0, "linus": 1969})
        assert users.get_all(["grace", "linus"]) == {"grace": 1906, "linus": 1969}
        users.clear()
        assert users.size() == 0


def test_a_member_runs_on_uvloop_when_it_is_installed(cluster):
    uvloop_installed = importlib.util.find_spec("uvloop") is not None
    expected = "loop=uvloop" if uvloop_installed else "loop=asyncio"
    assert expected in cluster.log_text(cluster.addresses[0])


def test_a_request_over_a_limit_is_rejected_and_the_member_goes_on(cluster):
    with Client(cluster.addresses[:1], operation_call_timeout_ms=CALL_TIMEOUT_MS) as client:
        blobs = client.get_map("blobs", key_type=bytes)
        with pytest.raises(OperationRejectedError, match="at most"):
            blobs.set(b"k" * (64 * 1024 + 1), 1)
        blobs.set(b"k", 1)
        assert blobs.get(b"k") == 1


def test_a_get_all_over_the_answer_bound_comes_back_whole(cluster):
    """A member answers at most 16 MiB of values to one get (the rest OVERLOADED): the client
    fetches the rest in the rounds that follow."""
    with Client(cluster.addresses[:1], operation_call_timeout_ms=CALL_TIMEOUT_MS) as client:
        blobs = client.get_map("big-values", value_serializer=BytesSerializer())
        values = {f"blob-{i}": bytes([i]) * (1024 * 1024) for i in range(24)}
        blobs.put_all(values)
        assert blobs.get_all(list(values)) == values


def test_wrong_cluster_name_or_secret_is_refused(cluster):
    with pytest.raises(AuthenticationError, match="not this member's cluster"):
        Client(cluster.addresses[:1], cluster_name="other", connect_timeout_ms=5_000)
    with pytest.raises(AuthenticationError, match="secret"):
        Client(cluster.addresses[:1], cluster_secret="guess", connect_timeout_ms=5_000)


def _raw(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    return sock


def _closed_by_peer(sock: socket.socket, timeout_s: float = 10) -> bool:
    sock.settimeout(timeout_s)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    finally:
        sock.close()


def test_hostile_connections_are_closed_and_the_member_keeps_serving(cluster):
    address = cluster.addresses[0]
    garbage = _raw(address)
    garbage.sendall(b"\x00\x00\x00\x05hello")  # a frame whose body is not msgpack
    assert _closed_by_peer(garbage)
    oversized = _raw(address)
    oversized.sendall(struct.pack(">I", 1 << 30))  # a length over the limit: refused before reading it
    assert _closed_by_peer(oversized)
    early = _raw(address)
    early.sendall(codec.encode(m.TableRequest()))  # a request before the handshake
    assert _closed_by_peer(early)
    silent = _raw(address)  # says nothing: closed at the handshake timeout (5 s by default)
    started = time.monotonic()
    assert _closed_by_peer(silent, timeout_s=15)
    assert time.monotonic() - started < 12
    log = cluster.log_text(address)
    assert "undecodable frame" in log or "malformed" in log
    assert "over the" in log
    assert "TableRequest is not taken on this connection" in log  # refused from its code, undecoded
    assert "no handshake within" in log
    with Client([address], operation_call_timeout_ms=CALL_TIMEOUT_MS) as client:
        client.get_map("after-hostile").set("k", "v")
        assert client.get_map("after-hostile").get("k") == "v"


def test_sigkill_of_a_member_loses_no_acknowledged_write(tmp_path):
    with LocalCluster(tmp_path, 3) as running:
        running.wait_formed()
        victim = running.addresses[1]
        acknowledged: dict[str, int] = {}
        with Client([running.addresses[0]], operation_call_timeout_ms=CALL_TIMEOUT_MS) as client:
            data = client.get_map("data")
            for round_ in range(60):
                if round_ == 20:
                    running.kill(victim)
                batch = {f"k-{round_}-{i}": round_ * 1000 + i for i in range(200)}
                data.put_all(batch)
                acknowledged.update(batch)
                data.set(f"single-{round_}", round_)
                acknowledged[f"single-{round_}"] = round_
            running.wait_for_log(running.addresses[0], f"member-removed member={victim}", timeout_s=60)
            found = data.get_all(list(acknowledged))
            lost = [key for key, value in acknowledged.items() if found.get(key) != value]
            assert lost == []
            assert data.size() == len(acknowledged)


def test_sigterm_leaves_gracefully_and_keeps_every_entry(tmp_path):
    with LocalCluster(tmp_path, 3) as running:
        running.wait_formed()
        with Client([running.addresses[0]], operation_call_timeout_ms=CALL_TIMEOUT_MS) as client:
            data = client.get_map("data")
            entries = {f"k{i}": i for i in range(3_000)}
            data.put_all(entries)
            leaving = running.addresses[2]
            assert running.terminate(leaving) == 0
            assert "left the cluster after handing its replicas over" in running.log_text(leaving)
            assert data.get_all(list(entries)) == entries


def test_sigterm_to_every_member_at_once_stops_them_all_within_seconds(tmp_path):
    """Found while benchmarking: three members given SIGTERM together were all recorded leaving and
    waited for each other until graceful_shutdown_timeout_ms (10 minutes)."""
    with LocalCluster(tmp_path, 3) as running:
        running.wait_formed()
        with Client([running.addresses[0]], operation_call_timeout_ms=CALL_TIMEOUT_MS) as client:
            client.get_map("data").put_all({f"k{i}": i for i in range(1_000)})
        processes = [running.processes[address] for address in running.addresses]
        for process in processes:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        codes = [process.wait(timeout=max(0.1, deadline - time.monotonic())) for process in processes]
        assert codes == [0, 0, 0]
        for address in running.addresses:
            assert "member-exit" in running.log_text(address)


def test_an_unreachable_cluster_is_a_clear_error(tmp_path):
    with pytest.raises(ClusterUnavailableError, match="no member could be reached"):
        Client(["127.0.0.1:1"], connect_timeout_ms=1_000, operation_call_timeout_ms=2_000)


def test_python_dash_m_shardgrid_runs_the_command():
    done = subprocess.run([sys.executable, "-m", "shardgrid", "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert "shardgrid" in done.stdout
