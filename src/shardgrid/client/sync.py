"""``Client``: the blocking client, a thin facade over ``AsyncClient`` on a private event loop.

The facade owns one daemon thread running an asyncio loop; every method hands its coroutine to
that loop and waits. So there is one implementation of routing, retries and errors, and a sync
call behaves exactly like the async one (the Hazelcast Python client duplicates its whole stack
for this; we do not).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from shardgrid.client.aio import AsyncClient, AsyncMap, EventListener
from shardgrid.client.backup import Manifest, RestoreReport, restore_backup, take_backup
from shardgrid.client.entry_view import EntryView
from shardgrid.client.errors import ClientClosedError
from shardgrid.client.serialization import Serializer
from shardgrid.client.status import ClusterStatus, PartitionInfo
from shardgrid.core.hashing import Key
from shardgrid.core.messages import EventNotice, MemberStatus
from shardgrid.core.metadata.cluster_state import ClusterState

T = TypeVar("T")
CLOSE_TIMEOUT_S = 5.0


class Client:
    """``with Client(["127.0.0.1:5701"], cluster_name="shardgrid") as client: ...``; takes the same
    arguments as ``AsyncClient`` and connects at once."""

    def __init__(self, members: Sequence[str], cluster_name: str = "shardgrid", **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="shardgrid-client", daemon=True)
        self._thread.start()
        self._closed = False
        try:
            self._async = self._run(self._make(members, cluster_name, options))
            self._run(self._async.connect())
        except BaseException:
            self.close()
            raise

    async def _make(self, members: Sequence[str], cluster_name: str, options: dict[str, Any]) -> AsyncClient:
        return AsyncClient(members, cluster_name, **options)

    def _run(self, coroutine: Awaitable[T]) -> T:
        if self._closed:
            if asyncio.iscoroutine(coroutine):
                coroutine.close()
            raise ClientClosedError("the client is closed")
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)  # type: ignore[arg-type]
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise ClientClosedError("the client was closed during the call") from None

    def close(self) -> None:
        """Close the connections; a call another thread is waiting on ends with ClientClosedError."""
        if self._closed:
            return
        self._closed = True
        client = getattr(self, "_async", None)

        async def shut_down() -> None:
            if client is not None:
                await client.close()
            others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            asyncio.run_coroutine_threadsafe(shut_down(), self._loop).result(timeout=CLOSE_TIMEOUT_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=CLOSE_TIMEOUT_S)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def async_client(self) -> AsyncClient:
        return self._async

    def get_map(self, name: str, key_type: type = str, value_serializer: Serializer | None = None) -> Map:
        return Map(self, self._async.get_map(name, key_type, value_serializer))

    def admin(self, command: Any, address: str | None = None) -> str:
        return self._run(self._async.admin(command, address))

    def member_status(self, address: str | None = None) -> MemberStatus:
        return self._run(self._async.member_status(address))

    def cluster_status(self) -> ClusterStatus:
        return self._run(self._async.cluster_status())

    def is_cluster_safe(self) -> bool:
        return self._run(self._async.is_cluster_safe())

    def partitions(self) -> tuple[PartitionInfo, ...]:
        return self._run(self._async.partitions())

    def backup(
        self,
        directory: str | Path,
        *,
        maps: Sequence[str] | None = None,
        pause_writes: bool = False,
        progress: Callable[[str], None] | None = None,
    ) -> Manifest:
        """Copy the cluster's data into ``directory`` (see ``shardgrid.client.backup``). Interrupted
        (KeyboardInterrupt), it is cancelled and waited for: the cluster gets its state back (with
        ``pause_writes``) and the unfinished directory is removed before the interruption goes on."""
        return self._run_to_its_end(
            take_backup(self._async, Path(directory), maps=maps, pause_writes=pause_writes, progress=progress)
        )

    def _run_to_its_end(self, coroutine: Awaitable[T]) -> T:
        """``_run``, except that an interruption of the caller cancels the call and waits (within
        CLOSE_TIMEOUT_S) for what it does on its way out (found by an outside tester: a backup
        interrupted with Ctrl-C left the cluster PASSIVE, its client closed under it)."""
        if self._closed:
            if asyncio.iscoroutine(coroutine):
                coroutine.close()
            raise ClientClosedError("the client is closed")
        tasks: list[asyncio.Task[Any]] = []

        async def running() -> T:
            task = asyncio.current_task()
            if task is not None:
                tasks.append(task)
            return await coroutine

        future = asyncio.run_coroutine_threadsafe(running(), self._loop)
        try:
            return future.result()
        except KeyboardInterrupt:
            for task in tasks:
                self._loop.call_soon_threadsafe(task.cancel)
            concurrent.futures.wait([future], timeout=CLOSE_TIMEOUT_S)
            raise
        except concurrent.futures.CancelledError:
            raise ClientClosedError("the client was closed during the call") from None

    def restore(
        self,
        directory: str | Path,
        *,
        maps: Sequence[str] | None = None,
        merge: bool = False,
        progress: Callable[[str], None] | None = None,
    ) -> RestoreReport:
        """Write the backup in ``directory`` into the cluster (see ``shardgrid.client.backup``)."""
        return self._run(restore_backup(self._async, Path(directory), maps=maps, merge=merge, progress=progress))

    def wait_until_safe(self, timeout_s: float, members: int = 0) -> ClusterStatus:
        return self._run(self._async.wait_until_safe(timeout_s, members=members))

    def get_cluster_state(self) -> ClusterState:
        return self._run(self._async.get_cluster_state())

    def change_cluster_state(self, state: ClusterState | str) -> None:
        self._run(self._async.change_cluster_state(state))

    def promote(self, address: str) -> None:
        self._run(self._async.promote(address))

    def shutdown_member(self, address: str) -> None:
        self._run(self._async.shutdown_member(address))

    def remove_member(self, address: str) -> str:
        return self._run(self._async.remove_member(address))

    def revive_partitions(self) -> str:
        return self._run(self._async.revive_partitions())

    def shutdown_cluster(self) -> None:
        self._run(self._async.shutdown_cluster())

    def add_event_listener(
        self, on_event: Callable[[EventNotice], None], kinds: Iterable[str] | None = None
    ) -> EventListener:
        """As ``AsyncClient.add_event_listener``; ``on_event`` runs on the client's own thread."""
        return self._run(self._add_listener(on_event, kinds))

    def add_migration_listener(self, on_migration: Callable[[EventNotice], None]) -> EventListener:
        return self.add_event_listener(on_migration, ("migration",))

    async def _add_listener(
        self, on_event: Callable[[EventNotice], None], kinds: Iterable[str] | None
    ) -> EventListener:
        return self._async.add_event_listener(on_event, kinds)

    def remove_listener(self, listener: EventListener) -> None:
        self._loop.call_soon_threadsafe(listener.remove)


class Map(MutableMapping[Any, Any]):
    """A map of the cluster, also usable as a Python mapping: ``m[k]`` raises KeyError for a
    missing key, ``m[k] = v`` stores, ``del m[k]`` removes (KeyError if absent), ``k in m``."""

    def __init__(self, client: Client, inner: AsyncMap) -> None:
        self._client = client
        self._map = inner
        self.name = inner.name

    def put(self, key: Key, value: Any, ttl: float | None = None) -> Any:
        """``AsyncMap.put``: ``ttl`` in seconds (None: the map's own; 0: until removed)."""
        return self._client._run(self._map.put(key, value, ttl))

    def set(self, key: Key, value: Any, ttl: float | None = None) -> None:
        self._client._run(self._map.set(key, value, ttl))

    def put_if_absent(self, key: Key, value: Any, ttl: float | None = None) -> Any:
        return self._client._run(self._map.put_if_absent(key, value, ttl))

    def put_all_if_absent(
        self, entries: Mapping[Key, Any] | Iterable[tuple[Key, Any]], ttl: float | None = None
    ) -> None:
        self._client._run(self._map.put_all_if_absent(entries, ttl))

    def replace(self, key: Key, value: Any, ttl: float | None = None) -> Any:
        """``AsyncMap.replace``: stores only over a value; returns it (None: nothing stored)."""
        return self._client._run(self._map.replace(key, value, ttl))

    def replace_if_same(self, key: Key, old_value: Any, new_value: Any, ttl: float | None = None) -> bool:
        """``AsyncMap.replace_if_same``: a compare-and-set; whether it stored."""
        return self._client._run(self._map.replace_if_same(key, old_value, new_value, ttl))

    def remove_if_same(self, key: Key, value: Any) -> bool:
        """``AsyncMap.remove_if_same``: removes only that value; whether it did."""
        return self._client._run(self._map.remove_if_same(key, value))

    def set_ttl(self, key: Key, ttl: float | None) -> bool:
        """``AsyncMap.set_ttl``: a new TTL for the key's entry; whether it had one."""
        return self._client._run(self._map.set_ttl(key, ttl))

    def get_entry_view(self, key: Key) -> EntryView | None:
        """``AsyncMap.get_entry_view``: the entry with its metadata, counting no read."""
        return self._client._run(self._map.get_entry_view(key))

    def get(self, key: Key, default: Any = None) -> Any:
        return self._client._run(self._map.get(key, default))

    def contains_key(self, key: Key) -> bool:
        return self._client._run(self._map.contains_key(key))

    def remove(self, key: Key) -> Any:
        return self._client._run(self._map.remove(key))

    def delete(self, key: Key) -> None:
        self._client._run(self._map.delete(key))

    def put_all(self, entries: Mapping[Key, Any] | Iterable[tuple[Key, Any]], ttl: float | None = None) -> None:
        self._client._run(self._map.put_all(entries, ttl))

    def get_all(self, keys: Iterable[Key]) -> dict[Key, Any]:
        return self._client._run(self._map.get_all(keys))

    def remove_all(self, keys: Iterable[Key]) -> None:
        self._client._run(self._map.remove_all(keys))

    # --- the mapping protocol ----------------------------------------------------------------------

    _MISSING = object()

    def __getitem__(self, key: Key) -> Any:
        value = self._client._run(self._map.get(key, self._MISSING))
        if value is self._MISSING:
            raise KeyError(key)
        return value

    def __setitem__(self, key: Key, value: Any) -> None:
        self.set(key, value)

    def __delitem__(self, key: Key) -> None:
        if not self._client._run(self._map.discard(key)):
            raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        try:
            return self.contains_key(key)  # type: ignore[arg-type]
        except TypeError:  # a key of another type than the map's is not in it (as with a dict)
            return False

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys())

    def __len__(self) -> int:
        return self.size()

    def size(self) -> int:
        return self._client._run(self._map.size())

    def keys(self) -> list[Any]:  # type: ignore[override]  # a list, read once: not a live view
        return self._client._run(self._map.keys())

    def values(self) -> list[Any]:  # type: ignore[override]
        return self._client._run(self._map.values())

    def entries(self) -> list[tuple[Any, Any]]:
        return self._client._run(self._map.entries())

    def items(self) -> list[tuple[Any, Any]]:  # type: ignore[override]
        return self.entries()

    def clear(self) -> None:
        self._client._run(self._map.clear())
