"""The wire codec: every registered type round-trips, codes are stable, frames are bounded, bad
input is refused."""

from __future__ import annotations

import enum
import itertools
import sys
import tracemalloc
import types
import typing

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardgrid.core import codec, limits
from shardgrid.core import messages as m
from shardgrid.core.errors import ProtocolError
from shardgrid.core.identity import MemberId
from shardgrid.core.limits import MAX_COUNTER, MAX_KEY_BYTES, MAX_REPLICA_COUNT
from shardgrid.core.metadata import commands as c
from shardgrid.core.metadata.cluster_state import ClusterState
from shardgrid.core.metadata.state import MetadataState
from shardgrid.core.migration import Migration, MigrationOutcome, MigrationRecord
from shardgrid.core.raft import messages as r
from shardgrid.core.raft.log import Entry as LogEntry
from shardgrid.core.raft.log import Snapshot
from shardgrid.core.raft.membership import ConfChange, Membership
from shardgrid.core.session import Welcome
from shardgrid.core.table import PartitionTable
from tests.wire import map_reply, map_request, values

replicas = st.builds(MemberId, st.uuids().map(str), st.text(min_size=1, max_size=30))
counters = st.integers(0, MAX_COUNTER)  # Raft's own records carry no Meta: the codec bounds them
indexes = st.integers(min_value=-1, max_value=MAX_REPLICA_COUNT - 1)
migrations = st.builds(
    Migration,
    source=replicas,
    source_current_index=st.integers(0, MAX_REPLICA_COUNT - 1),
    source_new_index=indexes,
    destination=replicas,
    destination_current_index=indexes,
    destination_new_index=st.integers(0, MAX_REPLICA_COUNT - 1),
).filter(lambda x: x.source != x.destination)
memberships = st.builds(
    lambda a, b: Membership.of(a, [x for x in b if x not in a]),
    st.lists(replicas, max_size=3),
    st.lists(replicas, max_size=3),
)


def _table_strategy() -> st.SearchStrategy:
    def build(members: list[MemberId], versions: list[int], picks: list[list[int]]) -> PartitionTable:
        rows = [list(dict.fromkeys(members[i % len(members)] for i in row)) for row in picks]
        return PartitionTable.from_lists(rows, versions)

    return st.integers(1, 6).flatmap(
        lambda n: st.builds(
            build,
            st.lists(replicas, min_size=1, max_size=4, unique=True),
            st.lists(st.integers(0, 2**31 - 1), min_size=n, max_size=n),
            st.lists(st.lists(st.integers(0, 3), max_size=3), min_size=n, max_size=n),
        )
    )


SPECIAL: dict[object, st.SearchStrategy] = {
    int: st.integers(min_value=-(2**63), max_value=2**63 - 1),
    str: st.text(max_size=40),
    bytes: st.binary(max_size=64),
    bool: st.booleans(),
    MemberId: replicas,
    Migration: migrations,
    Membership: memberships,
    PartitionTable: _table_strategy(),
}


def strategy_for(annotation: object) -> st.SearchStrategy:
    if annotation in SPECIAL:
        return SPECIAL[annotation]
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _bounded(*typing.get_args(annotation))
    if origin in (LogEntry, Snapshot):  # Raft's generic records, as the codec parametrizes them
        return strategy_for(origin)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(strategy_for(a) for a in typing.get_args(annotation)))
    if origin is tuple:
        args = typing.get_args(annotation)
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(strategy_for(args[0]), max_size=3).map(tuple)
        return st.tuples(*(strategy_for(a) for a in args))
    if annotation is type(None):
        return st.none()
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return st.sampled_from(list(annotation))
    if annotation is MetadataState:

        def state(
            count: int,
            members: list,
            table: PartitionTable | None,
            cluster: ClusterState,
            running: list,
            done: list,
            down: bool,
        ) -> MetadataState:
            count = table.partition_count if table is not None else count  # a state hangs together
            in_range = {
                x.partition_id % count: msgspec.structs.replace(x, partition_id=x.partition_id % count) for x in running
            }
            return MetadataState(count, tuple(members), table, cluster, in_range, tuple(done), down)

        return st.builds(
            state,
            st.integers(1, 100),
            st.lists(instances(c.MemberRecord), max_size=3),
            st.none() | _table_strategy(),
            st.sampled_from(list(ClusterState)),
            st.lists(instances(MigrationRecord), max_size=3),
            st.lists(instances(MigrationRecord), max_size=3),
            st.booleans(),
        )
    if annotation is Snapshot:
        return st.builds(Snapshot, counters, counters, memberships, strategy_for(MetadataState))
    if annotation is LogEntry:
        commands = st.lists(st.sampled_from(COMMAND_TYPES).flatmap(instances), max_size=3).map(tuple)
        return st.builds(
            LogEntry,
            term=counters,
            index=counters,
            command=st.none() | commands,
            change=st.none() | instances(ConfChange),
        )
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        return st.deferred(lambda: instances(annotation))
    raise AssertionError(f"no strategy for {annotation!r}")


def _bounded(base: object, *metas: object) -> st.SearchStrategy:
    """Values of ``base`` within the msgspec.Meta bounds the wire declares."""
    meta = next(x for x in metas if isinstance(x, msgspec.Meta))
    if base is int:
        low = meta.ge if meta.ge is not None else -(2**63)
        high = meta.lt - 1 if meta.lt is not None else meta.le if meta.le is not None else 2**63 - 1
        return st.integers(low, high)
    if typing.get_origin(base) is tuple:
        (item, _) = typing.get_args(base)
        low = meta.min_length or 0
        return st.lists(strategy_for(item), min_size=low, max_size=max(low, min(meta.max_length or 3, 3))).map(tuple)
    size = {"min_size": meta.min_length or 0, "max_size": min(meta.max_length or 40, 40)}
    if base is str:
        return st.text(**size)
    if base is bytes:
        return st.binary(**size)
    raise AssertionError(f"no strategy for {base!r} with {meta!r}")


def instances(cls: type) -> st.SearchStrategy:
    hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]), include_extras=True)
    return st.builds(cls, **{name: strategy_for(hints[name]) for name in cls.__struct_fields__})


COMMAND_TYPES = list(codec.COMMAND_TYPES)
WIRE_TYPES = sorted(codec.FRAME_TYPES, key=lambda cls: codec.WIRE_CODES[cls])


@pytest.mark.parametrize("cls", WIRE_TYPES, ids=lambda cls: cls.__name__)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_every_message_round_trips(cls: type, data: st.DataObject) -> None:
    message = data.draw(instances(cls))
    (decoded,) = codec.FrameDecoder().feed(codec.encode(message))
    if cls is r.InstallSnapshot:
        # The state has no equality of its own (it holds a dict): compare its parts.
        assert codec._state_to_wire(decoded.snapshot.state) == codec._state_to_wire(message.snapshot.state)
        assert decoded.snapshot.membership == message.snapshot.membership
    else:
        assert decoded == message


def test_snapshot_of_a_real_state_round_trips() -> None:
    a, b = MemberId("a" * 8, "x:1"), MemberId("b" * 8, "x:2")
    table = PartitionTable.from_lists([[a, b], [b, a], [a]], [3, 4, 5])
    record = MigrationRecord(
        migration_id="m-1",
        partition_id=2,
        migration=Migration(
            source=None,
            source_current_index=-1,
            source_new_index=-1,
            destination=b,
            destination_current_index=-1,
            destination_new_index=1,
        ),
        version_before=5,
    )
    state = MetadataState(3, (c.MemberRecord(a), c.MemberRecord(b, lite=True)), table, ClusterState.FROZEN, {2: record})
    message = r.InstallSnapshot(4, Snapshot(9, 4, Membership.of([a], [b]), state), 100)
    (decoded,) = codec.FrameDecoder().feed(codec.encode(message))
    got = decoded.snapshot.state
    assert got.table == table
    assert got.migrations == {2: record}
    assert got.cluster_state is ClusterState.FROZEN
    assert got.members == state.members


def test_an_entry_of_every_command_round_trips_through_the_mirrors() -> None:
    """AppendEntries is decoded into the codec's bounded mirrors and turned back: every command,
    a configuration change and a forced configuration come out as the types that went in."""
    a, b = MemberId("a" * 8, "x:1"), MemberId("b" * 8, "x:2")
    record = MigrationRecord(
        migration_id="m-1",
        partition_id=0,
        migration=Migration(
            source=None,
            source_current_index=-1,
            source_new_index=-1,
            destination=b,
            destination_current_index=-1,
            destination_new_index=1,
        ),
        version_before=5,
    )
    commands = (
        c.AddMembers((c.MemberRecord(a), c.MemberRecord(b, lite=True))),
        c.RemoveMembers((b,)),
        c.AssignPartitions(PartitionTable.from_lists([[a, b], [b]], [1, 2])),
        c.StartMigrations((record,)),
        c.FinishMigrations((record.with_outcome(MigrationOutcome.COMMITTED),)),
        c.SetClusterState(ClusterState.FROZEN),
        c.PromoteToDataMember(b),
        c.MarkLeaving(a),
        c.StopAllMembers(),
        c.ResumeAfterShutdown(),
        c.MarkUnreachable((a, b)),
        c.MarkReachable((b,)),
        c.ReviveUnavailable(),
        c.ReaddressMember(a, MemberId(a.uuid, "x:3")),
        c.AwaitMembers((b,)),
    )
    assert {type(command) for command in commands} == set(codec.COMMAND_TYPES)
    entries = (
        LogEntry(term=2, index=8, command=commands),
        LogEntry(term=2, index=9, command=None, change=ConfChange(add_learners=(b,), promote=None)),
        LogEntry(term=3, index=10, command=(), change=None, forced=Membership.of([a], [b])),
    )
    message = r.AppendEntries(term=3, prev_index=7, prev_term=2, entries=entries, commit=9, sent_ms=100)
    (decoded,) = codec.FrameDecoder().feed(codec.encode(message))
    assert decoded == message
    assert [type(x) for x in decoded.entries[0].command] == [type(x) for x in commands]
    assert type(decoded.entries[1].change) is ConfChange
    assert type(decoded.entries[2].forced) is Membership


def test_codes_are_explicit_unique_and_stable() -> None:
    assert len(set(codec.WIRE_CODES.values())) == len(codec.WIRE_CODES)
    # A few pinned codes: renumbering any of them breaks every peer of another version.
    assert codec.WIRE_CODES[m.JoinRequest] == 20
    assert codec.WIRE_CODES[r.AppendEntries] == 42
    assert codec.WIRE_CODES[c.AddMembers] == 61
    assert codec.WIRE_CODES[m.MapRequest] == 138
    # The tag is the first element of the encoded array.
    assert msgspec.msgpack.decode(codec.encode(r.Heartbeat(1, 2, 3))[4:]) == [codec.PROTOCOL_VERSION, [44, 1, 2, 3]]


def test_frames_split_anywhere_decode_the_same() -> None:
    frames = [codec.encode(r.Heartbeat(i, i * 7, i)) for i in range(5)]
    stream = b"".join(frames)
    for cut in range(1, len(stream)):
        decoder = codec.FrameDecoder()
        got = decoder.feed(stream[:cut]) + decoder.feed(stream[cut:])
        assert got == [r.Heartbeat(i, i * 7, i) for i in range(5)]


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=12),
    cuts=st.lists(st.integers(0, 40_000), max_size=30),
    kind=st.sampled_from([bytes, bytearray, memoryview]),
)
def test_frames_in_chunks_of_any_size_and_type_decode_the_same(sizes: list[int], cuts: list[int], kind: type) -> None:
    """Whole frames decode from views of what was read, a partial one is held: any split of a
    stream (mid-prefix, mid-body, empty reads, many frames in one read) gives the same messages."""
    messages = [
        map_reply(
            call_id=i, codes=(m.ReplyCode.OK,) * (size // 100), values=tuple(b"v" * 100 for _ in range(size // 100))
        )
        for i, size in enumerate(sizes)
    ]
    stream = b"".join(codec.encode(message) for message in messages)
    points = sorted({min(cut, len(stream)) for cut in cuts} | {0, len(stream)})
    decoder = codec.FrameDecoder()
    got: list[object] = []
    for start, end in itertools.pairwise(points):
        chunk = stream[start:end]
        got += decoder.feed(kind(chunk) if kind is not memoryview else memoryview(bytearray(chunk)))
    assert got == messages
    assert decoder.feed(b"") == []


def test_a_frame_held_across_reads_takes_only_the_bytes_it_lacks() -> None:
    first, second = codec.encode(r.Heartbeat(1, 2, 3)), codec.encode(r.Heartbeat(4, 5, 6))
    decoder = codec.FrameDecoder()
    assert decoder.feed(first[:2]) == []
    assert decoder.feed(first[2:3]) == []
    # The rest of the first frame, the whole second one and the start of a third in one read.
    assert decoder.feed(first[3:] + second + first[:5]) == [r.Heartbeat(1, 2, 3), r.Heartbeat(4, 5, 6)]
    assert decoder.feed(first[5:]) == [r.Heartbeat(1, 2, 3)]


def test_the_part_read_frame_is_sized_from_its_prefix() -> None:
    frame = codec.encode(r.Heartbeat(1, 2, 3))
    decoder = codec.FrameDecoder()
    assert decoder.partial_frame_bytes == 0
    decoder.feed(frame[:2])
    assert decoder.partial_frame_bytes == 2  # the prefix is not whole yet: what is held
    decoder.feed(frame[2:5])
    assert decoder.partial_frame_bytes == len(frame) - 4  # as max_frame_bytes counts it: no prefix
    decoder.feed(frame[5:] + frame[:6])
    assert decoder.partial_frame_bytes == len(frame) - 4  # the next one, begun
    decoder.feed(frame[6:])
    assert decoder.partial_frame_bytes == 0


def test_oversized_frames_are_refused_before_buffering() -> None:
    decoder = codec.FrameDecoder(max_frame_bytes=100)
    with pytest.raises(ProtocolError, match="over the 100 limit"):
        decoder.feed((1000).to_bytes(4, "big") + b"x")


def _body(message: object) -> bytes:
    return msgspec.msgpack.encode([codec.PROTOCOL_VERSION, message])


def test_garbage_unknown_codes_and_other_versions_are_refused() -> None:
    with pytest.raises(ProtocolError, match="undecodable"):
        codec.decode_body(b"\xc1\xc1\xc1")
    with pytest.raises(ProtocolError, match="malformed"):
        codec.decode_body(_body([99]))  # no message has code 99
    with pytest.raises(ProtocolError, match="protocol version"):
        codec.decode_body(msgspec.msgpack.encode([1, None]))
    with pytest.raises(ProtocolError, match="malformed"):
        codec.decode_body(_body(5))
    with pytest.raises(ProtocolError, match="malformed"):
        codec.decode_body(_body(["u", "a"]))  # a replica is no message
    with pytest.raises(ProtocolError, match="malformed"):
        codec.decode_body(_body([61, []]))  # a log command is no message either


def test_a_body_is_one_message_whichever_way_its_header_is_written() -> None:
    """Frames of our version skip the header's decode (the message is the rest of the body): what
    follows the message is refused as before, and a version written in a wider form still decodes."""
    reply = map_reply(call_id=7, codes=(m.ReplyCode.OK,))
    body = _body(reply)
    assert body[:2] == bytes([0x92, codec.PROTOCOL_VERSION])
    assert codec.decode_body(body) == reply
    with pytest.raises(ProtocolError, match="malformed"):
        codec.decode_body(body + b"\x00")  # a byte after the message
    with pytest.raises(ProtocolError, match="malformed"):
        codec.decode_body(body[:-1])  # the message cut short
    with pytest.raises(ProtocolError):
        codec.decode_body(body[:2])  # a header and no message
    wide = b"\x92\xcc" + bytes([codec.PROTOCOL_VERSION]) + body[2:]  # the version as a uint8
    assert codec.decode_body(wide) == reply
    with pytest.raises(ProtocolError, match="undecodable"):
        codec.decode_body(b"\x92\xcc" + bytes([codec.PROTOCOL_VERSION]) + body[2:] + b"\x00")


def test_wrong_field_types_are_protocol_errors() -> None:
    # The reproduction was ClientRequest(1, (5,)): a TypeError inside the member.
    with pytest.raises(ProtocolError, match="malformed"):
        codec.decode_body(_body([122, 1, "put", "m", [5], [5], []]))
    with pytest.raises(ProtocolError, match="malformed"):
        codec.decode_body(_body([123, 1, [99]]))  # no status 99
    with pytest.raises(ProtocolError, match="malformed"):
        codec.decode_body(_body([122, 1, "put", "m", [0], ["a str, not bytes"], [b"v"]]))
    with pytest.raises(ProtocolError, match="malformed"):
        codec.decode_body(_body([122, 1, "put", "m", [0], [b"k" * (MAX_KEY_BYTES + 1)], [b"v"]]))
    with pytest.raises(ProtocolError, match="malformed"):
        codec.decode_body(_body([122, 1, "get", "", [0], [b"k"], []]))  # an empty map name
    with pytest.raises(ProtocolError, match="malformed"):
        codec.decode_body(_body([122, 1, "get", "m", [-1], [b"k"], []]))
    with pytest.raises(ProtocolError, match="malformed"):
        codec.decode_body(_body([44, True, 2, 3]))  # a bool is not a term
    with pytest.raises(ProtocolError, match="malformed"):
        codec.decode_body(_body([44, 1, 2]))  # a field missing
    with pytest.raises(ProtocolError, match="malformed"):
        codec.decode_body(_body([120, [[0, "lineage", 1, "put", "m", ["key-is-not-bytes"], [b""]]]]))
    with pytest.raises(ProtocolError, match="malformed"):
        codec.decode_body(_body([110, "no-such-state"]))


def test_values_our_constructors_refuse_are_protocol_errors_not_invariant_violations() -> None:
    migration = [None, 3, -1, None, -1, -1]  # a source index without a source, and nobody at all
    record = ["m-1", 0, migration, 1, MigrationOutcome.PENDING.value]
    with pytest.raises(ProtocolError, match="malformed"):
        codec.decode_body(_body([83, record, 1]))
    table = [[], [1], [[5, -1, -1, -1, -1, -1, -1]]]  # slot names replica 5 of none
    state = [1, [], table, ClusterState.ACTIVE.value, [], [], False]
    snapshot = [1, 1, [[], []], state]
    with pytest.raises(ProtocolError, match="unknown replica"):
        codec.decode_body(_body([46, 1, snapshot, 0]))
    voter_and_learner = [[["u", "a"]], [["u", "a"]]]
    with pytest.raises(ProtocolError, match="malformed"):
        codec.decode_body(_body([46, 1, [1, 1, voter_and_learner, [1, [], None, "active", [], [], False]], 0]))


def test_unencodable_values_are_refused_by_the_sender() -> None:
    with pytest.raises(TypeError, match="cannot encode"):
        codec.encode(r.Heartbeat(1, object(), 2))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not a message"):
        codec.encode(MemberId("u", "a"))


def test_a_table_of_100000_partitions_with_6_backups_travels_in_one_snapshot_frame() -> None:
    members = [MemberId(f"{i:08d}-0000-4000-8000-000000000000", f"10.0.{i // 250}.{i % 250}:5701") for i in range(200)]
    rows = [[members[(pid + k * 31) % 200] for k in range(MAX_REPLICA_COUNT)] for pid in range(100_000)]
    table = PartitionTable.from_lists(rows, [pid % 1000 + 1 for pid in range(100_000)])
    state = MetadataState(100_000, tuple(c.MemberRecord(r) for r in members), table)
    frame = codec.encode(r.InstallSnapshot(3, Snapshot(10, 2, Membership.of(members[:5], []), state), 0))
    assert len(frame) < codec.MAX_FRAME_BYTES
    (decoded,) = codec.FrameDecoder().feed(frame)
    assert decoded.snapshot.state.table == table


def test_a_frame_nested_deep_enough_to_exhaust_the_stack_is_a_protocol_error() -> None:
    """Found by review: msgspec's RecursionError escaped the codec (a 1 KB frame from any client)."""
    enc = msgspec.msgpack.encode
    nested = b"\x91" * 5_000 + enc(b"k")  # a key inside 5,000 one-element arrays
    fields = [enc(122), enc(1), enc("put"), enc("m"), enc([0]), b"\x91" + nested, enc([b"v"])]
    request = b"\x97" + b"".join(fields)
    with pytest.raises(ProtocolError):
        codec.decode_body(b"\x92" + enc(codec.PROTOCOL_VERSION) + request)
    with pytest.raises(ProtocolError):
        codec.decode_body(b"\x92" + enc(codec.PROTOCOL_VERSION) + nested)


@pytest.mark.parametrize(
    ("table", "migrations", "what"),
    [
        ([[["u", "a"]], [1, 1], [[0, -1, -1, -1, -1, -1, -1]] * 2], [], "holds a table of 2"),  # state says 3
        ([[["u", "a"]], [1, 1, 1], [[0, 0, -1, -1, -1, -1, -1]] * 3], [], "names a replica twice"),
        (None, [["m-1", 7, [None, -1, -1, ["u", "a"], -1, 0], 1, "pending"]], "does not have"),
    ],
)
def test_a_snapshot_state_that_does_not_hang_together_is_refused(table: object, migrations: list, what: str) -> None:
    """Found by review: a 2-partition table in a 3-partition state decoded, and crashed the member later."""
    state = [3, [], table, ClusterState.ACTIVE.value, migrations, [], False]
    with pytest.raises(ProtocolError, match=what):
        codec.decode_body(_body([46, 1, [1, 1, [[], []], state], 0]))


# --- counters: a peer cannot push one to where our own increment stops encoding ----------------------


def _append_of(entries: list) -> bytes:
    return _body([42, 1, 0, 0, entries, 0, 0])


def _snapshot_of(index: int, term: int, membership: list | None = None) -> bytes:
    state = [1, [], None, ClusterState.ACTIVE.value, [], [], False]
    return _body([46, 1, [index, term, membership or [[], []], state], 0])


@pytest.mark.parametrize(
    "body",
    [
        _body([44, MAX_COUNTER + 1, 0, 0]),  # Heartbeat: the tester's term, one past the limit
        _body([44, 2**64 - 1, 0, 0]),  # the tester's term exactly
        _body([44, -1, 0, 0]),
        _body([40, 1, MAX_COUNTER + 1, 1, False]),  # VoteRequest's last index
        _body([43, 1, True, 2**64 - 1, 0]),  # AppendReply's index
        _append_of([[MAX_COUNTER + 1, 1, None, None, None]]),  # a log entry's term
        _append_of([[1, 2**63, None, None, None]]),  # a log entry's index
        _snapshot_of(MAX_COUNTER + 1, 1),  # a snapshot's index
        _snapshot_of(1, 2**64 - 1),  # a snapshot's term
        _body([26, 2**64 - 1, 0, None]),  # LeaseRequest's clock
        _body([138, 2**64 - 1, "get", "m", [b"", b""]]),  # MapRequest's call id
        _body(
            [140, [[0, "lineage", MAX_COUNTER + 1, "remove", "m", [b"k", b"\x01\0\0\0"], [b"", b""]]]]
        ),  # a run's sequence
        _body([121, [[0, 2**64 - 1]]]),  # an acknowledged replica sequence
    ],
)
def test_counters_past_max_counter_are_refused(body: bytes) -> None:
    """Found by an outside tester: a term of 2**64-1 passed the codec, and the next election needed
    2**64, which cannot be encoded: no member could send a vote request again."""
    with pytest.raises(ProtocolError, match=r"malformed message: Expected `int` (<=|>=)"):
        codec.decode_body(body)


def test_a_counter_at_the_limit_is_taken_and_one_more_still_encodes() -> None:
    (decoded,) = codec.FrameDecoder().feed(codec.encode(r.Heartbeat(MAX_COUNTER, MAX_COUNTER, MAX_COUNTER)))
    assert decoded == r.Heartbeat(MAX_COUNTER, MAX_COUNTER, MAX_COUNTER)
    assert codec.encode(
        r.VoteRequest(term=MAX_COUNTER + 1, last_index=MAX_COUNTER + 1, last_term=MAX_COUNTER, pre_vote=False)
    )


# Ints of records defined outside the wire modules that the codec does not bound: a migration's
# replica indexes are checked by Migration itself (-1 to 6), its partition and version are not.
INTS_NOT_BOUNDED_BY_THE_CODEC = {
    "Migration.source_current_index",
    "Migration.source_new_index",
    "Migration.destination_current_index",
    "Migration.destination_new_index",
    "MigrationRecord.partition_id",
    "MigrationRecord.version_before",
    "LeaseRequest.table_stamp",  # a hash: any 64-bit int is one
    "MemberStatus.table_stamp",  # the same hash, shown to clients
}


def _unbounded(annotation: object, where: str, seen: set[type]) -> list[str]:
    """Every int without both bounds and every variable-length tuple without a length bound that
    decoding ``annotation`` may build."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        base, *metas = typing.get_args(annotation)
        meta = next(x for x in metas if isinstance(x, msgspec.Meta))
        if base is int:
            low = meta.ge is not None or meta.gt is not None
            high = meta.le is not None or meta.lt is not None
            return [] if low and high else [where]
        if typing.get_origin(base) is tuple and meta.max_length is not None:
            return _unbounded(typing.get_args(base)[0], f"{where}[]", seen)
        return _unbounded(base, where, seen)
    if annotation is int:
        return [where]
    if origin in (typing.Union, types.UnionType):
        return [found for arg in typing.get_args(annotation) for found in _unbounded(arg, where, seen)]
    if origin is tuple:
        args = typing.get_args(annotation)
        if len(args) == 2 and args[1] is Ellipsis:
            return [f"{where} (its length)", *_unbounded(args[0], f"{where}[]", seen)]
        return [found for i, arg in enumerate(args) for found in _unbounded(arg, f"{where}[{i}]", seen)]
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct) and annotation not in seen:
        seen.add(annotation)
        hints = typing.get_type_hints(annotation, vars(sys.modules[annotation.__module__]), include_extras=True)
        name = annotation.__name__.removeprefix("_Wire")
        return [found for f in annotation.__struct_fields__ for found in _unbounded(hints[f], f"{name}.{f}", seen)]
    return []


def test_every_int_and_every_collection_the_codec_decodes_is_bounded() -> None:
    """So that a field added later cannot bring back an overflowing counter or a frame that
    inflates many times over: every new int or tuple needs a bound (or a reason here)."""
    seen: set[type] = set()
    found = [where for cls in codec._FRAME_DECODE_TYPES for where in _unbounded(cls, cls.__name__, seen)]
    assert set(found) == INTS_NOT_BOUNDED_BY_THE_CODEC


# --- tables -----------------------------------------------------------------------------------------


def test_a_table_listing_one_replica_twice_is_refused() -> None:
    """Found by an outside tester: two indexes naming the same replica put one member in two slots
    of a row (which ``PartitionTable.from_lists`` refuses); the member took it from a snapshot, and
    the cluster failed later, re-encoding it."""
    twice = [["u", "a"], ["u", "a"]]
    table = [twice, [1], [[0, 1, -1, -1, -1, -1, -1]]]
    state = [1, [], table, ClusterState.ACTIVE.value, [], [], False]
    with pytest.raises(ProtocolError, match="lists a replica twice"):
        codec.decode_body(_body([46, 1, [1, 1, [[], []], state], 0]))
    # The same table, assigned by a log entry.
    with pytest.raises(ProtocolError, match="lists a replica twice"):
        codec.decode_body(_append_of([[1, 1, [[63, table]], None, None]]))


# --- collections: refused from their length, before their items are built ---------------------------


def _array(count: int, item: bytes) -> bytes:
    return b"\xdd" + count.to_bytes(4, "big") + item * count


def _raw_body(message: bytes) -> bytes:
    return b"\x92" + msgspec.msgpack.encode(codec.PROTOCOL_VERSION) + message


_REPLICA = b"\x92\xa0\xa0"  # MemberId("", "")
_ROW = b"\x97" + b"\xff" * 7  # seven empty slots
_STATE_NO_TABLE = b"\x97\x01\x90\xc0\xa6active\x90\x90\xc2"


def _snapshot_table(rows: int) -> bytes:
    table = b"\x93\x90" + _array(rows, b"\x01") + _array(rows, _ROW)
    state = b"\x97" + msgspec.msgpack.encode(limits.MAX_PARTITION_COUNT) + b"\x90" + table + b"\xa6active\x90\x90\xc2"
    return b"\x94\x2e\x01\x94\x01\x01\x92\x90\x90" + state + b"\x00"


OVER_THE_BOUNDS = {
    # The outside tester's four, one item past each bound.
    "Bootstrap voters": b"\x93\x18\x90" + _array(limits.MAX_MEMBER_COUNT + 1, _REPLICA),
    # Keys and values are packed columns: one bytes object each, bounded by the frame; the codes
    # of a reply are a byte per key, bounded as the keys of a request are.
    "MapReply codes": b"\x93\xcc\x8b\x01\xc5"
    + (limits.MAX_OPERATIONS_PER_REQUEST + 1).to_bytes(2, "big")
    + bytes(limits.MAX_OPERATIONS_PER_REQUEST + 1),
    "BackupBatch runs": b"\x92\xcc\x8c"
    + _array(
        limits.MAX_RUNS_PER_BACKUP_BATCH + 1, b"\x97\x00\xa0\x01\xa6remove\xa1m\x92\xc4\x00\xc4\x00\x92\xc4\x00\xc4\x00"
    ),
    "snapshot table rows": _snapshot_table(limits.MAX_PARTITION_COUNT + 1),
    # The same through Raft's own records, which the codec mirrors to bound them.
    "AppendEntries entries": b"\x97\x2a\x01\x00\x00"
    + _array(limits.MAX_ENTRIES_PER_APPEND + 1, b"\x92\x01\x01")
    + b"\x00\x00",
    "commands of an entry": b"\x97\x2a\x01\x00\x00\x91\x93\x01\x01"
    + _array(limits.MAX_COMMANDS_PER_ENTRY + 1, b"\x91\x45")
    + b"\x00\x00",
    "members of AddMembers": b"\x97\x2a\x01\x00\x00\x91\x93\x01\x01\x91\x92\x3d"
    + _array(limits.MAX_MEMBER_COUNT + 1, b"\x91" + _REPLICA)
    + b"\x00\x00",
    "snapshot voters": b"\x94\x2e\x01\x94\x01\x01\x92"
    + _array(limits.MAX_MEMBER_COUNT + 1, _REPLICA)
    + b"\x90"
    + _STATE_NO_TABLE
    + b"\x00",
    "ReplicaSummary partitions": b"\x94\x7d" + _array(limits.MAX_PARTITION_COUNT + 1, b"\x00") + b"\x90\x90",
}


def _assert_refused_before_its_items_are_built(message: bytes) -> None:
    body = _raw_body(message)
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError, match="of length <="):
            codec.decode_body(body)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024, f"{peak} bytes allocated for a frame of {len(body)}"


@pytest.mark.parametrize("message", OVER_THE_BOUNDS.values(), ids=OVER_THE_BOUNDS.keys())
def test_a_collection_over_its_bound_is_refused_before_its_items_are_built(message: bytes) -> None:
    """Found by an outside tester: one frame under 16 MiB (millions of voters, keys, runs or table
    rows) made a member allocate about 25 times its size before anything looked at it."""
    _assert_refused_before_its_items_are_built(message)


def test_collections_at_their_bound_are_taken() -> None:
    keys = tuple(b"k%d" % i for i in range(limits.MAX_OPERATIONS_PER_REQUEST))
    request = map_request(call_id=1, kind=m.GET, map_name="m", keys=keys)
    (decoded,) = codec.FrameDecoder().feed(codec.encode(request))
    assert decoded == request
    voters = tuple(MemberId(f"{i:04d}", "a") for i in range(limits.MAX_MEMBER_COUNT))
    bootstrap = m.Bootstrap(tuple(c.MemberRecord(v) for v in voters), voters)
    assert codec.FrameDecoder().feed(codec.encode(bootstrap)) == [bootstrap]


# --- streams: a bad frame loses none of the good ones before it ---------------------------------------


def test_the_good_frames_before_a_bad_one_come_with_the_error() -> None:
    """Found by an outside tester: the ProtocolError of a bad frame discarded the good frames
    decoded before it in the same feed."""
    good = [r.Heartbeat(1, 1, 1), r.Heartbeat(2, 2, 2)]
    bad = (3).to_bytes(4, "big") + b"\xc1\xc1\xc1"
    decoder = codec.FrameDecoder()
    with pytest.raises(codec.StreamError, match="undecodable") as caught:
        decoder.feed(b"".join(map(codec.encode, good)) + bad + codec.encode(r.Heartbeat(3, 3, 3)))
    assert isinstance(caught.value, ProtocolError)
    assert caught.value.decoded == good
    # Nothing after a bad frame is trusted: the decoder stays broken, with nothing decoded.
    with pytest.raises(codec.StreamError, match="already broke") as again:
        decoder.feed(codec.encode(r.Heartbeat(4, 4, 4)))
    assert again.value.decoded == []


def test_the_good_frames_before_an_oversized_one_come_with_the_error() -> None:
    decoder = codec.FrameDecoder(max_frame_bytes=100)
    first = codec.encode(r.Heartbeat(1, 1, 1))
    assert decoder.feed(first[:3]) == []
    with pytest.raises(codec.StreamError, match="over the 100 limit") as caught:
        decoder.feed(first[3:] + (1000).to_bytes(4, "big"))
    assert caught.value.decoded == [r.Heartbeat(1, 1, 1)]


def test_a_bad_first_frame_raises_with_nothing_decoded() -> None:
    with pytest.raises(codec.StreamError) as caught:
        codec.FrameDecoder().feed((1).to_bytes(4, "big") + b"\xc1")
    assert caught.value.decoded == []


# --- Raft's configurations and the log's commands: their own bounds, with no mirror in between -------

_RECORD = msgspec.msgpack.encode(
    MigrationRecord(
        migration_id="m-1",
        partition_id=0,
        migration=Migration(
            source=None,
            source_current_index=-1,
            source_new_index=-1,
            destination=MemberId("u", "a"),
            destination_current_index=-1,
            destination_new_index=0,
        ),
        version_before=1,
    )
)


def _entry_append(entry: bytes) -> bytes:
    """AppendEntries of term 1 after index 0, carrying one entry, encoded by hand."""
    return b"\x97\x2a\x01\x00\x00\x91" + entry + b"\x00\x00"


def _command_entry(tag: int, items: bytes) -> bytes:
    """An entry of term 1, index 1 whose one command has one collection field."""
    return _entry_append(b"\x93\x01\x01\x91\x92" + bytes([tag]) + items)


OVER_THEIR_OWN_BOUNDS = {
    "members of RemoveMembers": _command_entry(62, _array(limits.MAX_MEMBER_COUNT + 1, _REPLICA)),
    "members of AddMembers": _command_entry(61, _array(limits.MAX_MEMBER_COUNT + 1, b"\x91" + _REPLICA)),
    "records of StartMigrations": _command_entry(64, _array(limits.MAX_PARTITION_COUNT + 1, _RECORD)),
    "records of FinishMigrations": _command_entry(65, _array(limits.MAX_PARTITION_COUNT + 1, _RECORD)),
    "voters of a forced configuration": _entry_append(
        b"\x95\x01\x01\xc0\xc0\x92" + _array(limits.MAX_MEMBER_COUNT + 1, _REPLICA) + b"\x90"
    ),
    "learners of a forced configuration": _entry_append(
        b"\x95\x01\x01\xc0\xc0\x92\x90" + _array(limits.MAX_MEMBER_COUNT + 1, _REPLICA)
    ),
    "learners a change adds": _entry_append(
        b"\x94\x01\x01\xc0\x94" + _array(limits.MAX_MEMBER_COUNT + 1, _REPLICA) + b"\x90\xc0\xc0"
    ),
}


@pytest.mark.parametrize("message", OVER_THEIR_OWN_BOUNDS.values(), ids=OVER_THEIR_OWN_BOUNDS.keys())
def test_configurations_and_commands_over_their_bounds_are_refused_before_their_items_are_built(
    message: bytes,
) -> None:
    """The codec decodes Membership, ConfChange and the commands as they are: the bounds they
    declare must hold inside an AppendEntries just as the codec's mirrors of them used to."""
    _assert_refused_before_its_items_are_built(message)


def test_configurations_and_commands_at_their_bounds_are_taken() -> None:
    voters = tuple(MemberId(f"{i:04d}", "a") for i in range(limits.MAX_MEMBER_COUNT))
    commands = (c.AddMembers(tuple(c.MemberRecord(v) for v in voters)), c.RemoveMembers(voters))
    entries = (
        LogEntry(term=1, index=1, command=commands),
        LogEntry(term=1, index=2, command=None, change=None, forced=Membership(voters, ())),
    )
    message = r.AppendEntries(term=1, prev_index=0, prev_term=0, entries=entries, commit=0, sent_ms=0)
    assert codec.FrameDecoder().feed(codec.encode(message)) == [message]


def test_a_refused_bytearray_body_can_still_be_resized() -> None:
    """Found by an outside tester: a view of the body kept by the refusal's traceback stopped its
    owner resizing it (BufferError)."""
    fast = b"\x92" + bytes([codec.PROTOCOL_VERSION]) + b"\xc1"
    slow = b"\x92\xcc" + bytes([codec.PROTOCOL_VERSION]) + b"\x91\x63"  # the header's Raw, then no message 99
    for body in (bytearray(fast), bytearray(slow), bytearray(_body([122, 1, "put", "m", [5], [5], []]))):
        with pytest.raises(ProtocolError) as refused:
            codec.decode_body(body)
        body.extend(b"more")
        assert refused.value is not None


def test_a_frame_holds_its_own_bytes_only() -> None:
    """Found by an outside tester: the buffer msgspec encodes into grows by half at a time; handed
    out as the frame, a queued frame held up to 1.5 times the bytes it counted for."""
    frame = codec.encode(
        map_reply(call_id=1, codes=(m.ReplyCode.OK,) * 10_000, values=tuple(b"v" * 100 for _ in range(10_000)))
    )
    assert type(frame) is bytes
    assert sys.getsizeof(frame) - len(frame) < 100


# --- frames refused by their kind, before they are decoded -------------------------------------


def _empty_commands_append_entries(entries: int, commands: int) -> bytes:
    """An AppendEntries body of ``entries`` entries of ``commands`` StopAllMembers commands each
    (2 bytes apiece on the wire; a struct and two tuple slots each once decoded)."""
    entry = b"\x93\x01\x01" + _array(commands, b"\x91\x45")
    return b"\x92" + bytes([codec.PROTOCOL_VERSION]) + b"\x97\x2a\x01\x00\x00" + _array(entries, entry) + b"\x00\x00"


def test_a_frame_of_a_kind_not_taken_is_refused_before_it_is_decoded() -> None:
    """Found by an outside tester: 16 MiB of empty commands in one AppendEntries, within every
    bound, decoded to 385 MiB before anything asked who sent it. A connection that takes only the
    handshake (or a client's requests) refuses it from its code, without building it."""
    body = _empty_commands_append_entries(400, 10_000)  # 8 MB on the wire
    frame = codec.LENGTH_PREFIX.pack(len(body)) + body
    decoder = codec.FrameDecoder(accepted=codec.codes_of([m.MemberStatusRequest, m.MapRequest]))
    tracemalloc.start()
    try:
        with pytest.raises(codec.StreamError, match="AppendEntries is not taken on this connection"):
            decoder.feed(frame)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * len(frame), f"refusing an {len(frame)}-byte frame took {peak} bytes"
    # The same frame is a message where every kind is taken (between members).
    (message,) = codec.FrameDecoder().feed(frame)
    assert isinstance(message, r.AppendEntries)


@pytest.mark.parametrize(
    "code_bytes",
    [
        b"\x0d",
        b"\xcc\x0d",
        b"\xcd\x00\x0d",
        b"\xce\x00\x00\x00\x0d",
        b"\xcf" + bytes(7) + b"\x0d",
        b"\xd0\x0d",
        b"\xd1\x00\x0d",
        b"\xd2\x00\x00\x00\x0d",
        b"\xd3" + bytes(7) + b"\x0d",
    ],
)
def test_a_message_code_is_read_in_every_int_form(code_bytes: bytes) -> None:
    # msgspec accepts a tag written in a longer form; the check reads it the same way.
    body = b"\x92" + bytes([codec.PROTOCOL_VERSION]) + b"\x91" + code_bytes
    assert codec.decode_body(body, codec.codes_of([Welcome])) == Welcome()
    with pytest.raises(ProtocolError, match="Welcome is not taken"):
        codec.decode_body(body, codec.codes_of([m.MemberStatusRequest]))


@pytest.mark.parametrize("message_bytes", [b"", b"\x90", b"\x91", b"\x91\xcc", b"\xc0", b"\x91\xa3abc", b"\xdc\x00"])
def test_a_message_without_a_readable_code_is_refused_where_kinds_are_checked(message_bytes: bytes) -> None:
    body = b"\x92" + bytes([codec.PROTOCOL_VERSION]) + message_bytes
    with pytest.raises(ProtocolError):
        codec.decode_body(body, codec.codes_of([m.MemberStatusRequest]))


def test_a_frame_completed_across_reads_is_not_held_twice_while_it_decodes() -> None:
    """Found by an outside tester: completing a held frame kept the held bytes while the copy
    decoded, a peak of three frames (46.6 MiB for a 16 MB frame in 256 KiB reads)."""
    value = b"v" * (4 * 1024 * 1024)
    frame = codec.encode(map_reply(call_id=1, codes=(m.ReplyCode.OK,), values=(value,)))
    decoder = codec.FrameDecoder()
    reads = [frame[i : i + 256 * 1024] for i in range(0, len(frame), 256 * 1024)]
    tracemalloc.start()  # before the held bytes are, so that they count
    try:
        for piece in reads[:-1]:
            assert decoder.feed(piece) == []
        tracemalloc.reset_peak()
        (reply,) = decoder.feed(reads[-1])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert values(reply) == (value,)
    assert peak < 2.5 * len(frame), f"completing a {len(frame)}-byte frame peaked at {peak} bytes"


def test_a_view_that_skips_bytes_decodes_or_is_refused_as_a_protocol_error() -> None:
    # Found by an outside tester: a strided view of bytes reached msgspec as it was (BufferError).
    frame_body = codec.encode(m.MemberStatusRequest(7))[codec.LENGTH_PREFIX.size :]
    spread = bytes(b for byte in frame_body for b in (byte, 0))
    assert codec.decode_body(memoryview(spread)[::2]) == m.MemberStatusRequest(7)


@pytest.mark.parametrize("cls", WIRE_TYPES, ids=lambda cls: cls.__name__)
@settings(max_examples=10, deadline=None)
@given(data=st.data(), taken=st.sets(st.sampled_from(WIRE_TYPES), max_size=8), split=st.integers(1, 64))
def test_a_decoder_takes_exactly_the_kinds_it_is_told(
    cls: type, data: st.DataObject, taken: set[type], split: int
) -> None:
    """Every kind of message, against random sets of kinds taken, its frame fed whole or in pieces:
    decoded when its kind is taken, refused (StreamError naming it) when not."""
    message = data.draw(instances(cls))
    frame = codec.encode(message)
    decoder = codec.FrameDecoder(accepted=codec.codes_of(taken))
    pieces = [frame[i : i + split] for i in range(0, len(frame), split)]
    if cls in taken:
        decoded = [out for piece in pieces for out in decoder.feed(piece)]
        assert [type(out) for out in decoded] == [cls]
    else:
        for piece in pieces[:-1]:
            assert decoder.feed(piece) == []  # not yet a whole frame: nothing is decoded
        with pytest.raises(codec.StreamError, match=f"{cls.__name__} is not taken"):
            decoder.feed(pieces[-1])


@pytest.mark.parametrize("code_bytes", [b"\xd0\xf3", b"\xd1\xff\xf3", b"\xcd\x01\x0d", b"\xce\x01\x00\x00\x0d"])
def test_a_code_in_a_longer_form_is_read_as_its_own_number(code_bytes: bytes) -> None:
    # -13 and 269, 16,777,229: not Welcome's 13, read as msgspec reads them (and refused by it).
    body = b"\x92" + bytes([codec.PROTOCOL_VERSION]) + b"\x91" + code_bytes
    with pytest.raises(ProtocolError, match="is not taken"):
        codec.decode_body(body, codec.codes_of([Welcome]))


def test_a_decoder_refuses_a_frame_over_a_limit_lowered_for_the_handshake() -> None:
    hello_sized = codec.encode(m.MemberStatusRequest(1))
    decoder = codec.FrameDecoder(accepted=codec.HANDSHAKE_CODES)
    decoder.max_frame_bytes = limits.MAX_HANDSHAKE_FRAME_BYTES
    with pytest.raises(codec.StreamError, match="over the 8192 limit"):
        decoder.feed(codec.LENGTH_PREFIX.pack(limits.MAX_HANDSHAKE_FRAME_BYTES + 1))
    assert len(hello_sized) < limits.MAX_HANDSHAKE_FRAME_BYTES


def test_the_largest_handshake_messages_fit_the_handshake_frame_limit() -> None:
    """Every field of a handshake message at its longest, in 4-byte characters: the small limit a
    connection has while it shakes hands never refuses an honest peer."""
    from shardgrid.core import session as hs
    from shardgrid.core.identity import MAX_ADDRESS_CHARS, MAX_UUID_CHARS

    wide = "\U0001f600"
    replica = MemberId(wide * MAX_UUID_CHARS, wide * MAX_ADDRESS_CHARS)
    nonce = bytes(hs.NONCE_BYTES)
    largest = [
        hs.Hello(
            protocol_version=2**53,
            cluster_name=wide * hs.MAX_CLUSTER_NAME_CHARS,
            role=hs.PeerRole.MEMBER,
            identity=replica,
            to_address=wide * MAX_ADDRESS_CHARS,
            nonce=nonce,
        ),
        hs.Challenge(replica, nonce, bytes(hs.PROOF_BYTES)),
        hs.Proof(bytes(hs.PROOF_BYTES)),
        hs.Refused(wide * hs.MAX_REASON_CHARS),
    ]
    for message in largest:
        assert len(codec.encode(message)) <= limits.MAX_HANDSHAKE_FRAME_BYTES, type(message).__name__
