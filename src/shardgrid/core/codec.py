"""One codec for every message: msgspec's msgpack, with a protocol version and a size limit per frame.

A frame is a 4-byte big-endian length followed by a msgpack array ``[version, message]``. Messages
and log commands are msgspec Structs (``core/wire.py``) encoded as arrays whose first element is
the type's explicit, stable code (its ``tag``). Decoding is typed: msgspec builds exactly the
registered types and checks every field's type in C; anything else is the peer's fault and raises
``ProtocolError``. The two values that are not Structs travel in a shape of their own: the partition
table as seed 003 publishes it (the replicas once, then each partition's version and replica
indexes) and the metadata state as its defining fields. A frame over ``MAX_FRAME_BYTES`` is refused
on both sides.
"""

from __future__ import annotations

import struct
from typing import Any, Union

import msgspec

from shardgrid.core import messages as m
from shardgrid.core.errors import InvariantViolation, ProtocolError, ShardgridError
from shardgrid.core.identity import Replica
from shardgrid.core.limits import MAX_FRAME_BYTES, MAX_PARTITION_COUNT, MAX_REPLICA_COUNT
from shardgrid.core.metadata import commands as c
from shardgrid.core.metadata.cluster_state import ClusterState
from shardgrid.core.metadata.state import MetadataState
from shardgrid.core.migration import MigrationRecord
from shardgrid.core.raft import messages as r
from shardgrid.core.table import PartitionTable
from shardgrid.core.wire import Message, Record

PROTOCOL_VERSION = 3
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
    c.ShutdownCluster,
)
CommandBatch = tuple[Union[COMMAND_TYPES], ...]  # type: ignore[valid-type]  # noqa: UP007


def _frame_types() -> tuple[type[Message], ...]:
    found = [
        cls
        for module in (m, r)
        for cls in vars(module).values()
        if isinstance(cls, type) and issubclass(cls, Message) and cls.__module__ == module.__name__
    ]
    return tuple(sorted(found, key=lambda cls: cls.__struct_config__.tag))


FRAME_TYPES: tuple[type[Message], ...] = _frame_types()
# Raft leaves an entry's command and a snapshot's state open; on the wire they are ours.
_FRAME_DECODE_TYPES = tuple(
    r.AppendEntries[CommandBatch]  # type: ignore[index]
    if cls is r.AppendEntries
    else r.InstallSnapshot[MetadataState]  # type: ignore[index]
    if cls is r.InstallSnapshot
    else cls
    for cls in FRAME_TYPES
)
FrameMessage = Union[_FRAME_DECODE_TYPES]  # type: ignore[valid-type]  # noqa: UP007

WIRE_CODES: dict[type, int] = {cls: cls.__struct_config__.tag for cls in (*FRAME_TYPES, *COMMAND_TYPES)}
if len(set(WIRE_CODES.values())) != len(WIRE_CODES) or not all(
    isinstance(code, int) and 0 < code < 2**15 for code in WIRE_CODES.values()
):
    raise InvariantViolation("wire codes must be distinct positive ints")


class _WireTable(Record):
    replicas: tuple[Replica, ...]
    versions: tuple[int, ...]
    slots: tuple[tuple[int, ...], ...]  # per partition, an index into replicas or -1 per slot


class _WireState(Record):
    partition_count: int
    members: tuple[c.MemberRecord, ...]
    table: PartitionTable | None
    cluster_state: ClusterState
    migrations: tuple[MigrationRecord, ...]
    completed: tuple[MigrationRecord, ...]
    shut_down: bool


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
        state.partition_count,
        state.members,
        state.table,
        state.cluster_state,
        tuple(state.migrations[pid] for pid in sorted(state.migrations)),
        state.completed,
        state.shut_down,
    )


def _state_from_wire(wire: _WireState) -> MetadataState:
    count = wire.partition_count
    if wire.table is not None and wire.table.partition_count != count:
        raise ProtocolError(f"a state of {count} partitions holds a table of {wire.table.partition_count}")
    migrations = {record.partition_id: record for record in wire.migrations}
    if len(migrations) != len(wire.migrations):
        raise ProtocolError("a state names two migrations of one partition")
    if any(not 0 <= pid < count for pid in migrations):
        raise ProtocolError("a state names a migration of a partition it does not have")
    return MetadataState(
        wire.partition_count,
        wire.members,
        wire.table,
        wire.cluster_state,
        migrations,
        wire.completed,
        wire.shut_down,
    )


def _enc_hook(value: Any) -> Any:
    if type(value) is PartitionTable:
        return _table_to_wire(value)
    if type(value) is MetadataState:
        return _state_to_wire(value)
    raise NotImplementedError(f"cannot encode {type(value).__name__}")


def _dec_hook(kind: type, value: Any) -> Any:
    if kind is PartitionTable:
        return _table_from_wire(msgspec.convert(value, _WireTable, dec_hook=_dec_hook))
    if kind is MetadataState:
        return _state_from_wire(msgspec.convert(value, _WireState, dec_hook=_dec_hook))
    raise NotImplementedError(f"cannot decode {kind.__name__}")


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_HEADER = msgspec.msgpack.Decoder(tuple[int, msgspec.Raw])
_MESSAGE = msgspec.msgpack.Decoder(FrameMessage, dec_hook=_dec_hook)


def encode(message: Any) -> bytes:
    """The frame for ``message``: length prefix, then ``[PROTOCOL_VERSION, message]``."""
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


def decode_body(body: bytes) -> Any:
    """The message of one frame body (without its length prefix)."""
    try:
        version, raw = _HEADER.decode(body)
    except (msgspec.MsgspecError, RecursionError) as error:
        raise ProtocolError(f"undecodable frame: {error}") from error
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {version} is not {PROTOCOL_VERSION}")
    try:
        return _MESSAGE.decode(raw)
    except ProtocolError:
        raise
    except (msgspec.MsgspecError, ShardgridError, ValueError, TypeError, IndexError, RecursionError) as error:
        # RecursionError: a frame nested deep enough to exhaust the stack (found by review).
        # A value the types accept but our constructors refuse (an index out of range, a voter that
        # is also a learner) is as much the peer's fault as a wrong type.
        raise ProtocolError(f"malformed message: {error}") from error


class FrameDecoder:
    """Splits a byte stream into messages; holds at most one partial frame."""

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self._buffer = bytearray()
        self._max_frame_bytes = max_frame_bytes

    def feed(self, data: bytes) -> list[Any]:
        self._buffer += data
        out = []
        while len(self._buffer) >= LENGTH_PREFIX.size:
            (length,) = LENGTH_PREFIX.unpack_from(self._buffer)
            if length > self._max_frame_bytes:
                raise ProtocolError(f"frame of {length} bytes is over the {self._max_frame_bytes} limit")
            end = LENGTH_PREFIX.size + length
            if len(self._buffer) < end:
                break
            body = bytes(self._buffer[LENGTH_PREFIX.size : end])
            del self._buffer[:end]
            out.append(decode_body(body))
        return out
