"""Outside tester: ``_by_partition`` ranges against key-by-key grouping, on a member that owns
some partitions and backs others (WRONG_OWNER redirects, backup reads), with a small pending
bound (OVERLOADED), writes acked by a real backup member, and writes left unacked past the
ack timeout (INDETERMINATE): every effect either member emits must be the same."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardgrid.core import messages as m
from shardgrid.core.effects import ReplyToClient, Send
from shardgrid.core.hashing import hash_to_index, partition_id_of_serialized, partition_ids_of_serialized
from shardgrid.core.inputs import Receive
from shardgrid.core.member import data as data_module
from shardgrid.core.table import PartitionTable
from tests.core.test_member import CONFIG, A, B, C, following, grant_lease, run_ticks, synced

_KEYS = {
    pid: [k for k in (f"adv-{i}".encode() for i in range(400)) if partition_id_of_serialized(k, 4) == pid][:3]
    for pid in range(4)
}
# B owns 0 and 2 (backed by C), backs 1 (owned by C), and has nothing of 3 (A's, backed by C).
_TABLE = PartitionTable.from_lists([[B, C], [C, B], [B, C], [A, C]], [1, 1, 1, 1])


def _key_by_key(partition_ids):
    groups: dict[int, list[int]] = {}
    for index, pid in enumerate(partition_ids):
        groups.setdefault(pid, []).append(index)
    return groups


def _run(requests, read_backup: bool, max_pending: int, deliver_acks: bool):
    config = replace(CONFIG, max_pending_writes=max_pending, read_backup_data=read_backup)
    owner, now = following(B, _TABLE, config=config)
    backup, _ = following(C, _TABLE, config=config)
    for pid in (0, 2):
        synced(backup, pid, now, owner=B, lineage=owner.data.store(pid).lineage)
    # B's copy of C's partition 1, which it may serve reads from (read_backup_data).
    synced(owner, 1, now, owner=C, maps={"m": {_KEYS[1][0]: b"held-0", _KEYS[1][2]: b"held-2"}}, sequence=2)
    now = grant_lease(owner, now)
    log = []
    for call_id, (kind, picked, order, previous) in enumerate(requests, start=1):
        if order == "sorted":
            picked = sorted(picked, key=lambda pick: pick[0])
        elif order == "reversed":
            picked = sorted(picked, key=lambda pick: -pick[0])
        pids = tuple(pid for pid, _ in picked)
        keys = tuple(_KEYS[pid][which] for pid, which in picked)
        values = tuple(b"v%d-%d" % (call_id, i) for i in range(len(keys))) if kind in (m.PUT, m.PUT_IF_ABSENT) else ()
        now += 1
        effects = owner.handle(
            now,
            Receive(
                "c",
                None,
                None,
                m.MapRequest(
                    call_id=call_id,
                    kind=kind,
                    map_name="m",
                    partition_ids=pids,
                    keys=keys,
                    values=values,
                    previous=previous,
                ),
            ),
        )
        log.append([repr(e) for e in effects if isinstance(e, ReplyToClient | Send)])
        if deliver_acks and call_id % 2:
            for effect in effects:
                if isinstance(effect, Send) and effect.target == C:
                    for back in backup.handle(now, Receive(B.address, B, C.uuid, effect.message)):
                        if isinstance(back, Send) and back.target == B:
                            log.append(
                                [repr(e) for e in owner.handle(now, Receive(C.address, C, B.uuid, back.message))]
                            )
    effects, now = run_ticks(owner, now, now + CONFIG.backup_ack_timeout_ms + 1_000)
    log.append([repr(e) for e in effects if isinstance(e, ReplyToClient)])
    stores = {pid: (repr(d.maps), d.sequence) for pid, d in owner.data.stores.items()}
    backup_stores = {pid: (repr(d.maps), d.sequence) for pid, d in backup.data.stores.items()}
    return log, stores, backup_stores


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # 400 when written
@given(
    st.lists(
        st.tuples(
            st.sampled_from([m.PUT, m.GET, m.REMOVE, m.PUT_IF_ABSENT]),
            st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2)), min_size=1, max_size=12),
            st.sampled_from(["sorted", "sorted", "drawn", "reversed"]),
            st.booleans(),
        ),
        min_size=1,
        max_size=6,
    ),
    st.booleans(),
    st.sampled_from([3, 8, 10_000]),
    st.booleans(),
)
def test_ranges_match_key_by_key_with_refusals_overload_acks_and_timeouts(requests, read_backup, max_pending, acks):
    outcomes = []
    for grouping in (None, _key_by_key):
        with pytest.MonkeyPatch.context() as patch:
            if grouping is not None:
                patch.setattr(data_module, "_by_partition", grouping)
            outcomes.append(_run(requests, read_backup, max_pending, acks))
    assert outcomes[0] == outcomes[1]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=12), max_size=40), st.integers(1, 5000))
def test_partition_ids_of_serialized_matches_one_by_one(keys, count):
    assert partition_ids_of_serialized(keys, count) == [partition_id_of_serialized(k, count) for k in keys]


def test_partition_ids_of_serialized_folds_int32_min_to_zero():
    import mmh3

    from shardgrid.core.hashing import INT32_MIN, MURMUR_SEED

    found = b"`\x0e'e"  # murmur3 inverted: this 4-byte key hashes to -2**31 with shardgrid's seed
    assert mmh3.hash(found, MURMUR_SEED) == INT32_MIN
    for count in (1, 2, 3, 4, 271, 1000):
        assert partition_ids_of_serialized([b"x", found, found], count)[1:] == [0, 0]
        assert partition_id_of_serialized(found, count) == hash_to_index(INT32_MIN, count) == 0
