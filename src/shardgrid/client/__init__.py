"""The smart client: ``Client`` (blocking) over ``AsyncClient`` (asyncio)."""

from shardgrid.client.aio import AsyncClient, AsyncMap
from shardgrid.client.errors import (
    AdminError,
    AuthenticationError,
    ClientClosedError,
    ClusterUnavailableError,
    IndeterminateOperationStateError,
    OperationRejectedError,
    OperationTimeoutError,
    ShardgridClientError,
)
from shardgrid.client.serialization import BytesSerializer, KeySerializer, MsgpackSerializer, Serializer
from shardgrid.client.sync import Client, Map

__all__ = [
    "AdminError",
    "AsyncClient",
    "AsyncMap",
    "AuthenticationError",
    "BytesSerializer",
    "Client",
    "ClientClosedError",
    "ClusterUnavailableError",
    "IndeterminateOperationStateError",
    "KeySerializer",
    "Map",
    "MsgpackSerializer",
    "OperationRejectedError",
    "OperationTimeoutError",
    "Serializer",
    "ShardgridClientError",
]
