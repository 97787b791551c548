"""Outside tester: a request's keys in any order against the same keys with each partition's side
by side (the order the engine's ``split_by_partition`` brings them into), on a member that owns
some partitions and backs others (WRONG_OWNER redirects, backup reads), with a small pending
bound (OVERLOADED), writes acked by a real backup member, and writes left unacked past the ack
timeout (INDETERMINATE): every effect either member emits must be the same, each key's answer
read at its own place in its request."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardgrid.core import messages as m
from shardgrid.core.effects import ReplyToClient, Send
from shardgrid.core.hashing import hash_to_index, partition_id_of_serialized, partition_ids_of_serialized
from shardgrid.core.inputs import Receive
from shardgrid.core.table import PartitionTable
from tests.core.test_member import CONFIG, A, B, C, following, grant_lease, run_ticks, synced
from tests.wire import codes, map_request, values

_KEYS = {
    pid: [k for k in (f"adv-{i}".encode() for i in range(400)) if partition_id_of_serialized(k, 4) == pid][:3]
    for pid in range(4)
}
# B owns 0 and 2 (backed by C), backs 1 (owned by C), and has nothing of 3 (A's, backed by C).
_TABLE = PartitionTable.from_lists([[B, C], [C, B], [B, C], [A, C]], [1, 1, 1, 1])


def _side_by_side(picked: list[tuple[int, int]]) -> list[int]:
    """The positions of ``picked`` with each partition's keys brought together, in the order the
    partitions first come (stable)."""
    first = {pid: rank for rank, pid in reversed(list(enumerate(pid for pid, _ in picked)))}
    return sorted(range(len(picked)), key=lambda position: first[picked[position][0]])


def _seen(effects, orders: dict[int, list[int]]) -> list[str]:
    """The effects, each answer's codes and values read at their keys' places in the request."""
    out = []
    for effect in effects:
        if isinstance(effect, ReplyToClient) and isinstance(effect.message, m.MapReply):
            reply = effect.message
            order = orders[reply.call_id]
            answered, got = codes(reply), values(reply)
            per_key = sorted((order[i], answered[i], got[i] if got else None) for i in range(len(answered)))
            out.append(repr((reply.call_id, per_key, reply.redirects, reply.retry_after_ms, reply.reason)))
        elif isinstance(effect, ReplyToClient | Send):
            out.append(repr(effect))
    return out


def _run(requests, read_backup: bool, max_pending: int, deliver_acks: bool, grouped: bool):
    config = replace(CONFIG, max_pending_writes=max_pending, read_backup_data=read_backup)
    owner, now = following(B, _TABLE, config=config)
    backup, _ = following(C, _TABLE, config=config)
    for pid in (0, 2):
        synced(backup, pid, now, owner=B, lineage=owner.data.store(pid).lineage)
    # B's copy of C's partition 1, which it may serve reads from (read_backup_data).
    synced(owner, 1, now, owner=C, maps={"m": {_KEYS[1][0]: b"held-0", _KEYS[1][2]: b"held-2"}}, sequence=2)
    now = grant_lease(owner, now)
    log = []
    orders: dict[int, list[int]] = {}
    for call_id, (kind, picked, drawn_order, previous) in enumerate(requests, start=1):
        if drawn_order == "sorted":
            picked = sorted(picked, key=lambda pick: pick[0])
        elif drawn_order == "reversed":
            picked = sorted(picked, key=lambda pick: -pick[0])
        order = orders[call_id] = _side_by_side(picked) if grouped else list(range(len(picked)))
        keys = tuple(_KEYS[picked[p][0]][picked[p][1]] for p in order)
        written = tuple(b"v%d-%d" % (call_id, p) for p in order) if kind in (m.PUT, m.PUT_IF_ABSENT) else ()
        now += 1
        effects = owner.handle(
            now,
            Receive(
                "c",
                None,
                None,
                map_request(
                    call_id=call_id,
                    kind=kind,
                    map_name="m",
                    keys=keys,
                    values=written,
                    previous=previous,
                ),
            ),
        )
        log.append(_seen(effects, orders))
        if deliver_acks and call_id % 2:
            for effect in effects:
                if isinstance(effect, Send) and effect.target == C:
                    for back in backup.handle(now, Receive(B.address, B, C.uuid, effect.message)):
                        if isinstance(back, Send) and back.target == B:
                            log.append(_seen(owner.handle(now, Receive(C.address, C, B.uuid, back.message)), orders))
    effects, now = run_ticks(owner, now, now + CONFIG.backup_ack_timeout_ms + 1_000)
    log.append(_seen([e for e in effects if isinstance(e, ReplyToClient)], orders))
    stores = {pid: owner.data.view(pid) for pid in owner.data.held_partitions()}
    backup_stores = {pid: backup.data.view(pid) for pid in backup.data.held_partitions()}
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
def test_any_order_matches_side_by_side_with_refusals_overload_acks_and_timeouts(
    requests, read_backup, max_pending, acks
):
    outcomes = [_run(requests, read_backup, max_pending, acks, grouped) for grouped in (False, True)]
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
