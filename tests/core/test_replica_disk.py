"""The replicas' file: what a journal writes after each step reads back into the copies it was
written from, a step torn off leaves the copies as before it, and bytes no member wrote are
refused, naming the record."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardgrid.core.disk_records import COMPACT_EARLY_ABOVE_BYTES, RecordKind, encode_record, scan_records
from shardgrid.core.errors import CorruptDisk
from shardgrid.core.messages import EMPTY_COLUMN, PUT, REMOVE, Column, WriteRun
from shardgrid.core.replica_disk import STEP_END, ReplicaJournal, images, load_replicas
from shardgrid.core.store import PartitionData


def _run(pid: int, data: PartitionData, kind: object, keys: list[bytes], map_name: str = "m") -> WriteRun:
    values = Column.of([b"v" + key for key in keys]) if kind is PUT else EMPTY_COLUMN
    return WriteRun(
        partition_id=pid,
        lineage=data.lineage,
        first_sequence=data.sequence + 1,
        kind=kind,  # type: ignore[arg-type]
        map_name=map_name,
        keys=Column.of(keys),
        values=values,
        written_ms=1_000,
    )


def _load(data: bytes) -> dict[int, PartitionData]:
    return load_replicas(scan_records(data), hash_seed=0, max_idle_ms={}).copies


def _views(copies: dict[int, PartitionData]) -> dict[int, object]:
    return {
        pid: (v.sequence, v.lineage, v.entries, v.versions, v.copy_index)
        for pid, data in copies.items()
        if (v := data.view())
    }


Op = tuple[str, int, int]  # (what, partition, a number)
OPS = st.tuples(
    st.sampled_from(["put", "remove", "image", "drop", "header", "step"]), st.integers(0, 3), st.integers(0, 9)
)


@settings(max_examples=60, deadline=None)
@given(st.lists(OPS, max_size=60))
def test_what_a_journal_writes_reads_back_into_the_copies_it_was_written_from(ops: list[Op]) -> None:
    stores: dict[int, PartitionData] = {}
    journal = ReplicaJournal(fresh=True)
    file = b""
    first = True

    def take(number: int = 0) -> None:
        """A step's take, on a disk with ``number`` * 40 bytes free (0: not known), short of room
        when ``number`` is odd: a rewrite (after the fresh file's first) only when it fits, and the
        file always the size the journal counts; a rewrite's live count is exact."""
        nonlocal file, first
        room = number * 40 if number else None
        taken = journal.take(stores, 0, room, short=number % 2 == 1)
        if taken is not None:
            file = taken[0] if taken[1] else file + taken[0]
            if taken[1]:
                assert first or room is None or len(taken[0]) <= room
                assert journal.live_bytes + len(STEP_END) == len(images(sorted(stores.items()), 0) + STEP_END)
            first = False
        assert journal.file_bytes == len(file)

    for what, pid, number in ops:
        data = stores.get(pid)
        if what in ("put", "remove"):
            if data is None:
                data = stores[pid] = PartitionData()
                journal.header(pid)
            keys = [f"k{(number + i) % 7}".encode() for i in range(1 + number % 3)]
            run = _run(pid, data, PUT if what == "put" else REMOVE, keys)
            data.apply_run(run, 0, 0)
            journal.run(run, 0)
        elif what == "image":
            stores[pid] = PartitionData.holding({"m": {b"x%d" % number: b"y"}}, lineage=f"L{number}", sequence=number)
            journal.image(pid)
        elif what == "drop" and data is not None:
            del stores[pid]
            journal.image(pid)
        elif what == "header" and data is not None:
            data.lineage = f"promoted{number}"
            data.copy_index = 0
            journal.header(pid)
        elif what == "step":
            take(number)
    take()
    assert _views(_load(file)) == _views(stores)


def test_a_step_torn_off_leaves_the_copies_as_before_it_and_is_cut_before_the_next() -> None:
    stores = {1: PartitionData()}
    journal = ReplicaJournal(fresh=True)
    file = journal.take(stores, 0)[0]  # type: ignore[index]
    run = _run(1, stores[1], PUT, [b"a", b"b"])
    stores[1].apply_run(run, 0, 0)
    journal.run(run, 0)
    step = journal.take(stores, 0)[0]  # type: ignore[index]
    torn = file + step[: -len(STEP_END)]  # every record of the step but its end
    held = load_replicas(scan_records(torn), hash_seed=0, max_idle_ms={})
    assert held.copies[1].sequence == 0
    assert held.whole_bytes == len(file)


def test_a_run_that_does_not_follow_its_copy_is_corrupt() -> None:
    data = PartitionData()
    journal = ReplicaJournal(fresh=False)
    run = _run(1, data, PUT, [b"a"])
    journal.run(run, 0)
    journal.run(run, 0)  # the same sequence twice: no member applies a write twice
    with pytest.raises(CorruptDisk, match="record 1: a run of partition 1 from sequence 1 after 1"):
        _load(journal.take({1: data}, 0)[0])  # type: ignore[index]


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (encode_record(RecordKind.RAFT_WRITE, b"x") + STEP_END, "record 0 is of kind 1, not a replica's"),
        (encode_record(RecordKind.REPLICA_RUN, b"\x93\x01") + STEP_END, "record 0 is not one a member wrote"),
        (encode_record(RecordKind.REPLICA_STEP_END, b"x"), "a step's end, carries 1 bytes"),
    ],
)
def test_records_no_member_wrote_are_refused_naming_the_record(data: bytes, match: str) -> None:
    with pytest.raises(CorruptDisk, match=match):
        _load(data)


def test_an_image_cut_by_a_step_end_is_corrupt() -> None:
    stores = {2: PartitionData.holding({"m": {b"k": b"v"}})}
    whole = ReplicaJournal(fresh=True).take(stores, 0)[0]  # type: ignore[index]
    cut = whole[: -len(STEP_END)]
    pages = scan_records(cut).records
    header_only = encode_record(*pages[0]) + STEP_END  # the image's header, then at once a step's end
    with pytest.raises(CorruptDisk, match="ends a step inside the image of partition 2"):
        _load(header_only)


def _overwritten(times: int) -> tuple[ReplicaJournal, dict[int, PartitionData], bytes]:
    """A journal whose one copy had its ten keys written ``times`` times over, a step each."""
    stores = {0: PartitionData()}
    journal = ReplicaJournal(fresh=True)
    file = journal.take(stores, 0)[0]  # type: ignore[index]
    for n in range(times):
        run = _run(0, stores[0], PUT, [b"k%d" % (n % 10)])
        stores[0].apply_run(run, 0, 0)
        journal.run(run, 0)
        file += journal.take(stores, 0)[0]  # type: ignore[index]
    return journal, stores, file


def test_a_member_short_of_disk_rewrites_its_file_early_when_that_frees_most_of_it() -> None:
    journal, stores, file = _overwritten(400)
    assert len(file) > 2 * len(images(sorted(stores.items()), 0)) + COMPACT_EARLY_ABOVE_BYTES
    run = _run(0, stores[0], PUT, [b"k0"])
    stores[0].apply_run(run, 0, 0)
    journal.run(run, 0)
    taken = journal.take(stores, 0, 1 << 20, short=True)
    assert taken is not None
    assert taken[1]  # rewritten whole, long before REWRITE_FACTOR
    assert len(taken[0]) < len(file) // 2
    assert _views(_load(taken[0])) == _views(stores)
    assert journal.live_bytes + len(STEP_END) == len(taken[0])


def test_a_rewrite_that_would_not_fit_on_the_disk_waits_and_the_step_is_appended() -> None:
    journal, stores, file = _overwritten(400)
    whole = len(images(sorted(stores.items()), 0) + STEP_END)
    run = _run(0, stores[0], PUT, [b"k1"])
    stores[0].apply_run(run, 0, 0)
    journal.run(run, 0)
    taken = journal.take(stores, 0, whole - 1, short=True)  # one byte short of room for the rewrite
    assert taken is not None
    assert not taken[1]
    file += taken[0]
    assert _views(_load(file)) == _views(stores)
    # Measured once: the next steps append without building the file whole again until it grows.
    assert journal.live_bytes + len(STEP_END) <= whole + len(taken[0]) + 100
    for n in range(5):
        run = _run(0, stores[0], PUT, [b"k%d" % n])
        stores[0].apply_run(run, 0, 0)
        journal.run(run, 0)
        taken = journal.take(stores, 0, 1 << 20, short=True)
        assert taken is not None
        assert not taken[1]  # room again, but the file has not grown an eighth since it was measured
        file += taken[0]
    assert _views(_load(file)) == _views(stores)
