"""One codec for every message: msgpack, with a protocol version and a size limit per frame.

A frame is a 4-byte big-endian length followed by a msgpack array ``[version, message]``. Every
type that may travel has an explicit, stable code in ``WIRE_CODES`` (adding a type never renumbers
the others); dataclasses travel as an extension value holding their fields, enums by value, and
the partition table in seed 003's shape: the replicas once, then each partition's version and
replica indexes. Decoding rebuilds exactly the registered types and refuses anything else, and a
frame over ``MAX_FRAME_BYTES`` is refused on both sides.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
from typing import Any

import msgpack

from shardgrid.core import messages as m
from shardgrid.core.errors import InvariantViolation, ProtocolError
from shardgrid.core.identity import Replica
from shardgrid.core.limits import MAX_FRAME_BYTES, MAX_REPLICA_COUNT
from shardgrid.core.metadata import commands as c
from shardgrid.core.metadata.cluster_state import ClusterState
from shardgrid.core.metadata.state import MetadataState
from shardgrid.core.migration import Migration, MigrationRecord, MigrationStatus
from shardgrid.core.raft import messages as r
from shardgrid.core.raft.log import Entry as LogEntry
from shardgrid.core.raft.log import Snapshot
from shardgrid.core.raft.membership import ConfChange, Membership
from shardgrid.core.table import PartitionTable

PROTOCOL_VERSION = 2
LENGTH_PREFIX = struct.Struct(">I")

# Stable codes: never reuse or renumber one; a new type takes the next free code. msgpack's
# extension codes are 0..127.
WIRE_CODES: dict[type, int] = {
    # shared records 1-19
    Replica: 1,
    Migration: 2,
    MigrationRecord: 3,
    MigrationStatus: 4,
    ClusterState: 5,
    m.Entry: 6,
    m.Operation: 7,
    PartitionTable: 8,
    # discovery and leases 20-39
    m.JoinRequest: 20,
    m.JoinRedirect: 21,
    m.JoinRejected: 22,
    m.Unjoined: 23,
    m.Bootstrap: 24,
    m.NotAMember: 25,
    m.LeaseRequest: 26,
    m.LeaseGrant: 27,
    # raft 40-59
    r.VoteRequest: 40,
    r.VoteReply: 41,
    r.AppendEntries: 42,
    r.AppendReply: 43,
    r.Heartbeat: 44,
    r.HeartbeatReply: 45,
    r.InstallSnapshot: 46,
    r.TimeoutNow: 47,
    LogEntry: 48,
    Snapshot: 49,
    Membership: 50,
    ConfChange: 51,
    MetadataState: 52,
    # log commands 60-79
    c.MemberRecord: 60,
    c.AddMembers: 61,
    c.RemoveMembers: 62,
    c.AssignPartitions: 63,
    c.StartMigrations: 64,
    c.FinishMigrations: 65,
    c.SetClusterState: 66,
    c.PromoteToDataMember: 67,
    c.MarkLeaving: 68,
    c.ShutdownCluster: 69,
    # migrations 80-99
    m.MigrationChunk: 80,
    m.MigrationChunkAck: 81,
    m.MigrationDataDone: 82,
    m.MigrationCommit: 83,
    m.MigrationCommitAck: 84,
    m.MigrationOutcomeQuery: 85,
    m.MigrationOutcomeReply: 86,
    # data and replication 100-109
    m.BackupOperation: 100,
    m.BackupAck: 101,
    m.ReplicaSyncChunk: 102,
    m.ReplicaSyncAck: 103,
    m.AssignPartitions: 104,
    m.ClientRequest: 105,
    m.OperationResult: 106,
    m.ClientReply: 107,
    m.TableRequest: 108,
    m.TableReply: 109,
    m.ReplicaSyncRequest: 119,
    # administration 110-127
    m.ChangeClusterState: 110,
    m.PromoteMember: 111,
    m.ShutdownMember: 112,
    m.ShutdownCluster: 113,
    m.AdminRequest: 114,
    m.AdminReply: 115,
    m.LeaderRequest: 116,
    m.LeaderReply: 117,
    m.RecoverLostMajority: 118,
}
_TYPE_OF: dict[int, type] = {code: cls for cls, code in WIRE_CODES.items()}
if len(_TYPE_OF) != len(WIRE_CODES) or not all(0 < code < 128 for code in _TYPE_OF):
    raise InvariantViolation("wire codes must be distinct and within msgpack's extension codes 1..127")
# Frame-level messages: what a frame may hold (records only travel inside them).
FRAME_TYPES: frozenset[type] = frozenset(
    cls
    for cls in WIRE_CODES
    if cls.__module__ in (m.__name__, r.__name__)
    and cls not in (m.Entry, m.Operation, m.OperationResult)
    and dataclasses.is_dataclass(cls)
)


def _pack_table(table: PartitionTable) -> list[Any]:
    replicas = table.members()
    index_of = {replica: i for i, replica in enumerate(replicas)}
    slots = [[-1 if held is None else index_of[held] for held in row] for row in table.replicas]
    return [list(replicas), list(table.versions), slots]


def _unpack_table(fields: Any) -> PartitionTable:
    replicas, versions, slots = fields
    if not all(isinstance(x, Replica) for x in replicas):
        raise ProtocolError("a table names something other than replicas")
    if len(slots) != len(versions) or any(len(row) != MAX_REPLICA_COUNT for row in slots):
        raise ProtocolError("a table's slots do not match its partitions")
    try:
        rows = tuple(tuple(None if i == -1 else replicas[i] for i in row) for row in slots)
    except (IndexError, TypeError) as error:
        raise ProtocolError(f"a table names an unknown replica: {error}") from error
    return PartitionTable(rows, tuple(versions))


def _pack_state(state: MetadataState) -> list[Any]:
    return [
        state.partition_count,
        list(state.members),
        state.table,
        state.cluster_state,
        [state.migrations[pid] for pid in sorted(state.migrations)],
        list(state.completed),
        state.shut_down,
    ]


def _unpack_state(fields: Any) -> MetadataState:
    count, members, table, cluster_state, migrations, completed, shut_down = fields
    return MetadataState(
        count,
        tuple(members),
        table,
        cluster_state,
        {record.partition_id: record for record in migrations},
        tuple(completed),
        shut_down,
    )


def _default(value: Any) -> msgpack.ExtType:
    cls = type(value)
    code = WIRE_CODES.get(cls)
    if code is None:
        raise TypeError(f"cannot encode {cls.__name__}")
    if cls is PartitionTable:
        fields: Any = _pack_table(value)
    elif cls is MetadataState:
        fields = _pack_state(value)
    elif isinstance(value, enum.Enum):
        fields = value.value
    else:
        fields = [getattr(value, f.name) for f in dataclasses.fields(value) if f.init]
    return msgpack.ExtType(code, msgpack.packb(fields, default=_default, use_bin_type=True))


def _ext_hook(code: int, data: bytes) -> Any:
    cls = _TYPE_OF.get(code)
    if cls is None:
        raise ProtocolError(f"unknown message code {code}")
    fields = msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, use_list=False, strict_map_key=True)
    try:
        if cls is PartitionTable:
            return _unpack_table(fields)
        if cls is MetadataState:
            return _unpack_state(fields)
        if issubclass(cls, enum.Enum):
            return cls(fields)
        return cls(*fields)
    except ProtocolError:
        raise
    except (TypeError, ValueError, AssertionError) as error:
        raise ProtocolError(f"malformed {cls.__name__}: {error}") from error


def encode(message: Any) -> bytes:
    """The frame for ``message``: length prefix, then ``[PROTOCOL_VERSION, message]``."""
    body = msgpack.packb([PROTOCOL_VERSION, message], default=_default, use_bin_type=True)
    if len(body) > MAX_FRAME_BYTES:
        raise ProtocolError(f"{type(message).__name__} needs {len(body)} bytes, over the {MAX_FRAME_BYTES} limit")
    return LENGTH_PREFIX.pack(len(body)) + body


def decode_body(body: bytes) -> Any:
    """The message of one frame body (without its length prefix)."""
    try:
        version, message = msgpack.unpackb(body, ext_hook=_ext_hook, raw=False, use_list=False)
    except ProtocolError:
        raise
    except Exception as error:  # msgpack raises several unrelated types for bad input
        raise ProtocolError(f"undecodable frame: {error}") from error
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {version} is not {PROTOCOL_VERSION}")
    if type(message) not in FRAME_TYPES:
        raise ProtocolError(f"a frame must hold one message, got {type(message).__name__}")
    return message


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
