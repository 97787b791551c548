"""The replicas' file: what a journal writes after each step reads back into the copies it was
written from, a step torn off leaves the copies as before it, and bytes no member wrote are
refused, naming the record."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardgrid.core.disk_records import RecordKind, encode_record, scan_records
from shardgrid.core.errors import CorruptDisk
from shardgrid.core.messages import EMPTY_COLUMN, PUT, REMOVE, Column, WriteRun
from shardgrid.core.replica_disk import STEP_END, ReplicaJournal, load_replicas
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

    def take() -> None:
        nonlocal file
        taken = journal.take(stores, 0)
        if taken is not None:
            file = taken[0] if taken[1] else file + taken[0]

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
            take()
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
