"""The replicas' file: what a journal writes after each step reads back into the copies it was
written from, whether a compaction runs beside it or just took its place; a compaction writes a
bounded share a step; a step torn off leaves the copies as before it; and bytes no member wrote
are refused, naming the record."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardgrid.core import disk_records, replica_disk
from shardgrid.core.disk_records import COMPACT_EARLY_ABOVE_BYTES, RecordKind, encode_record, scan_records
from shardgrid.core.effects import WriteMode
from shardgrid.core.errors import CorruptDisk
from shardgrid.core.messages import EMPTY_COLUMN, PUT, REMOVE, Column, WriteRun
from shardgrid.core.replica_disk import STEP_END, JournalWrite, ReplicaJournal, images, load_replicas
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


class Files:
    """The replicas file and a compaction's next file, written as a member process writes them."""

    def __init__(self) -> None:
        self.file = b""
        self.next: bytes | None = None
        self.adopted = 0

    def apply(self, writes: list[JournalWrite]) -> None:
        for write in writes:
            mode = write.mode
            if mode is WriteMode.APPEND:
                self.file += write.data
            elif mode is WriteMode.REPLACE:
                self.file, self.next = write.data, None
            elif mode is WriteMode.BEGIN_NEXT:
                self.next = write.data
            elif mode is WriteMode.APPEND_NEXT:
                assert self.next is not None, "appended to a next file never begun"
                self.next += write.data
            elif mode is WriteMode.ADOPT_NEXT:
                assert self.next is not None, "adopted a next file never begun"
                assert not write.data
                self.file, self.next = self.next, None
                self.adopted += 1
            else:
                self.next = None


Op = tuple[str, int, int]  # (what, partition, a number)
OPS = st.tuples(
    st.sampled_from(["put", "remove", "image", "drop", "header", "step"]), st.integers(0, 3), st.integers(0, 9)
)


@settings(max_examples=80, deadline=None)
@given(st.lists(OPS, max_size=80), st.integers(1, 3))
def test_what_a_journal_writes_reads_back_into_the_copies_it_was_written_from(ops: list[Op], share: int) -> None:
    """After every step the file reads back into the copies, whether a compaction runs beside it or
    just replaced it (each step images ``share`` hundred bytes of copies into its next file, here,
    so that one spans many steps); and the journal's count of the file is its size."""
    stores: dict[int, PartitionData] = {}
    journal = ReplicaJournal(fresh=True, share_bytes=100 * share)
    files = Files()

    def take(number: int = 0) -> None:
        """A step's take, on a disk with ``number`` * 40 bytes free (0 and 9: not known), short of
        room when ``number`` is odd (a compaction begins once the file grew an eighth); one due
        whenever ``number`` is 9."""
        room = number * 40 if number not in (0, 9) else None
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(replica_disk, "COMPACT_EARLY_ABOVE_BYTES", 0)
            patch.setattr(disk_records, "COMPACT_EARLY_ABOVE_BYTES", 0)
            patch.setattr(journal, "_min_bytes", 0 if number == 9 else 1 << 26)
            files.apply(journal.take(stores, 0, room, short=number % 2 == 1))
        assert journal.file_bytes == len(files.file)
        assert _views(_load(files.file)) == _views(stores)
        if files.next is not None and not journal.compacting:
            pytest.fail("a next file left behind by a compaction that ended")

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
    for _ in range(20):  # a compaction still running ends, with no more changes
        take()
    assert not journal.compacting
    assert _views(_load(files.file)) == _views(stores)


def test_a_compaction_writes_a_bounded_share_a_step_and_its_next_file_then_takes_the_files_place() -> None:
    stores = {pid: PartitionData() for pid in range(20)}
    journal = ReplicaJournal(fresh=True, min_bytes=1 << 30)
    files = Files()
    files.apply(journal.take(stores, 0))
    for _ in range(16):  # every key written sixteen times over, a step a round
        for pid in range(20):
            run = _run(pid, stores[pid], PUT, [b"key-%d" % i for i in range(100)])
            stores[pid].apply_run(run, 0, 0)
            journal.run(run, 0)
        files.apply(journal.take(stores, 0))
        assert not journal.compacting  # (under its min_bytes)
    before = len(files.file)
    whole = len(images(sorted(stores.items()), 0))
    assert before > 4 * whole
    shares = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(journal, "_min_bytes", 0)
        patch.setattr(journal, "_share_bytes", whole // 5)
        for step in range(100):
            run = _run(step % 20, stores[step % 20], PUT, [b"key-1"])  # writes go on meanwhile
            stores[step % 20].apply_run(run, 0, 0)
            journal.run(run, 0)
            writes = journal.take(stores, 0)
            files.apply(writes)
            shares.append(sum(len(w.data) for w in writes if w.mode.to_next))
            assert _views(_load(files.file)) == _views(stores)
            if not journal.compacting:
                break
    assert len(shares) >= 5  # a fifth of it a step, or about
    assert max(shares) <= whole // 5 + whole // 10
    assert files.adopted == 1
    assert len(files.file) < whole + 2_000  # the file is its data again
    assert journal.live_bytes + len(STEP_END) <= len(files.file)


def test_a_step_torn_off_leaves_the_copies_as_before_it_and_is_cut_before_the_next() -> None:
    stores = {1: PartitionData()}
    journal = ReplicaJournal(fresh=True)
    (file,) = journal.take(stores, 0)
    run = _run(1, stores[1], PUT, [b"a", b"b"])
    stores[1].apply_run(run, 0, 0)
    journal.run(run, 0)
    (step,) = journal.take(stores, 0)
    torn = file.data + step.data[: -len(STEP_END)]  # every record of the step but its end
    held = load_replicas(scan_records(torn), hash_seed=0, max_idle_ms={})
    assert held.copies[1].sequence == 0
    assert held.whole_bytes == len(file.data)


def test_a_run_that_does_not_follow_its_copy_is_corrupt() -> None:
    data = PartitionData()
    journal = ReplicaJournal(fresh=False)
    run = _run(1, data, PUT, [b"a"])
    journal.run(run, 0)
    journal.run(run, 0)  # the same sequence twice: no member applies a write twice
    with pytest.raises(CorruptDisk, match="record 1: a run of partition 1 from sequence 1 after 1"):
        _load(journal.take({1: data}, 0)[0].data)


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
    whole = ReplicaJournal(fresh=True).take(stores, 0)[0].data
    cut = whole[: -len(STEP_END)]
    pages = scan_records(cut).records
    header_only = encode_record(*pages[0]) + STEP_END  # the image's header, then at once a step's end
    with pytest.raises(CorruptDisk, match="ends a step inside the image of partition 2"):
        _load(header_only)


def _overwritten(times: int) -> tuple[ReplicaJournal, dict[int, PartitionData], Files]:
    """A journal whose one copy had its ten keys written ``times`` times over, a step each."""
    stores = {0: PartitionData()}
    journal = ReplicaJournal(fresh=True)
    files = Files()
    files.apply(journal.take(stores, 0))
    for n in range(times):
        run = _run(0, stores[0], PUT, [b"k%d" % (n % 10)])
        stores[0].apply_run(run, 0, 0)
        journal.run(run, 0)
        files.apply(journal.take(stores, 0))
    return journal, stores, files


def test_a_member_short_of_disk_compacts_its_file_early() -> None:
    journal, stores, files = _overwritten(400)
    before = len(files.file)
    assert before > 2 * len(images(sorted(stores.items()), 0)) + COMPACT_EARLY_ABOVE_BYTES
    run = _run(0, stores[0], PUT, [b"k0"])
    stores[0].apply_run(run, 0, 0)
    journal.run(run, 0)
    files.apply(journal.take(stores, 0, 1 << 20, short=True))
    assert files.adopted == 1  # compacted, long before REWRITE_FACTOR (one copy: in one step)
    assert len(files.file) < before // 2
    assert _views(_load(files.file)) == _views(stores)
    assert journal.live_bytes + len(STEP_END) == len(files.file)


def test_a_compaction_without_room_for_its_next_file_is_dropped_and_the_file_written_on() -> None:
    journal, stores, files = _overwritten(400)
    run = _run(0, stores[0], PUT, [b"k1"])
    stores[0].apply_run(run, 0, 0)
    journal.run(run, 0)
    files.apply(journal.take(stores, 0, 100, short=True))  # a compaction begins, but has no room
    assert files.adopted == 0
    assert files.next is None
    assert not journal.compacting
    assert _views(_load(files.file)) == _views(stores)
    # Tried once: the next steps append without beginning another until the file grows an eighth.
    for n in range(5):
        run = _run(0, stores[0], PUT, [b"k%d" % n])
        stores[0].apply_run(run, 0, 0)
        journal.run(run, 0)
        writes = journal.take(stores, 0, 1 << 20, short=True)
        assert [w.mode for w in writes] == [WriteMode.APPEND]
        files.apply(writes)
    assert _views(_load(files.file)) == _views(stores)


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.integers(0, 30),
        st.dictionaries(
            st.text(min_size=1, max_size=40),
            st.dictionaries(st.binary(min_size=1, max_size=60), st.binary(max_size=300), max_size=40),
            max_size=3,
        ),
        max_size=5,
    )
)
def test_what_a_compaction_is_measured_to_take_at_most_is_no_less_than_it_takes(held: dict) -> None:
    """Short of disk, a compaction begins only when its next file fits: what it is measured to
    take must not be less than what it writes."""
    stores = {pid: PartitionData.holding(maps) for pid, maps in held.items()}
    journal = ReplicaJournal(fresh=False)
    assert journal._image_bound(stores, 0) >= len(images(sorted(stores.items()), 0) + STEP_END)


@pytest.mark.parametrize("made_at_step", range(6))
def test_a_copy_made_while_a_compaction_runs_is_in_the_file_it_takes_the_place_of(made_at_step: int) -> None:
    """Found by an outside tester: a copy made (a header, then a run) while the next file was being
    built was left out of it once it was taken, and the file then refused the copy's next runs."""
    stores: dict[int, PartitionData] = {}
    journal = ReplicaJournal(fresh=True, share_bytes=50, min_bytes=2_000)
    files = Files()
    written = 0

    def put(pid: int) -> None:
        nonlocal written
        data = stores.get(pid)
        if data is None:
            data = stores[pid] = PartitionData()
            journal.header(pid)
        run = _run(pid, data, PUT, [b"k%d" % ((written + i) % 5) for i in range(3)])
        data.apply_run(run, 0, 0)
        journal.run(run, 0)
        written += 1

    def take() -> None:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(replica_disk, "COMPACT_EARLY_ABOVE_BYTES", 0)
            patch.setattr(disk_records, "COMPACT_EARLY_ABOVE_BYTES", 0)
            files.apply(journal.take(stores, 0))
        assert _views(_load(files.file)) == _views(stores)

    while not journal.compacting:
        put(written % 6)
        take()
    for step in range(200):
        if step == made_at_step:
            put(100)
        put(step % 6)
        take()
        if files.adopted:
            break
    assert files.adopted == 1
    for _ in range(3):  # the copy's next runs follow in the file it now is
        put(100)
        take()


def test_a_file_read_back_compacts_at_four_times_its_data_not_four_times_its_size() -> None:
    """Found by an outside tester: a member killed with a file mostly of overwritten runs grew it
    to four times that size before compacting it, restart after restart."""
    _journal, stores, files = _overwritten(400)
    restarted = ReplicaJournal(fresh=False, file_bytes=len(files.file), min_bytes=0)
    restarted.restored(stores, 0)
    assert restarted.live_bytes < len(files.file) // 4
    run = _run(0, stores[0], PUT, [b"k1"])
    stores[0].apply_run(run, 0, 0)
    restarted.run(run, 0)
    after = Files()
    after.file = files.file
    after.apply(restarted.take(stores, 0))
    assert after.adopted == 1  # due at once: the file holds far more than four times its data
    assert _views(_load(after.file)) == _views(stores)
