"""The outside tester's three reproductions, on real member processes in network namespaces with
real partitions (nftables drops between namespaces): a write applied after its call timed out,
a write applied twice over a newer one, and a partition's data thrown away by a network split.
Each failed on the code before these were fixed (see the commit that added this file)."""

from __future__ import annotations

import sys
import time

import pytest

from .lab import Actor, Lab, unavailable_reason

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=unavailable_reason() or "")

PORT = 5701
FAST_FORMING = ("--set", "bootstrap_after_ms=300", "--set", "join_retry_ms=100")


def start_members(lab: Lab, hosts: list[str], *settings: str, backups: int = 1) -> list[str]:
    addresses = [f"{lab.addresses[h]}:{PORT}" for h in hosts]
    for host in hosts:
        argv = [sys.executable, "-m", "shardgrid", "member", "start", "--host", lab.addresses[host]]
        argv += ["--port", str(PORT), "--join", ",".join(addresses), "--initial-cluster-size", str(len(hosts))]
        argv += ["--backup-count", str(backups), "--partition-count", "31", *FAST_FORMING, *settings]
        lab.start(host, host, argv)
    deadline = time.monotonic() + 60
    for host in hosts:
        while "leader-changed" not in lab.log_text(host):
            assert lab.processes[host].poll() is None, f"{host} exited:\n{lab.log_text(host)[-3000:]}"
            assert time.monotonic() < deadline, f"{host} saw no leader:\n{lab.log_text(host)[-3000:]}"
            time.sleep(0.1)
    return addresses


def wait_until_written(actor: Actor, key: str, value: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        answer = actor.call("put", map="m", key=key, value=value)
        if answer["ok"]:
            return
        assert time.monotonic() < deadline, answer
        time.sleep(0.5)


def key_owned_by(actor: Actor, hosts: set[str], lab: Lab) -> str:
    """A key whose owner is on one of ``hosts``."""
    wanted = {f"{lab.addresses[h]}:{PORT}" for h in hosts}
    for i in range(200):
        answer = actor.call("owner", map="m", key=f"k{i}")
        if answer["ok"] and answer["result"] in wanted:
            return f"k{i}"
    raise AssertionError(f"no key owned by {sorted(wanted)}")


def stale_reads(reads: list[list], newest: str, older: set[str]) -> list[list]:
    """Reads after the first that returned ``newest`` that returned one of ``older``."""
    seen = False
    wrong = []
    for read in reads:
        seen = seen or read[1] == newest
        if seen and read[1] in older:
            wrong.append(read)
    return wrong


def test_a_write_whose_call_timed_out_is_not_applied_after_the_heal(tmp_path):
    """Three members, one backup. Client A, with member 3, writes v1 to a key of members 1 and 2;
    member 3 and A are cut off; A writes v2 and its call times out; the heal; client B writes v3
    and reads the key every 250 ms. Before: the kernel kept A's unanswered request (the client
    closed its connection gracefully) and delivered it after the heal: B read v3, then v2."""
    with Lab(tmp_path, ["m1", "m2", "m3", "a", "b"]) as lab:
        # A failure timeout past the cut: member 3 stays a member, and the key's owner with it.
        addresses = start_members(lab, ["m1", "m2", "m3"], "--set", "failure_timeout_ms=20000")
        a = Actor(lab, "a", "a", [addresses[2]], operation_call_timeout_ms=3_000, attempt_timeout_ms=1_000)
        b = Actor(lab, "b", "b", addresses[:2], operation_call_timeout_ms=30_000, attempt_timeout_ms=2_000)
        key = key_owned_by(a, {"m1", "m2"}, lab)
        wait_until_written(a, key, "v1")
        lab.cut(["m3", "a"], ["m1", "m2", "b"])
        late = a.call("put", map="m", key=key, value="v2", timeout_s=30)
        assert not late["ok"], late  # timed out: the owner is out of reach
        time.sleep(max(0.0, 9 - (time.time() - late["start"])))  # cut for 9 s since v2 was sent
        lab.heal()
        wait_until_written(b, key, "v3")
        reads = b.call("reads", map="m", key=key, every_ms=250, for_ms=20_000, timeout_s=60)["result"]
        assert reads
        assert reads[0][1] == "v3", reads[:3]
        assert not stale_reads(reads, "v3", {"v1", "v2"}), stale_reads(reads, "v3", {"v1", "v2"})[:5]
        assert b.call("get", map="m", key=key)["result"] == "v3"


def test_a_write_acknowledged_through_a_retry_is_not_applied_again_later(tmp_path):
    """Client A's link to the key's owner is cut: its first attempt of v2 waits unanswered, it
    gives that connection up and, after the heal, its retry on a new one is acknowledged; client B
    then writes v3 (acknowledged) and reads the key. Before: A's first attempt, held by the kernel,
    arrived after and was applied again, over v3."""
    with Lab(tmp_path, ["m1", "m2", "m3", "a", "b"]) as lab:
        addresses = start_members(lab, ["m1", "m2", "m3"], "--set", "failure_timeout_ms=20000")
        a = Actor(lab, "a", "a", addresses, operation_call_timeout_ms=60_000, attempt_timeout_ms=2_000)
        b = Actor(lab, "b", "b", addresses, operation_call_timeout_ms=30_000, attempt_timeout_ms=2_000)
        key = key_owned_by(a, {"m1"}, lab)
        wait_until_written(a, key, "v1")
        lab.cut(["a"], ["m1"])
        retried = a.send("put", map="m", key=key, value="v2")
        time.sleep(9)
        lab.heal()
        answer = a.wait(retried, timeout_s=90)
        assert answer["ok"], answer  # acknowledged through a retry
        wait_until_written(b, key, "v3")
        reads = b.call("reads", map="m", key=key, every_ms=250, for_ms=20_000, timeout_s=60)["result"]
        assert reads
        assert reads[0][1] == "v3", reads[:3]
        assert not stale_reads(reads, "v3", {"v1", "v2"}), stale_reads(reads, "v3", {"v1", "v2"})[:5]


def test_members_cut_off_past_the_backups_keep_their_partitions(tmp_path):
    """Five members, one backup; two are cut off past the failure timeout. Before: the majority
    declared every partition whose two replicas were on them lost, served it empty, and the
    cut-off members dropped what they held when they came back. Now such a partition is
    unavailable (reads refused, naming it) while they are away, and comes back whole."""
    hosts = ["m1", "m2", "m3", "m4", "m5"]
    with Lab(tmp_path, [*hosts, "c"]) as lab:
        addresses = start_members(lab, hosts)
        c = Actor(lab, "c", "c", addresses[:3], operation_call_timeout_ms=10_000, attempt_timeout_ms=2_000)
        keys = [f"k{i}" for i in range(120)]
        for key in keys:
            wait_until_written(c, key, f"value-of-{key}")
        lab.cut(["m4", "m5"], ["m1", "m2", "m3", "c"])
        time.sleep(15)  # the failure timeout (5 s) and then some: the majority acts on it
        during = {key: c.call("get", map="m", key=key, timeout_s=60) for key in keys}
        lab.heal()
        empty = [key for key, answer in during.items() if answer["ok"] and answer["result"] is None]
        assert not empty, f"read empty while cut off: {empty[:10]}"
        refused = {answer["error"] for answer in during.values() if not answer["ok"]}
        assert refused <= {"PartitionUnavailableError"}, refused
        deadline = time.monotonic() + 90
        for key in keys:
            while True:
                answer = c.call("get", map="m", key=key, timeout_s=60)
                if answer["ok"]:
                    assert answer["result"] == f"value-of-{key}", (key, answer)
                    break
                assert time.monotonic() < deadline, (key, answer)
                time.sleep(0.5)
