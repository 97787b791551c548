"""One codec for every message: msgspec's msgpack, with a protocol version and a size limit per frame.

A frame is a 4-byte big-endian length followed by a msgpack array ``[version, message]``. Messages
and log commands are msgspec Structs (``core/wire.py``) encoded as arrays whose first element is
the type's explicit, stable code (its ``tag``). Decoding is typed: msgspec builds exactly the
registered types and checks every field's type and bound in C; anything else is the peer's fault
and raises ``ProtocolError``. The two values that are not Structs travel in a shape of their own:
the partition table as seed 003 publishes it (the replicas once, then each partition's version and
replica indexes) and the metadata state as its defining fields. A frame over ``MAX_FRAME_BYTES`` is
refused on both sides.

Raft's configurations and the log's commands carry their own length bounds, so they are decoded as
they are. Raft's entries and snapshots do not: Raft leaves their counters unbounded and their
command and state opaque, and a table inside a command or a state travels in its own shape. A frame
that carries them (AppendEntries, InstallSnapshot) is decoded into mirrors defined here, which bound
the counters and name the wire shapes, and then turned into the real types: a bound is only worth
something if msgspec checks it before it builds what lies past it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Union

import msgspec

from shardgrid.core import messages as m
from shardgrid.core import session as handshake
from shardgrid.core.errors import CorruptDisk, InvariantViolation, ProtocolError, ShardgridError, invariant
from shardgrid.core.identity import MemberIds
from shardgrid.core.limits import (
    MAX_COMMANDS_PER_ENTRY,
    MAX_COMPLETED_IN_METADATA,
    MAX_ENTRIES_PER_APPEND,
    MAX_ENTRIES_PER_RAFT_WRITE,
    MAX_FRAME_BYTES,
    MAX_MEMBER_COUNT,
    MAX_PARTITION_COUNT,
    MAX_REPLICA_COUNT,
)
from shardgrid.core.metadata import commands as c
from shardgrid.core.metadata.cluster_state import ClusterState
from shardgrid.core.metadata.state import MetadataState
from shardgrid.core.migration import MigrationRecord
from shardgrid.core.raft import messages as r
from shardgrid.core.raft.log import Entry, Snapshot
from shardgrid.core.raft.membership import ConfChange, Membership
from shardgrid.core.raft.storage import HardState, RaftWrite
from shardgrid.core.table import PartitionTable
from shardgrid.core.wire import Counter, Message, Record

# 9: keys and values as packed columns (map requests, replies and backup runs); 8: founding
# messages name the proposer; 7: deadlines and write ids on map requests, unreachable
# members; 6: packed scan pages
PROTOCOL_VERSION = 9
LENGTH_PREFIX = struct.Struct(">I")

COMMAND_TYPES: tuple[type[Message], ...] = (
    c.AddMembers,
    c.RemoveMembers,
    c.AssignPartitions,
    c.StartMigrations,
    c.FinishMigrations,
    c.SetClusterState,
    c.PromoteToDataMember,
    c.MarkLeaving,
    c.StopAllMembers,
    c.ResumeAfterShutdown,
    c.MarkUnreachable,
    c.MarkReachable,
    c.ReviveUnavailable,
    c.ReaddressMember,
    c.AwaitMembers,
)


def _frame_types() -> tuple[type[Message], ...]:
    found = [
        cls
        for module in (m, r, handshake)
        for cls in vars(module).values()
        if isinstance(cls, type) and issubclass(cls, Message) and cls.__module__ == module.__name__
    ]
    return tuple(sorted(found, key=lambda cls: cls.__struct_config__.tag))


FRAME_TYPES: tuple[type[Message], ...] = _frame_types()

WIRE_CODES: dict[type, int] = {cls: cls.__struct_config__.tag for cls in (*FRAME_TYPES, *COMMAND_TYPES)}
if len(set(WIRE_CODES.values())) != len(WIRE_CODES) or not all(
    isinstance(code, int) and 0 < code < 2**15 for code in WIRE_CODES.values()
):
    raise InvariantViolation("wire codes must be distinct positive ints")


# --- the wire shapes of values that are not Structs -------------------------------------------------

# Per partition, an index into the table's replicas or -1 per slot.
_TableRow = Annotated[
    tuple[Annotated[int, msgspec.Meta(ge=-1, lt=MAX_MEMBER_COUNT)], ...],
    msgspec.Meta(min_length=MAX_REPLICA_COUNT, max_length=MAX_REPLICA_COUNT),
]


class _WireTable(Record):
    replicas: MemberIds
    versions: Annotated[tuple[m.PartitionVersion, ...], msgspec.Meta(max_length=MAX_PARTITION_COUNT)]
    slots: Annotated[tuple[_TableRow, ...], msgspec.Meta(max_length=MAX_PARTITION_COUNT)]


class _WireState(Record, kw_only=True):
    partition_count: Annotated[int, msgspec.Meta(ge=1, le=MAX_PARTITION_COUNT)]
    members: c.Members
    table: _WireTable | None
    cluster_state: ClusterState
    migrations: c.MigrationRecords
    completed: Annotated[tuple[MigrationRecord, ...], msgspec.Meta(max_length=MAX_COMPLETED_IN_METADATA)]
    shut_down: bool
    parting: bool = False
    shutting_down: bool = False


def _table_to_wire(table: PartitionTable) -> _WireTable:
    replicas = table.members()
    index_of = {replica: i for i, replica in enumerate(replicas)}
    slots = tuple(tuple(-1 if held is None else index_of[held] for held in row) for row in table.replicas)
    return _WireTable(tuple(replicas), tuple(table.versions), slots)


def _table_from_wire(wire: _WireTable) -> PartitionTable:
    count = len(wire.versions)
    if not 0 < count <= MAX_PARTITION_COUNT or len(wire.slots) != count:
        raise ProtocolError("a table's slots do not match its partitions")
    replicas = wire.replicas
    # Distinct replicas make distinct indexes name distinct members: with one replica listed twice,
    # a row could hold it in two slots, which no table may (``normalize_slots``).
    if len(set(replicas)) != len(replicas):
        raise ProtocolError("a table lists a replica twice")
    known = len(replicas)
    rows = []
    for row in wire.slots:
        if len(row) != MAX_REPLICA_COUNT or any(not -1 <= i < known for i in row):
            raise ProtocolError("a table row names an unknown replica or has the wrong length")
        named = [i for i in row if i != -1]
        if len(named) != len(set(named)):
            raise ProtocolError("a table row names a replica twice")
        rows.append(tuple(None if i == -1 else replicas[i] for i in row))
    return PartitionTable(tuple(rows), wire.versions)


def _state_to_wire(state: MetadataState) -> _WireState:
    return _WireState(
        partition_count=state.partition_count,
        members=state.members,
        table=None if state.table is None else _table_to_wire(state.table),
        cluster_state=state.cluster_state,
        migrations=tuple(state.migrations[pid] for pid in sorted(state.migrations)),
        completed=state.completed,
        shut_down=state.shut_down,
        parting=state.parting,
        shutting_down=state.shutting_down,
    )


def _state_from_wire(wire: _WireState) -> MetadataState:
    count = wire.partition_count
    table = None if wire.table is None else _table_from_wire(wire.table)
    if table is not None and table.partition_count != count:
        raise ProtocolError(f"a state of {count} partitions holds a table of {table.partition_count}")
    migrations = {record.partition_id: record for record in wire.migrations}
    if len(migrations) != len(wire.migrations):
        raise ProtocolError("a state names two migrations of one partition")
    if any(not 0 <= pid < count for pid in migrations):
        raise ProtocolError("a state names a migration of a partition it does not have")
    return MetadataState(
        wire.partition_count,
        wire.members,
        table,
        wire.cluster_state,
        migrations,
        wire.completed,
        wire.shut_down,
        wire.parting,
        wire.shutting_down,
    )


# --- mirrors: what needs a conversion, and Raft's records with the concrete types they carry -------
# Each has its original's fields in its original's order (checked below), so both encode alike.


class _WireAssignPartitions(Message, tag=63):
    table: _WireTable


_WIRE_COMMAND_TYPES: tuple[type[Message], ...] = (
    c.AddMembers,
    c.RemoveMembers,
    _WireAssignPartitions,
    c.StartMigrations,
    c.FinishMigrations,
    c.SetClusterState,
    c.PromoteToDataMember,
    c.MarkLeaving,
    c.StopAllMembers,
    c.ResumeAfterShutdown,
    c.MarkUnreachable,
    c.MarkReachable,
    c.ReviveUnavailable,
    c.ReaddressMember,
    c.AwaitMembers,
)
_WireCommands = Annotated[
    tuple[Union[_WIRE_COMMAND_TYPES], ...],  # type: ignore[valid-type]  # noqa: UP007
    msgspec.Meta(max_length=MAX_COMMANDS_PER_ENTRY),
]


class _WireEntry(Record, kw_only=True):
    term: Counter
    index: Counter
    command: _WireCommands | None = None
    change: ConfChange | None = None
    forced: Membership | None = None


class _WireSnapshot(Record):
    index: Counter
    term: Counter
    membership: Membership
    state: _WireState


class _WireAppendEntries(Message, tag=42, kw_only=True):
    term: Counter
    prev_index: Counter
    prev_term: Counter
    entries: Annotated[tuple[_WireEntry, ...], msgspec.Meta(max_length=MAX_ENTRIES_PER_APPEND)]
    commit: Counter
    sent_ms: Counter


class _WireInstallSnapshot(Message, tag=46):
    term: Counter
    snapshot: _WireSnapshot
    sent_ms: Counter


_MIRRORS: dict[type, type] = {
    _WireAssignPartitions: c.AssignPartitions,
    _WireEntry: Entry,
    _WireSnapshot: Snapshot,
    _WireAppendEntries: r.AppendEntries,
    _WireInstallSnapshot: r.InstallSnapshot,
}


def _check_mirrors() -> None:
    # A field added to an original but not to its mirror would make frames of it undecodable.
    for mirror, original in _MIRRORS.items():
        same = mirror.__struct_fields__ == original.__struct_fields__
        same = same and mirror.__struct_config__.tag == original.__struct_config__.tag
        invariant(same, f"the codec's mirror of {original.__name__} no longer matches it")


_check_mirrors()


def _command_from_wire(wire: Any) -> Any:
    if type(wire) is _WireAssignPartitions:
        return c.AssignPartitions(_table_from_wire(wire.table))
    return wire


def _entry_from_wire(wire: _WireEntry) -> Entry:
    return Entry(
        term=wire.term,
        index=wire.index,
        command=None if wire.command is None else tuple(_command_from_wire(command) for command in wire.command),
        change=wire.change,
        forced=wire.forced,
    )


def _append_from_wire(wire: _WireAppendEntries) -> r.AppendEntries:
    entries = tuple(_entry_from_wire(entry) for entry in wire.entries)
    return r.AppendEntries(
        term=wire.term,
        prev_index=wire.prev_index,
        prev_term=wire.prev_term,
        entries=entries,
        commit=wire.commit,
        sent_ms=wire.sent_ms,
    )


def _install_from_wire(wire: _WireInstallSnapshot) -> r.InstallSnapshot:
    shot = wire.snapshot
    snapshot = Snapshot(shot.index, shot.term, shot.membership, _state_from_wire(shot.state))
    return r.InstallSnapshot(wire.term, snapshot, wire.sent_ms)


_FROM_WIRE: dict[type, Callable[[Any], Any]] = {
    _WireAppendEntries: _append_from_wire,
    _WireInstallSnapshot: _install_from_wire,
}
_DECODED_AS: dict[type, type] = {original: mirror for mirror, original in _MIRRORS.items() if mirror in _FROM_WIRE}
_FRAME_DECODE_TYPES = tuple(_DECODED_AS.get(cls, cls) for cls in FRAME_TYPES)
FrameMessage = Union[_FRAME_DECODE_TYPES]  # type: ignore[valid-type]  # noqa: UP007


def _enc_hook(value: Any) -> Any:
    if type(value) is PartitionTable:
        return _table_to_wire(value)
    if type(value) is MetadataState:
        return _state_to_wire(value)
    raise NotImplementedError(f"cannot encode {type(value).__name__}")


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_HEADER = msgspec.msgpack.Decoder(tuple[int, msgspec.Raw])
_MESSAGE = msgspec.msgpack.Decoder(FrameMessage)
# A two-item array, then the version as a positive fixint: how msgspec writes ``[PROTOCOL_VERSION, m]``.
invariant(0 <= PROTOCOL_VERSION < 0x80, "the protocol version is a positive fixint")
_CURRENT_HEADER = bytes([0x92, PROTOCOL_VERSION])


def encode(message: Any) -> bytes:
    """The frame for ``message``: length prefix, then ``[PROTOCOL_VERSION, message]``. Copied out of
    the buffer it was encoded into: that buffer grows by half at a time and keeps what it grew by
    (found by an outside tester: a queued frame held up to 1.5 times the bytes it counted for)."""
    # What we send is ours: a value that cannot be encoded is our bug (TypeError), not the peer's.
    if type(message) not in WIRE_CODES or type(message) in COMMAND_TYPES:
        raise TypeError(f"cannot encode {type(message).__name__}: not a message")
    buffer = bytearray(LENGTH_PREFIX.size)
    try:
        _ENCODER.encode_into((PROTOCOL_VERSION, message), buffer, LENGTH_PREFIX.size)
    except (TypeError, NotImplementedError, OverflowError) as error:
        raise TypeError(f"cannot encode {type(message).__name__}: {error}") from error
    length = len(buffer) - LENGTH_PREFIX.size
    if length > MAX_FRAME_BYTES:
        raise ProtocolError(f"{type(message).__name__} needs {length} bytes, over the {MAX_FRAME_BYTES} limit")
    LENGTH_PREFIX.pack_into(buffer, 0, length)
    return bytes(buffer)


_TYPE_OF_CODE: dict[int, type] = {code: cls for cls, code in WIRE_CODES.items()}


def codes_of(types: Iterable[type]) -> frozenset[int]:
    """The wire codes of message types: what ``decode_body`` and ``FrameDecoder`` take as
    ``accepted``."""
    return frozenset(WIRE_CODES[cls] for cls in types)


# What a connection takes until its handshake is done: the handshake's own messages.
HANDSHAKE_CODES = codes_of(handshake.HANDSHAKE_TYPES)


# msgpack's int forms after the first byte: (bytes of the number, signed).
_INT_FORMS = {0xCC: (1, False), 0xCD: (2, False), 0xCE: (4, False), 0xCF: (8, False)}
_INT_FORMS |= {0xD0: (1, True), 0xD1: (2, True), 0xD2: (4, True), 0xD3: (8, True)}


def _message_code(raw: bytes | memoryview | msgspec.Raw) -> int | None:
    """The code a message states first (msgspec writes a tagged array-like struct as an array whose
    first item is its tag), in any of msgpack's int forms, as msgspec reads it: read from a few
    bytes, before anything of it is decoded. None when the bytes do not start so."""
    with memoryview(raw) as view:
        head = view[:14].tobytes()
    if not head:
        return None
    first = head[0]
    start = 1 if 0x91 <= first <= 0x9F else 3 if first == 0xDC else 5 if first == 0xDD else 0
    if not start or len(head) <= start:
        return None
    code = head[start]
    if code < 0x80:
        return code
    form = _INT_FORMS.get(code)
    if form is None or len(head) < start + 1 + form[0]:
        return None
    width, signed = form
    return int.from_bytes(head[start + 1 : start + 1 + width], "big", signed=signed)


def decode_body(body: bytes | bytearray | memoryview, accepted: frozenset[int] | None = None) -> Any:
    """The message of one frame body (without its length prefix). ``accepted``: the wire codes
    (``codes_of``) this connection takes now, checked before the message is decoded; None takes
    every message."""
    raw: bytes | memoryview | msgspec.Raw
    if type(body) is not bytes and not (type(body) is memoryview and type(body.obj) is bytes and body.contiguous):
        # A view of a bytearray (the fast path's, or the header's Raw), kept by a refusal's
        # traceback, stopped its owner resizing it (found by an outside tester): decode a copy.
        # A view of bytes is decoded as it is: bytes never change size (unless it skips bytes,
        # which msgspec does not read).
        body = bytes(body)
    if body[:2] == _CURRENT_HEADER:
        # Our version's header, as every frame we write has it: the message is the rest. (Decoded
        # through ``_HEADER``, the whole message was walked once to find where it ends.)
        raw = memoryview(body)[2:]
    else:
        try:
            version, raw = _HEADER.decode(body)
        except (msgspec.MsgspecError, RecursionError) as error:
            raise ProtocolError(f"undecodable frame: {error}") from error
        if version != PROTOCOL_VERSION:
            raise ProtocolError(f"protocol version {version} is not {PROTOCOL_VERSION}")
    if accepted is not None:
        # Refused by its code, not decoded: a frame of a kind the connection does not take (a
        # member's AppendEntries before the handshake, or from a client) could otherwise make this
        # process build tens of times the frame's size first (found by an outside tester: 16 MiB of
        # empty commands in one AppendEntries became 385 MiB).
        code = _message_code(raw)
        if code not in accepted:
            kind = _TYPE_OF_CODE.get(code) if code is not None else None
            name = kind.__name__ if kind is not None else f"a message of code {code}"
            raise ProtocolError(f"{name} is not taken on this connection now")
    try:
        message = _MESSAGE.decode(raw)
        convert = _FROM_WIRE.get(type(message))
        return message if convert is None else convert(message)
    except ProtocolError:
        raise
    except (msgspec.MsgspecError, ShardgridError, ValueError, TypeError, IndexError, RecursionError) as error:
        # RecursionError: a frame nested deep enough to exhaust the stack (found by review).
        # A value the types accept but our constructors refuse (an index out of range, a voter that
        # is also a learner) is as much the peer's fault as a wrong type.
        raise ProtocolError(f"malformed message: {error}") from error


class StreamError(ProtocolError):
    """A byte stream broke at a bad frame. ``decoded`` holds the good messages that came before it
    in the same ``FrameDecoder.feed``, in order: they are as good as any, and a runtime handles
    them before it closes the connection."""

    def __init__(self, reason: str, decoded: list[Any]) -> None:
        super().__init__(reason)
        self.decoded = decoded


class FrameDecoder:
    """Splits a byte stream into messages; holds at most one partial frame.

    A runtime calls ``feed`` with what it read, handles the messages it returns, and on
    ``StreamError`` handles the error's ``decoded`` messages, then closes the connection::

        try:
            messages = decoder.feed(data)
        except StreamError as error:
            handle(error.decoded)
            close()
        else:
            handle(messages)

    The error comes in the same call as the bad frame, so the connection is closed at once, and no
    good frame before it is lost. The decoder is spent after a bad frame: nothing after it can be
    trusted to be framed right, so every later ``feed`` raises again (with nothing decoded).
    """

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES, accepted: frozenset[int] | None = None) -> None:
        self._buffer = bytearray()
        # Its owner may lower it while the connection shakes hands (MAX_HANDSHAKE_FRAME_BYTES); a
        # partial frame held is checked against it again when the rest arrives.
        self.max_frame_bytes = max_frame_bytes
        self._broken = ""  # why the stream broke ('' while it has not)
        # The wire codes taken (``codes_of``), None for all: its owner narrows it to what the
        # connection may carry now (the handshake's messages, then a client's requests). A frame
        # of another kind breaks the stream before it is decoded.
        self.accepted = accepted

    def feed(self, data: bytes) -> list[Any]:
        if self._broken:
            raise StreamError(f"the stream already broke: {self._broken}", [])
        if type(data) is not bytes:
            data = bytes(data)  # the frames below are decoded from views of it: it must not change
        out: list[Any] = []
        try:
            start = self._finish_held(data, out) if self._buffer else 0
            # Whole frames are decoded where they lie in ``data`` (immutable, so a view of it is
            # safe to keep): copied into the buffer and out again, every byte read crossed memory
            # twice more (a sixth of an export's reading task was copying).
            size = len(data)
            with memoryview(data) as view:
                while size - start >= LENGTH_PREFIX.size:
                    body_start = start + LENGTH_PREFIX.size
                    end = body_start + self._length_at(data, start)
                    if end > size:
                        break
                    out.append(decode_body(view[body_start:end], self.accepted))
                    start = end
                if start < size:
                    # A partial frame: the only bytes kept, copied once (a slice of ``data`` first
                    # would copy them twice).
                    self._buffer = bytearray(view[start:])
        except ProtocolError as error:
            self._broken = str(error) or type(error).__name__
            self._buffer = bytearray()
            raise StreamError(self._broken, out) from error
        return out

    @property
    def partial_frame_bytes(self) -> int:
        """The length of the frame held part-read, as its prefix declares it (what
        ``max_frame_bytes`` bounds); the bytes held while the prefix itself is incomplete; 0 when
        none is held. What a runtime budgets before it reads the rest (runtime.frame_budget)."""
        buffer = self._buffer
        if len(buffer) < LENGTH_PREFIX.size:
            return len(buffer)
        (length,) = LENGTH_PREFIX.unpack_from(buffer, 0)
        return int(length)

    def _length_at(self, source: bytes | bytearray, start: int) -> int:
        (length,) = LENGTH_PREFIX.unpack_from(source, start)
        if length > self.max_frame_bytes:
            raise ProtocolError(f"frame of {length} bytes is over the {self.max_frame_bytes} limit")
        return length

    def _finish_held(self, data: bytes, out: list[Any]) -> int:
        """Complete the partial frame held with the first bytes of ``data`` (only those it lacks);
        returns where the rest of ``data`` starts (its length when the frame is still partial)."""
        buffer = self._buffer
        taken = 0
        if len(buffer) < LENGTH_PREFIX.size:
            taken = min(LENGTH_PREFIX.size - len(buffer), len(data))
            buffer += data[:taken]
            if len(buffer) < LENGTH_PREFIX.size:
                return taken
        end = LENGTH_PREFIX.size + self._length_at(buffer, 0)
        more = min(end - len(buffer), len(data) - taken)
        with memoryview(data) as view:
            buffer += view[taken : taken + more]  # copied once, not sliced out first
        taken += more
        if len(buffer) == end:
            with memoryview(buffer) as view:
                body = bytes(view[LENGTH_PREFIX.size :])  # one copy of the frame, not two
            # Let go of the held bytes before decoding: held too, they made a frame's decode peak
            # at three times its size (found by an outside tester: 46.6 MiB for a 16 MB frame).
            self._buffer = bytearray()
            del buffer
            out.append(decode_body(body, self.accepted))
        return taken


# --- Raft's writes on a member's disk --------------------------------------------------------------
# Raft's entries and snapshots are kept in the shapes they travel in, so the disk and the wire are
# read by the same decoders and bounded alike. The disk's own framing (checksums) is disk_records.


class _DiskRaftWrite(Record, kw_only=True):
    hard_state: HardState | None = None
    snapshot: _WireSnapshot | None = None
    entries_from: Counter = 0
    entries: Annotated[tuple[_WireEntry, ...], msgspec.Meta(max_length=MAX_ENTRIES_PER_RAFT_WRITE)] = ()


_RAFT_WRITE = msgspec.msgpack.Decoder(_DiskRaftWrite)


def encode_raft_write(write: RaftWrite) -> bytes:
    invariant(len(write.entries) <= MAX_ENTRIES_PER_RAFT_WRITE, "a Raft step appended more than a write holds")
    # The real snapshot and entries encode exactly as their mirrors (checked above): no conversion.
    record = _DiskRaftWrite(
        hard_state=write.hard_state,
        snapshot=write.snapshot,  # type: ignore[arg-type]
        entries_from=write.entries_from,
        entries=write.entries,  # type: ignore[arg-type]
    )
    return _ENCODER.encode(record)


def decode_raft_write(payload: bytes) -> RaftWrite:
    """A write read back from the disk; ``CorruptDisk`` for bytes no member wrote."""
    try:
        wire = _RAFT_WRITE.decode(payload)
        shot = wire.snapshot
        snapshot = None
        if shot is not None:
            snapshot = Snapshot(shot.index, shot.term, shot.membership, _state_from_wire(shot.state))
        entries = tuple(_entry_from_wire(entry) for entry in wire.entries)
        return RaftWrite(hard_state=wire.hard_state, snapshot=snapshot, entries_from=wire.entries_from, entries=entries)
    except (msgspec.MsgspecError, ShardgridError, ValueError, TypeError, IndexError, RecursionError) as error:
        raise CorruptDisk(f"a Raft record no member wrote: {error}") from error
