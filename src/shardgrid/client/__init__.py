"""The smart client: ``Client`` (blocking) over ``AsyncClient`` (asyncio)."""

from shardgrid.client.aio import AsyncClient, AsyncMap
from shardgrid.client.entry_view import EntryView
from shardgrid.client.errors import (
    AdminError,
    AuthenticationError,
    ClientClosedError,
    ClusterUnavailableError,
    DiskFullError,
    IndeterminateOperationStateError,
    MemberProtocolError,
    MemoryFullError,
    OperationRejectedError,
    OperationTimeoutError,
    PartitionUnavailableError,
    ShardgridClientError,
)
from shardgrid.client.serialization import BytesSerializer, KeySerializer, MsgpackSerializer, Serializer
from shardgrid.client.status import ClusterStatus, PartitionInfo
from shardgrid.client.sync import Client, Map

__all__ = [
    "AdminError",
    "AsyncClient",
    "AsyncMap",
    "AuthenticationError",
    "BytesSerializer",
    "Client",
    "ClientClosedError",
    "ClusterStatus",
    "ClusterUnavailableError",
    "DiskFullError",
    "EntryView",
    "IndeterminateOperationStateError",
    "KeySerializer",
    "Map",
    "MemberProtocolError",
    "MemoryFullError",
    "MsgpackSerializer",
    "OperationRejectedError",
    "OperationTimeoutError",
    "PartitionInfo",
    "PartitionUnavailableError",
    "Serializer",
    "ShardgridClientError",
]
