"""``AsyncClient``: the smart client on asyncio; ``Client`` (``sync.py``) is a facade over it.

It keeps the partition table fresh, sends each key to its partition's owner, groups a batch per
owner into as few requests as the limits allow, pipelines every call on one connection per member,
and decides what to do with each answer with ``core.call_policy`` (the functions the simulator's
clients use): retry on a new owner or after a migration, within ``operation_call_timeout_ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from shardgrid._engine import METADATA_FIELDS, ColumnError
from shardgrid.client.connection import ConnectionLost, MemberConnection
from shardgrid.client.encoded_columns import EncodedColumns
from shardgrid.client.entry_view import EntryView, entry_view_of
from shardgrid.client.errors import (
    AdminError,
    ClientClosedError,
    ClusterUnavailableError,
    DiskFullError,
    IndeterminateOperationStateError,
    MemberProtocolError,
    MemoryFullError,
    OperationRejectedError,
    OperationTimeoutError,
    PartitionUnavailableError,
)
from shardgrid.client.routing import TableView, group_by_owner, split_requests
from shardgrid.client.serialization import KeySerializer, MsgpackSerializer, Serializer
from shardgrid.client.status import ClusterStatus, PartitionInfo
from shardgrid.core import codec
from shardgrid.core import messages as m
from shardgrid.core.call_policy import (
    CallProgress,
    CallSettings,
    Decision,
    Verdict,
    on_answer,
    on_deadline,
    on_no_answer,
    on_not_sent,
)
from shardgrid.core.hashing import Key, partition_ids_of_serialized
from shardgrid.core.limits import (
    MAX_FRAME_BYTES,
    MAX_KEY_BYTES,
    MAX_OPERATIONS_PER_REQUEST,
    MAX_REQUEST_BYTES,
    MAX_TTL_SECONDS,
    MAX_VALUE_BYTES,
)
from shardgrid.core.metadata.cluster_state import ClusterState
from shardgrid.core.session import SessionSettings
from shardgrid.core.store import unpacked_lengths
from shardgrid.runtime import tls

DEFAULT_ATTEMPT_TIMEOUT_MS = 10_000  # an attempt unanswered this long: its member may be gone
DEFAULT_CONNECT_TIMEOUT_MS = 5_000
MAX_TABLE_PAGES = 16  # 100,000 partitions at 20,000 a page, with room to spare
DEADLINE_MARGIN_MS = 20  # an attempt's deadline is this much before its call's, at least
ADMIN_RETRY_S = 0.2  # an administrative command the cluster cannot take now is asked again this often
LISTENER_CHECK_S = 0.5  # how often a listener checks that its connection still stands
MAX_SILENT_MEMBERS = 1_000  # addresses remembered as silent (members and seeds are fewer)
SCAN_PARALLEL_PARTITIONS = 16  # partitions a whole-map read has in flight at once

T = TypeVar("T")


class _NotSent:
    """An attempt that never left the client (no connection could be made)."""


NOT_SENT = _NotSent()


def ttl_ms_of(ttl: float | None) -> int:
    """A ``ttl`` in seconds as a request carries it, in ms: -1 for None (the map's own), 0 for 0
    (until removed); checked here, as a member would refuse it."""
    if ttl is None:
        return -1
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 <= ttl <= MAX_TTL_SECONDS:
        raise ValueError(
            f"ttl is None (the map's time_to_live_seconds), 0 (no expiry) or seconds up to {MAX_TTL_SECONDS}"
        )
    if ttl and ttl < 0.001:
        raise ValueError("ttl is at least a millisecond (0.001 s), or 0 for no expiry")
    return round(ttl * 1000)


# Answers whose reason the caller's error repeats (the member's words say what to do).
REASONED = frozenset({m.ReplyCode.REJECTED, m.ReplyCode.UNAVAILABLE, m.ReplyCode.MEMORY_FULL, m.ReplyCode.DISK_FULL})


@dataclass(frozen=True, slots=True)
class PackedEntries:
    """A partition's entries as packed columns (``AsyncClient.scan_partition_packed``): the keys'
    bytes end to end, each key's length as an unsigned 32-bit little-endian number, and the same
    for the values."""

    keys: bytes
    key_lengths: bytes
    values: bytes
    value_lengths: bytes
    # With ``with_metadata``: each record's METADATA_FIELDS (created, updated and accessed times,
    # expiry, hits, version) as six unsigned 64-bit little-endian numbers, expired records included.
    metadata: bytes = b""


METADATA_RECORD_BYTES = 8 * len(METADATA_FIELDS)  # one record's metadata in a backup's scan
# The highest reply code a member sends: any other byte in an answer is a malformed answer.
_MAX_REPLY_CODE = max(m.ReplyCode)


def _answered_values(reply: m.MapReply) -> list[bytes | None] | None:
    """The values an answer carries, one per key (none when it carries none); None when its
    columns or codes are malformed (no member sends such: the answer is not believed)."""
    if reply.codes and max(reply.codes) > _MAX_REPLY_CODE:
        return None
    if reply.present and len(reply.present) != len(reply.codes):
        return None
    try:
        return reply.value_list()
    except ColumnError:
        return None


def _malformed(reply: m.MapReply, found: list[bytes | None] | None, keys: int, wants_values: bool) -> str:
    """What makes an answer to ``keys`` keys one no member writes ("" when nothing does): every
    key gets a code, and a key answered OK gets its value where the call asked for values."""
    if found is None:
        return "malformed columns"
    if len(reply.codes) != keys:
        return f"{len(reply.codes)} codes for {keys} keys"
    if found and len(found) != keys:
        return f"{len(found)} values for {keys} keys"
    if wants_values and not found and m.ReplyCode.OK in reply.codes:
        return "keys answered OK without their values"
    return ""


def _check_map_name(name: object) -> None:
    """A name the members' codec would refuse (closing the connection) is the caller's error, here:
    sent, it cost retries until the call's timeout (found by an outside tester)."""
    if not isinstance(name, str) or not 0 < len(name) <= m.MAX_MAP_NAME_CHARS:
        raise ValueError(f"a map name is 1 to {m.MAX_MAP_NAME_CHARS} characters")


class AsyncClient:
    """``async with AsyncClient(["127.0.0.1:5701"], cluster_name="shardgrid") as client: ...``"""

    def __init__(
        self,
        members: Sequence[str],
        cluster_name: str = "shardgrid",
        cluster_secret: str | None = None,
        *,
        operation_call_timeout_ms: int = 120_000,
        fail_on_indeterminate_operation_state: bool = False,
        attempt_timeout_ms: int = DEFAULT_ATTEMPT_TIMEOUT_MS,
        connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS,
        tls_ca_file: str | Path | None = None,
        tls_cert_file: str | Path | None = None,
        tls_key_file: str | Path | None = None,
        ssl_context: ssl.SSLContext | None = None,
        high_water_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        if not members:
            raise ValueError("give at least one member address (host:port)")
        self.seeds = list(dict.fromkeys(members))
        self.call_settings = CallSettings(operation_call_timeout_ms, fail_on_indeterminate_operation_state)
        self.call_settings.validate()
        if attempt_timeout_ms <= 0 or connect_timeout_ms <= 0:
            raise ValueError("attempt_timeout_ms and connect_timeout_ms must be positive")
        self.attempt_timeout_ms = attempt_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        secret = (cluster_secret or "").encode()
        self._session_settings = SessionSettings(cluster_name, codec.PROTOCOL_VERSION, secret)
        self._session_settings.validate()
        if ssl_context is None and (tls_ca_file is not None or tls_cert_file is not None):
            ssl_context = tls.client_context(
                Path(tls_ca_file) if tls_ca_file else None,
                Path(tls_cert_file) if tls_cert_file else None,
                Path(tls_key_file) if tls_key_file else None,
            )
        self._ssl = ssl_context
        self._high_water_bytes = high_water_bytes
        self.table = TableView()
        self._connections: dict[str, MemberConnection] = {}
        self._opening: dict[str, asyncio.Task[MemberConnection]] = {}
        # Members that left an attempt unanswered, and when (the loop's ms), until one answers:
        # asked last when any member will do. A stopped or cut-off process still accepts
        # connections (its kernel does), so without this "any member" could name the same silent
        # one on every call, each waiting its whole attempt timeout (found running two members
        # SIGSTOPped: every key of their partitions timed out, for good). At most one per
        # address the client knows.
        self._silent: dict[str, int] = {}
        self._rotation = 0  # how many times any member would do (``_candidates``)
        self._refreshing: asyncio.Task[None] | None = None
        self._listeners: list[EventListener] = []
        self._closed = False
        # This client's name for its writes (``core.write_records``): a member that applied one
        # answers its retry as it answered the first attempt, and applies nothing again.
        self.client_id = uuid.uuid4().hex
        self._last_write_id = 0

    # --- lifecycle -------------------------------------------------------------------------------

    async def connect(self) -> AsyncClient:
        """Reach a member (raises ClusterUnavailableError or AuthenticationError) and learn the
        partition table if it has one; a cluster still forming has none, and the first map call
        waits for it within its timeout."""
        connection = await self._any_connection()
        with contextlib.suppress(ConnectionLost, TimeoutError):
            await self._read_table(connection)
        return self

    async def __aenter__(self) -> AsyncClient:
        return await self.connect()

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        self._closed = True
        for listener in self._listeners:
            listener.remove()
        for task in self._opening.values():
            task.cancel()
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    @property
    def cluster_name(self) -> str:
        return self._session_settings.cluster_name

    def get_map(self, name: str, key_type: type = str, value_serializer: Serializer | None = None) -> AsyncMap:
        _check_map_name(name)
        return AsyncMap(self, name, KeySerializer(key_type), value_serializer or MsgpackSerializer())

    # --- connections -----------------------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(asyncio.get_running_loop().time() * 1000)

    async def _connection(self, address: str) -> MemberConnection:
        if self._closed:
            raise ClientClosedError("the client is closed")
        connection = self._connections.get(address)
        if connection is not None and not connection.closed:
            return connection
        task = self._opening.get(address)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._open(address))
            self._opening[address] = task
        try:
            return await asyncio.shield(task)
        finally:
            if task.done() and self._opening.get(address) is task:
                del self._opening[address]

    async def _open(self, address: str) -> MemberConnection:
        connection = MemberConnection(
            address, self._session_settings, self._ssl, MAX_FRAME_BYTES, self._high_water_bytes
        )
        await connection.open(self.connect_timeout_ms / 1000)
        self._connections[address] = connection
        return connection

    async def _connection_to(self, address: str | None) -> MemberConnection:
        """The connection to ``address``, or to any member when None."""
        return await (self._connection(address) if address is not None else self._any_connection())

    def _candidates(self) -> list[str]:
        """Members to ask when any will do: those connected first, then the table's, then seeds;
        those that last left an attempt unanswered after all, the longest silent first."""
        live = [a for a, c in self._connections.items() if not c.closed]
        ordered = list(dict.fromkeys([*live, *self.table.members, *self.seeds]))
        # Each time a different one first: a member that answers but cannot help (one cut off
        # from the others answers NOT_READY, and its stale table) is not the only one asked.
        self._rotation += 1
        turn = self._rotation % len(live) if live else 0
        ordered = [*live[turn:], *live[:turn], *ordered[len(live) :]]
        silent = self._silent
        return sorted(ordered, key=lambda address: silent.get(address, -1))

    def _heard(self, address: str, answered: bool) -> None:
        """Whether ``address`` answered the attempt it was sent (``_candidates`` asks it last if not)."""
        if answered:
            self._silent.pop(address, None)
            return
        self._silent.pop(address, None)  # re-inserted: the most recent last
        self._silent[address] = self._now_ms()
        while len(self._silent) > MAX_SILENT_MEMBERS:
            del self._silent[next(iter(self._silent))]

    async def _any_connection(self) -> MemberConnection:
        async def connected(connection: MemberConnection) -> MemberConnection:
            return connection

        return await self._from_any(connected, "no member could be reached")

    async def _from_any(self, ask: Callable[[MemberConnection], Awaitable[T]], failure: str) -> T:
        """``ask``'s answer from the first candidate that is reached and answers (``ask`` raises
        ClusterUnavailableError for one that does not)."""
        errors = []
        for address in self._candidates():
            try:
                return await ask(await self._connection(address))
            except ClusterUnavailableError as error:
                errors.append(str(error))
        raise ClusterUnavailableError(f"{failure}: " + "; ".join(errors[:5]))

    # --- the table ---------------------------------------------------------------------------------

    async def refresh_table(self) -> None:
        """Ask a member for the whole table (one refresh at a time: callers share it)."""
        task = self._refreshing
        if task is None or task.done():
            task = asyncio.get_running_loop().create_task(self._fetch_table())
            self._refreshing = task
        await asyncio.shield(task)

    async def _fetch_table(self) -> None:
        deadline = self._now_ms() + self.call_settings.operation_call_timeout_ms
        last_error = "no member has a partition table yet"
        while True:
            connection = await self._any_connection()
            try:
                await self._read_table(connection)
                self._heard(connection.address, answered=True)
                if self.table.known:
                    return
            except (ConnectionLost, TimeoutError) as error:
                last_error = f"{connection.address}: {error or 'no answer'}"
                self._heard(connection.address, answered=False)
                connection.close(last_error)
            if self._now_ms() >= deadline:
                raise ClusterUnavailableError(f"no partition table within the call timeout ({last_error})")
            await asyncio.sleep(self.call_settings.min_retry_backoff_ms / 1000)

    async def _read_table(self, connection: MemberConnection) -> None:
        """Every page of ``connection``'s member's table into the view (each page within the
        attempt timeout)."""
        first: int | None = 0
        for _ in range(MAX_TABLE_PAGES):
            if first is None:
                return
            async with asyncio.timeout(self.attempt_timeout_ms / 1000):
                reply = await connection.table_page(first)
            first = self.table.apply_page(reply)

    # --- map calls ---------------------------------------------------------------------------------

    async def map_call(
        self,
        kind: m.OpKind,
        map_name: str,
        keys: Sequence[bytes],
        values: Sequence[bytes] | None = None,
        previous: bool = False,
        partition_ids: Sequence[int] | None = None,
        *,
        ttl_ms: int = -1,
        expected: Sequence[bytes] | None = None,
        ttls_ms: bytes = b"",
    ) -> list[bytes | None]:
        """Run one operation on many keys (already serialized), through every retry its answers
        call for; returns one value per key (a get's, or a put's or remove's previous value when
        ``previous``), None where there is none. ``partition_ids``: the keys' partitions, when
        the caller hashed them already under this cluster's partition count (a member refuses a
        request whose partition ids do not match its keys). ``ttl_ms``: how long a put's entries
        live (-1: the map's time_to_live_seconds; 0: until removed). ``expected``: a
        replace_if_same's values the keys must hold. ``ttls_ms``: a put's TTL per key instead,
        one unsigned 64-bit little-endian number each (0: until removed)."""
        if self._closed:
            raise ClientClosedError("the client is closed")
        _check_map_name(map_name)
        count = len(keys)
        results: list[bytes | None] = [None] * count
        if count == 0:
            return results
        pids = await self._checked(kind, keys, values, partition_ids)
        if expected is not None and (len(expected) != count or max(map(len, expected), default=0) > MAX_VALUE_BYTES):
            raise OperationRejectedError(
                f"{kind.value}: one expected value per key, of at most {MAX_VALUE_BYTES} bytes"
            )
        if ttls_ms and (len(ttls_ms) != 8 * count or ttl_ms != -1):
            raise ValueError(f"{kind.value}: one packed TTL per key ({8 * count} bytes), and no ttl_ms besides")
        progress = CallProgress(self._now_ms(), kind not in m.READS)
        await self._map_rounds(
            kind,
            map_name,
            keys,
            values,
            pids,
            previous,
            progress,
            results,
            None,
            ttl_ms=ttl_ms,
            expected=expected,
            ttls_ms=ttls_ms,
        )
        return results

    async def _checked(
        self, kind: m.OpKind, keys: Sequence[bytes], values: Sequence[bytes] | None, partition_ids: Sequence[int] | None
    ) -> Sequence[int]:
        """The keys' partition ids (hashed here when not given), once the call is checked: what the
        members' codec would refuse (closing the connection, as for any bad frame) is refused
        here, before anything is sent."""
        count = len(keys)
        if max(map(len, keys)) > MAX_KEY_BYTES:
            raise OperationRejectedError(f"{kind.value}: a key is at most {MAX_KEY_BYTES} bytes serialized")
        if values is not None and max(map(len, values), default=0) > MAX_VALUE_BYTES:
            raise OperationRejectedError(f"{kind.value}: a value is at most {MAX_VALUE_BYTES} bytes serialized")
        if not self.table.known:
            await self.refresh_table()
        partition_count = self.table.partition_count
        if partition_ids is None:
            return partition_ids_of_serialized(keys, partition_count)
        # Checked whole before anything is sent: an id the codec cannot carry, or one the
        # members' decoder refuses, would otherwise cost retries until the call's timeout.
        # (A valid id that is not its key's partition is refused by the member at once.)
        pids = partition_ids if isinstance(partition_ids, list) else list(partition_ids)
        if len(pids) != count:
            raise ValueError(f"{len(pids)} partition ids for {count} keys")
        if set(map(type, pids)) != {int} or min(pids) < 0 or max(pids) >= partition_count:
            raise ValueError(f"partition ids are ints from 0 to {partition_count - 1}")
        return pids

    async def put_encoded(self, kind: m.OpKind, map_name: str, columns: EncodedColumns, *, ttl_ms: int = -1) -> None:
        """A put (or put-if-absent) of columns already packed (``encoded_columns``), through every
        retry its answers call for, as ``map_call`` (without previous values). The columns go as
        one request, as they are, when they are within a member's limits, fit one request, and
        one owner the table knows holds every partition of them (the caller grouped the rows so):
        no Python object is made per row. Otherwise, and for the keys its answer leaves
        unfinished, they go on as ``map_call``'s lists, checked as any put's."""
        if self._closed:
            raise ClientClosedError("the client is closed")
        if kind not in (m.PUT, m.PUT_IF_ABSENT):
            raise ValueError(f"put_encoded puts; {kind.value} is not a put")
        _check_map_name(map_name)
        fits = columns.fits()
        if columns.count == 0:
            return
        if not self.table.known:
            await self.refresh_table()
        table = self.table
        owners = {table.owners[pid] if 0 <= pid < len(table.owners) else None for pid in columns.partitions}
        if (
            not fits
            or not columns.partitions
            or len(owners) != 1
            or None in owners
            or columns.count > MAX_OPERATIONS_PER_REQUEST
            or len(columns.keys.data) + len(columns.values.data) > MAX_REQUEST_BYTES
        ):
            keys, values = columns.lists()
            await self.map_call(kind, map_name, keys, values, ttl_ms=ttl_ms, ttls_ms=columns.ttls_ms)
            return
        (owner,) = owners
        progress = CallProgress(self._now_ms(), True)
        write_id = self._new_write_id()

        def request(call_id: int) -> m.MapRequest:
            return m.MapRequest(
                call_id=call_id,
                kind=kind,
                map_name=map_name,
                keys=columns.keys,
                values=columns.values,
                previous=False,
                client_id=self.client_id,
                write_id=write_id,
                ttl_ms=ttl_ms,
                ttls_ms=columns.ttls_ms,
            )

        reply = await self._attempt(owner, progress, request)
        codes = reply.codes if isinstance(reply, m.MapReply) else b""
        if len(codes) == columns.count and codes.count(m.ReplyCode.OK) == columns.count:
            return
        keys, values = columns.lists()
        answered = [(list(range(columns.count)), reply)]
        write_ids = [write_id] * columns.count
        await self._map_rounds(
            kind,
            map_name,
            keys,
            values,
            partition_ids_of_serialized(keys, table.partition_count),
            False,
            progress,
            [None] * len(keys),
            answered,
            write_ids,
            ttl_ms=ttl_ms,
            ttls_ms=columns.ttls_ms,
        )

    async def _map_rounds(
        self,
        kind: m.OpKind,
        map_name: str,
        keys: Sequence[bytes],
        values: Sequence[bytes] | None,
        pids: Sequence[int],
        previous: bool,
        progress: CallProgress,
        results: list[bytes | None],
        answered: list[tuple[list[int], m.MapReply | _NotSent | None]] | None,
        write_ids: list[int] | None = None,
        *,
        ttl_ms: int = -1,
        expected: Sequence[bytes] | None = None,
        ttls_ms: bytes = b"",
    ) -> None:
        """Rounds of attempts, each key to its owner, until every key is answered or the policy
        ends the call; ``results`` gets the values answered. ``answered``: the answers of a
        first round made already (``put_encoded``'s one request), ``write_ids`` its keys' write.

        A write's keys are named by the request that first carried them (``write_records``):
        every retry of a key names the same write, and goes with the other keys of that write
        only, so that a partition that applied the write recognises the retry and answers it."""
        count = len(keys)
        remaining = list(range(count))
        write_of = write_ids if write_ids is not None else [0] * count
        wants_values = kind in m.READS or previous  # an OK then comes with its value (or None)
        while remaining:
            if answered is not None:
                answers, answered = answered, None
            else:
                attempts = []
                for write_id, batch, owner in self._attempt_batches(kind, remaining, pids, keys, values, write_of):
                    attempts.append(
                        self._map_attempt(
                            owner,
                            kind,
                            map_name,
                            batch,
                            pids,
                            keys,
                            values,
                            previous,
                            progress,
                            write_id,
                            ttl_ms,
                            expected,
                            ttls_ms,
                        )
                    )
                # One owner (a single key's call, most often): awaited as it is, without the task
                # and the loop turns a gather costs.
                answers = [await attempts[0]] if len(attempts) == 1 else await asyncio.gather(*attempts)
            remaining = []
            decisions: list[Decision] = []
            reasons: list[str] = []
            now = self._now_ms()
            for batch, reply in answers:
                if reply is None or reply is NOT_SENT:
                    decide = on_not_sent if reply is NOT_SENT else on_no_answer
                    decisions.append(decide(self.call_settings, progress, now))
                    remaining += batch
                    for index in batch:
                        self.table.forget(pids[index])
                    continue
                for redirect in reply.redirects:
                    self.table.apply_redirect(redirect)
                seen: set[m.ReplyCode] = set()
                codes = reply.codes
                found = _answered_values(reply)
                problem = _malformed(reply, found, len(batch), wants_values)
                if problem:
                    # An answer no member writes says nothing of these keys: not even those it
                    # calls OK are done (a code short or one too many, and which key is which?).
                    remaining += batch
                    decisions.append(on_answer(self.call_settings, progress, m.ReplyCode.REJECTED, 0, now))
                    said = f" ({reply.reason})" if reply.reason else ""
                    reasons.append(f"a member answered call {reply.call_id} with {problem}{said}")
                    continue
                has_values = bool(found)  # a value for every key, or (a write's answer) none
                if codes.count(m.ReplyCode.OK) == len(batch):
                    if has_values:  # every key answered OK: no status to look at one by one
                        for index, value in zip(batch, found, strict=True):
                            results[index] = value
                    continue
                for position, (index, status) in enumerate(zip(batch, codes, strict=True)):
                    if status == m.ReplyCode.OK:
                        if has_values:
                            results[index] = found[position]
                    else:
                        remaining.append(index)
                        seen.add(m.ReplyCode(status))
                for status in sorted(seen):
                    decisions.append(on_answer(self.call_settings, progress, status, reply.retry_after_ms, now))
                    if status in REASONED and reply.reason:
                        reasons.append(reply.reason)
            if remaining:
                # Back in call order (the answers came an owner at a time): a key named twice is
                # sent again in the order the caller gave, and a retry that goes whole to one owner
                # is the whole call in order, as ``request`` takes it.
                remaining.sort()
                await self._carry_out(decisions, reasons, kind, len(remaining), count, progress)

    def _attempt_batches(
        self,
        kind: m.OpKind,
        remaining: list[int],
        pids: Sequence[int],
        keys: Sequence[bytes],
        values: Sequence[bytes] | None,
        write_of: list[int],
    ) -> list[tuple[int, list[int], str | None]]:
        """The next round's requests: (write id, keys' indexes, owner). Keys not sent yet are
        grouped per owner and split to fit a request, each request a new write of this client;
        keys sent before go again with the write that first carried them (what fitted one
        request then fits now)."""
        batches: list[tuple[int, list[int], str | None]] = []
        fresh: list[int] = []
        again: dict[int, list[int]] = {}
        for index in remaining:
            if write_of[index]:
                again.setdefault(write_of[index], []).append(index)
            else:
                fresh.append(index)
        for write_id, indexes in again.items():
            for owner, batch in group_by_owner(indexes, pids, self.table).items():
                batches.append((write_id, batch, owner))
        for owner, indexes in group_by_owner(fresh, pids, self.table).items():
            for batch in split_requests(indexes, keys, values, MAX_OPERATIONS_PER_REQUEST):
                write_id = self._new_write_id() if kind not in m.READS else 0
                for index in batch:
                    write_of[index] = write_id
                batches.append((write_id, batch, owner))
        return batches

    def _new_write_id(self) -> int:
        self._last_write_id += 1
        return self._last_write_id

    async def _map_attempt(
        self,
        owner: str | None,
        kind: m.OpKind,
        map_name: str,
        batch: list[int],
        pids: Sequence[int],
        keys: Sequence[bytes],
        values: Sequence[bytes] | None,
        previous: bool,
        progress: CallProgress,
        write_id: int,
        ttl_ms: int = -1,
        expected: Sequence[bytes] | None = None,
        ttls_ms: bytes = b"",
    ) -> tuple[list[int], m.MapReply | _NotSent | None]:
        client_id = self.client_id if write_id else ""
        # The batch's columns, packed once for every attempt (its keys come in partition order:
        # ``group_by_owner``).
        if len(batch) == len(keys) and batch == list(range(len(keys))):
            key_column = m.Column.of(keys)
            value_column = m.Column.of(values) if values is not None else m.EMPTY_COLUMN
            expected_column = m.Column.of(expected) if expected is not None else m.EMPTY_COLUMN
            batch_ttls = ttls_ms
        else:
            key_column = m.Column.of(list(map(keys.__getitem__, batch)))
            value_column = m.Column.of(list(map(values.__getitem__, batch))) if values is not None else m.EMPTY_COLUMN
            expected_column = (
                m.Column.of(list(map(expected.__getitem__, batch))) if expected is not None else m.EMPTY_COLUMN
            )
            batch_ttls = b"".join([ttls_ms[8 * i : 8 * i + 8] for i in batch]) if ttls_ms else b""

        def request(call_id: int) -> m.MapRequest:
            return m.MapRequest(
                call_id=call_id,
                kind=kind,
                map_name=map_name,
                keys=key_column,
                values=value_column,
                previous=previous,
                client_id=client_id,
                write_id=write_id,
                ttl_ms=ttl_ms,
                expected=expected_column,
                ttls_ms=batch_ttls,
            )

        return batch, await self._attempt(owner, progress, request)

    async def _attempt(self, owner: str | None, progress: CallProgress, request_of: Callable[[int], Any]) -> Any:
        """One attempt of a call to ``owner`` (any member when None), within the call's time: the
        answer; None when none came (it may have been applied); NOT_SENT when no connection could
        be made (no byte of it left: it cannot have been applied)."""
        try:
            async with asyncio.timeout(self._attempt_wait_s(progress)):
                connection = await self._connection_to(owner)
        except (ClusterUnavailableError, TimeoutError):
            return NOT_SENT
        try:
            wait_s = self._attempt_wait_s(progress)
            async with asyncio.timeout(wait_s):
                deadline = self._effect_deadline(wait_s)
                reply = await connection.call(request_of(connection.new_call_id()), deadline)
        except (ConnectionLost, TimeoutError):
            self._heard(connection.address, answered=False)
            return None
        self._heard(connection.address, answered=True)
        return reply

    def _effect_deadline(self, wait_s: float) -> float:
        """The loop's time after which this attempt may no longer take effect: when the client
        stops waiting for its answer (``wait_s`` from now), less a margin for the member's clock
        running slower than ours (20 ms and a thousandth: crystal clocks drift by a ten-thousandth
        at most). An attempt given up on, and a call that ends unanswered (timed out, or
        indeterminate), can then no longer be applied after the client moved on."""
        now = asyncio.get_running_loop().time()
        return now + wait_s - (DEADLINE_MARGIN_MS + wait_s) / 1000

    def _attempt_wait_s(self, progress: CallProgress) -> float:
        """How long one attempt may wait: ``attempt_timeout_ms``, but never past the call's own
        deadline (the attempt that runs out then counts as unanswered, and the policy ends the call)."""
        left_ms = progress.deadline_ms(self.call_settings) - self._now_ms()
        return max(0.001, min(self.attempt_timeout_ms, left_ms) / 1000)

    async def _carry_out(
        self,
        decisions: list[Decision],
        reasons: list[str],
        kind: m.OpKind,
        left: int,
        count: int,
        progress: CallProgress | None = None,
    ) -> None:
        """Act on the answers of one round: raise the first final verdict, else wait as long as
        the latest retry asks (refreshing the table first when one asks for it, within the call's
        time when ``progress`` is given)."""
        what = f"{kind.value} of {count} key{'s' if count != 1 else ''} ({left} unfinished)"
        for decision in decisions:
            verdict = decision.verdict
            if verdict is Verdict.TIMED_OUT:
                unknown = " (some writes may have been applied)" if decision.outcome_unknown else ""
                raise OperationTimeoutError(
                    f"{what}: not done within operation_call_timeout_ms"
                    f" ({self.call_settings.operation_call_timeout_ms} ms){unknown}",
                    decision.outcome_unknown,
                )
            if verdict is Verdict.INDETERMINATE:
                raise IndeterminateOperationStateError(
                    f"{what}: applied by an owner but not confirmed by every backup, or the owner left before"
                    " answering; it may or may not last"
                )
            if verdict is Verdict.UNAVAILABLE:
                reason = next((r for r in reasons if "unavailable" in r), "a partition is unavailable")
                done = count - left
                applied = f"; the other {done} were done" if done and kind not in m.READS else ""
                raise PartitionUnavailableError(f"{what}: {reason}{applied}", decision.outcome_unknown)
            if verdict is Verdict.MEMORY_FULL:
                # The member's own words: its max_memory_bytes, or a map's size (an outside tester
                # found a map's refusal reported as the member's memory, at 0% of it).
                refusals = (r for r in reasons if "refused (not applied)" in r)
                reason = next(refusals, "a member is at its max_memory_bytes")
                done = count - left
                applied = f"; the other {done} were done" if done else ""
                raise MemoryFullError(f"{what}: {reason}{applied}", decision.outcome_unknown)
            if verdict is Verdict.DISK_FULL:
                refusals = (r for r in reasons if "disk" in r and "refused (not applied)" in r)
                reason = next(refusals, "a member's disk is short of the room it keeps")
                done = count - left
                applied = f"; the other {done} were done" if done else ""
                raise DiskFullError(f"{what}: {reason}{applied}", decision.outcome_unknown)
            if verdict is Verdict.REJECTED:
                reason = reasons[0] if reasons else "refused by the cluster"
                raise OperationRejectedError(f"{what}: {reason}", decision.outcome_unknown)
        retries = [d for d in decisions if d.verdict is Verdict.RETRY]
        if any(d.refresh_table for d in retries):
            # On failure the next round's attempts find out again, and the call's clock runs on.
            # The refresh is shared (other calls may wait on it) and has its own time, but this
            # call waits for it no longer than its own deadline (found by an outside tester: calls
            # of 3 s on the minority side ended after 4 to 5 s, waiting on a refresh).
            left_s = None
            if progress is not None:
                left_s = max(0.001, (progress.deadline_ms(self.call_settings) - self._now_ms()) / 1000)
            with contextlib.suppress(ClusterUnavailableError, TimeoutError):
                async with asyncio.timeout(left_s):
                    await self.refresh_table()
        wait_ms = max((d.at_ms for d in retries), default=0) - self._now_ms()
        if wait_ms > 0:
            await asyncio.sleep(wait_ms / 1000)

    # --- partition scans -------------------------------------------------------------------------

    async def scan_partition(
        self, map_name: str, pid: int, page_entries: int = 10_000, keys_only: bool = False
    ) -> tuple[list[bytes], list[bytes]]:
        """Every entry of one partition of a map, as one consistent copy (its keys and values, in
        the owner's order): pages are read from its owner, and when the map changed between pages
        or the partition moved, the partition is read again from the start. Retries follow the
        call policy (a scan is a read: it is always retried, within operation_call_timeout_ms)."""
        keys: list[bytes] = []
        values: list[bytes] = []
        for page in await self._scan_pages(map_name, pid, page_entries, keys_only, packed=False):
            keys.extend(page.keys)
            values.extend(page.values)
        return keys, values

    async def scan_partition_packed(
        self, map_name: str, pid: int, page_entries: int = 10_000, *, with_metadata: bool = False
    ) -> PackedEntries:
        """``scan_partition`` as packed columns: each column's bytes end to end, with each entry's
        length (what a reader building Arrow arrays takes without an object per entry). With
        ``with_metadata``, the records as the owner holds them, each with its metadata (expired
        ones not yet removed included): what a backup copies. The member's pages are checked
        whole: lengths that do not add up are the member's error."""
        pages = await self._scan_pages(map_name, pid, page_entries, False, True, with_metadata)
        entries = PackedEntries(
            b"".join(page.packed_keys for page in pages),
            b"".join(page.key_lengths for page in pages),
            b"".join(page.packed_values for page in pages),
            b"".join(page.value_lengths for page in pages),
            b"".join(page.metadata for page in pages),
        )
        try:
            key_lengths, value_lengths = unpacked_lengths(entries.key_lengths), unpacked_lengths(entries.value_lengths)
        except ValueError as error:
            raise MemberProtocolError(f"a scan page of partition {pid}: {error}") from None
        if (
            len(key_lengths) != len(value_lengths)
            or sum(key_lengths) != len(entries.keys)
            or sum(value_lengths) != len(entries.values)
            or any(page.keys or page.values for page in pages)
            or len(entries.metadata) != (len(key_lengths) * METADATA_RECORD_BYTES if with_metadata else 0)
        ):
            raise MemberProtocolError(f"a scan page of partition {pid}: its packed columns and lengths do not match")
        return entries

    async def _scan_pages(
        self, map_name: str, pid: int, page_entries: int, keys_only: bool, packed: bool, with_metadata: bool = False
    ) -> list[m.ScanReply]:
        """The pages of one consistent copy of the partition (see ``scan_partition``)."""
        _check_map_name(map_name)
        if not 1 <= page_entries <= MAX_OPERATIONS_PER_REQUEST:
            raise ValueError(f"page_entries is 1..{MAX_OPERATIONS_PER_REQUEST}")
        await self._check_partition(pid)
        progress = CallProgress(self._now_ms(), mutating=False)
        pages: list[m.ScanReply] = []
        offset = 0
        stamp: tuple[str, int] | None = None
        while True:
            reply = await self._scan_page(
                map_name, pid, offset, page_entries, keys_only, progress, packed, with_metadata
            )
            if reply is None:
                pages, offset, stamp = [], 0, None  # another owner, or the same later: start over
                continue
            page_stamp = (reply.lineage, reply.map_version)
            if stamp is not None and page_stamp != stamp:
                pages, offset, stamp = [], 0, None  # written to between pages: read it again, after a pause
                await asyncio.sleep(self.call_settings.min_retry_backoff_ms / 1000)
                continue
            stamp = page_stamp
            pages.append(reply)
            # A member skips expired entries within the positions a page covers, and says where the
            # next page starts.
            offset = reply.next_offset or offset + (len(reply.keys) if not packed else len(reply.key_lengths) // 4)
            if not reply.more:
                return pages

    async def count_partition(self, map_name: str, pid: int) -> int:
        """How many entries one partition of a map holds, as its owner has them (a page of no
        entries: nothing but the count crosses the wire)."""
        _check_map_name(map_name)
        await self._check_partition(pid)
        progress = CallProgress(self._now_ms(), mutating=False)
        while True:
            reply = await self._scan_page(map_name, pid, 0, 0, True, progress)
            if reply is not None:
                return reply.total

    async def _check_partition(self, pid: int) -> None:
        if not 0 <= pid < await self.partition_count():
            raise ValueError(f"partition {pid} does not exist: the cluster has {self.table.partition_count}")

    async def _scan_page(
        self,
        map_name: str,
        pid: int,
        offset: int,
        page_entries: int,
        keys_only: bool,
        progress: CallProgress,
        packed: bool = False,
        with_metadata: bool = False,
    ) -> m.ScanReply | None:
        """One page from the partition's owner, after the retries a lost answer calls for; None
        when an owner refused it (it moved, or it migrates): the caller starts the partition over.
        Raises what the call policy ends the call with."""

        def request(call_id: int) -> m.ScanRequest:
            return m.ScanRequest(
                call_id=call_id,
                map_name=map_name,
                partition_id=pid,
                offset=offset,
                max_entries=page_entries,
                keys_only=keys_only,
                packed=packed,
                with_metadata=with_metadata,
            )

        while True:
            expired = on_deadline(self.call_settings, progress, self._now_ms())
            if expired is not None:
                await self._carry_out([expired], [], m.GET, 1, 1)  # raises OperationTimeoutError
            reply = await self._attempt(self.table.owners[pid], progress, request)
            now = self._now_ms()
            if reply is None or reply is NOT_SENT:
                self.table.forget(pid)
                decide = on_not_sent if reply is NOT_SENT else on_no_answer
                await self._carry_out([decide(self.call_settings, progress, now)], [], m.GET, 1, 1, progress)
                continue
            if reply.code is m.ReplyCode.OK:
                return reply
            if reply.redirect is not None:
                self.table.apply_redirect(reply.redirect)
            decision = on_answer(self.call_settings, progress, reply.code, reply.retry_after_ms, now)
            await self._carry_out([decision], [reply.reason] if reply.reason else [], m.GET, 1, 1, progress)
            return None

    async def partition_count(self) -> int:
        if not self.table.known:
            await self.refresh_table()
        return self.table.partition_count

    # --- the cluster's state ---------------------------------------------------------------------

    async def member_status(self, address: str | None = None) -> m.MemberStatus:
        """One member's own view (``address``, or any member). Any member: each candidate in turn
        until one answers within the attempt timeout, a silent one asked last from then on (a
        stopped member's open connection answered nothing, and the status call failed though
        every other member would have answered)."""
        if address:
            return await self._status_of(await self._connection(address))
        return await self._from_any(self._status_of, "no member answered a status request")

    async def _status_of(self, connection: MemberConnection) -> m.MemberStatus:
        try:
            async with asyncio.timeout(self.attempt_timeout_ms / 1000):
                status = await connection.call(m.MemberStatusRequest(connection.new_call_id()))
        except ConnectionLost as error:
            raise ClusterUnavailableError(f"{connection.address}: {error}") from None
        except TimeoutError:
            self._heard(connection.address, answered=False)
            raise ClusterUnavailableError(f"{connection.address}: no status within the attempt timeout") from None
        self._heard(connection.address, answered=True)
        return status

    async def cluster_status(self) -> ClusterStatus:
        """Every member's view, asked at once: the member list comes from the leader's applied log
        (or, without a leader, from the first member that answers)."""
        first = await self.member_status()
        if first.leader_address and first.leader_address != first.address:
            with contextlib.suppress(ClusterUnavailableError):
                first = await self.member_status(first.leader_address)
        members = first.members
        replies: dict[str, m.MemberStatus] = {first.address: first}
        unreachable: dict[str, str] = {}

        async def ask(address: str) -> None:
            try:
                replies[address] = await self.member_status(address)
            except ClusterUnavailableError as error:
                unreachable[address] = str(error)

        await asyncio.gather(*(ask(address) for address in members if address not in replies))
        return ClusterStatus(members, replies, unreachable)

    async def is_cluster_safe(self) -> bool:
        return (await self.cluster_status()).safe

    async def partitions(self) -> tuple[PartitionInfo, ...]:
        """Every partition as a member's table holds it now (asked afresh): where each one's
        replicas are, for an operator or a test that needs to know which members hold what."""
        await self.refresh_table()
        view = self.table
        return tuple(
            PartitionInfo(
                partition_id=pid,
                version=view.versions[pid],
                replicas=view.replicas[pid],
                unavailable=pid in view.unavailable,
            )
            for pid in range(view.partition_count)
        )

    async def wait_until_safe(self, timeout_s: float, poll_s: float = 0.2, members: int = 0) -> ClusterStatus:
        """Returns the first safe status (with at least ``members`` members: in a rolling restart,
        the restarted one has joined again, not only the others settled without it); raises
        OperationTimeoutError (with the last reason) when there is none within ``timeout_s``."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        reason = "not asked yet"
        while True:
            try:
                status = await self.cluster_status()
                reason = status.unsafe_reason or status.too_few_reason(members)
                if not reason:
                    return status
            except ClusterUnavailableError as error:
                reason = str(error)
            if asyncio.get_running_loop().time() >= deadline:
                raise OperationTimeoutError(f"the cluster is not safe after {timeout_s:g} s: {reason}", False)
            await asyncio.sleep(poll_s)

    async def get_cluster_state(self) -> ClusterState:
        return (await self.member_status()).cluster_state

    async def change_cluster_state(self, state: ClusterState | str) -> None:
        """ACTIVE, NO_MIGRATION (rebalancing paused), FROZEN or PASSIVE, cluster-wide."""
        if isinstance(state, str):
            state = ClusterState(state.strip().lower().replace("_", "-"))  # "NO_MIGRATION" or "no-migration"
        await self.admin(m.ChangeClusterState(state))

    async def promote(self, address: str) -> None:
        """Make the lite member at ``address`` a data member (seed 002's promoteLocalMember)."""
        await self.admin(m.PromoteMember(), address)

    async def shutdown_member(self, address: str) -> None:
        """The member at ``address`` hands every replica over, leaves and stops; returns once it
        has (or raises AdminError with the reason it cannot)."""
        await self.admin(m.ShutdownMember(), address)

    async def remove_member(self, address: str) -> str:
        """Remove the member at ``address`` for good now (it must have been silent for the failure
        timeout): the partitions only it held are reported lost instead of waiting, unavailable,
        for ``partition_lost_timeout_ms``. Returns the leader's answer; raises AdminError."""
        return await self.admin(m.RemoveMember(address))

    async def revive_partitions(self) -> str:
        """Accept the loss of every unavailable partition: each restarts empty. Raises AdminError
        when none is unavailable."""
        return await self.admin(m.RevivePartitions())

    async def shutdown_cluster(self) -> None:
        """PASSIVE first, then every member stops; returns once the member asked says the
        cluster shut down (it answers before it stops). Members that stop answering before that
        did not confirm it: AdminError, since a shutdown cannot be told apart from every member
        killed on the way (found by an outside tester: such a cut was reported as a shutdown)."""
        try:
            await self.admin(m.ShutdownCluster())
        except ClusterUnavailableError as error:
            raise AdminError(
                f"the members stopped answering before the shutdown was confirmed ({error}): it may not have "
                "completed; every member's log says 'the cluster shut down' if it did"
            ) from None

    # --- listeners -------------------------------------------------------------------------------

    def add_event_listener(
        self, on_event: Callable[[m.EventNotice], None], kinds: Iterable[str] | None = None
    ) -> EventListener:
        """Call ``on_event`` (on the client's event loop; keep it short) with each event the
        leader emits (``EventNotice``: migrations, members added and removed, leader and state
        changes, lost partitions), of ``kinds`` only when given. The listener follows the leader
        when it changes; events emitted while it moves over are missed (``status`` tells where
        things stand). ``remove()`` the returned handle to stop."""
        wanted = frozenset(kinds) if kinds is not None else None
        listener = EventListener(self, on_event, wanted)
        listener.task = asyncio.get_running_loop().create_task(listener.run())
        self._listeners.append(listener)
        return listener

    def add_migration_listener(self, on_migration: Callable[[m.EventNotice], None]) -> EventListener:
        """Seed 000's migration listener: every migration the leader starts, finishes or fails."""
        return self.add_event_listener(on_migration, ("migration",))

    # --- administration ----------------------------------------------------------------------------

    async def admin(self, command: Any, address: str | None = None) -> str:
        """Send an administrative command (to ``address``, or any member); returns the member's
        answer text, raises AdminError when it failed. An answer that the cluster cannot take it
        now (no leader: an election is under way) is asked again, within the call's time."""
        deadline = self._now_ms() + self.call_settings.operation_call_timeout_ms
        while True:
            connection = await self._connection_to(address or None)
            request = m.AdminRequest(connection.new_call_id(), command)
            try:
                async with asyncio.timeout(max(0.001, (deadline - self._now_ms()) / 1000)):
                    reply = await connection.call(request)
            except ConnectionLost as error:
                raise ClusterUnavailableError(f"{connection.address}: {error}") from None
            except TimeoutError:
                raise OperationTimeoutError(f"{type(command).__name__}: no answer in time", True) from None
            if reply.result == m.ADMIN_OK:
                return reply.reason
            what = f"{type(command).__name__} at {connection.address}: {reply.result}: {reply.reason}"
            if reply.result != m.ADMIN_UNAVAILABLE or self._now_ms() >= deadline:
                raise AdminError(what)
            await asyncio.sleep(ADMIN_RETRY_S)


class EventListener:
    """A subscription to the leader's events, kept across leader changes and lost connections."""

    def __init__(
        self, client: AsyncClient, on_event: Callable[[m.EventNotice], None], kinds: frozenset[str] | None
    ) -> None:
        self.client = client
        self.on_event = on_event
        self.kinds = kinds
        self.task: asyncio.Task[None] | None = None
        self.leader = ""  # the member it listens to
        self.subscribed = asyncio.Event()

    def remove(self) -> None:
        if self.task is not None:
            self.task.cancel()

    async def run(self) -> None:
        while not self.client._closed:
            moved = asyncio.Event()
            try:
                status = await self.client.member_status()
                leader = status.leader_address or status.address
                connection = await self.client._connection(leader)

                def deliver(notice: m.EventNotice, at: str = leader, moved: asyncio.Event = moved) -> None:
                    if notice.kind == "listening":
                        self.subscribed.set()
                        return
                    if notice.kind == "leader-changed" and notice.member != at:
                        moved.set()  # follow the new leader
                    if self.kinds is None or notice.kind in self.kinds:
                        self.on_event(notice)

                self.leader = leader
                connection.listen(deliver)
                while not connection.closed and not moved.is_set():
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(LISTENER_CHECK_S):
                            await moved.wait()
            except (ClusterUnavailableError, ConnectionLost):
                pass
            self.subscribed.clear()
            await asyncio.sleep(LISTENER_CHECK_S)


class AsyncMap:
    """A named map: keys and values are serialized here, once."""

    def __init__(self, client: AsyncClient, name: str, keys: KeySerializer, values: Serializer) -> None:
        self.client = client
        self.name = name
        self.key_serializer = keys
        self.value_serializer = values

    def _key(self, key: Key) -> bytes:
        return self.key_serializer.dumps(key)

    def _value(self, data: bytes | None) -> Any:
        return None if data is None else self.value_serializer.loads(data)

    async def _write_one(
        self, kind: m.OpKind, key: Key, value: Any, ttl: float | None, expected: bytes | None = None
    ) -> bytes | None:
        """One key's write of ``kind``, answered the value it held before (serialized)."""
        (old,) = await self.client.map_call(
            kind,
            self.name,
            [self._key(key)],
            [self.value_serializer.dumps(value)],
            previous=True,
            ttl_ms=ttl_ms_of(ttl),
            expected=None if expected is None else [expected],
        )
        return old

    async def put(self, key: Key, value: Any, ttl: float | None = None) -> Any:
        """Store ``value`` under ``key``; returns the previous value (None if there was none).
        ``ttl``: seconds the entry lives (None: the map's ``time_to_live_seconds``; 0: until
        removed); no read returns it once it expired."""
        return self._value(await self._write_one(m.PUT, key, value, ttl))

    async def set(self, key: Key, value: Any, ttl: float | None = None) -> None:
        """Store ``value`` under ``key`` (like put, without fetching the previous value)."""
        await self.client.map_call(
            m.PUT, self.name, [self._key(key)], [self.value_serializer.dumps(value)], ttl_ms=ttl_ms_of(ttl)
        )

    async def put_if_absent(self, key: Key, value: Any, ttl: float | None = None) -> Any:
        """Store ``value`` under ``key`` only if the key has no value; returns the value that was
        there (None when this call stored its own). A retry after a lost answer may find its own
        write and return it. An expired entry is no value: its key takes the new one."""
        return self._value(await self._write_one(m.PUT_IF_ABSENT, key, value, ttl))

    async def put_all_if_absent(
        self, entries: Mapping[Key, Any] | Iterable[tuple[Key, Any]], ttl: float | None = None
    ) -> None:
        """put_if_absent for many entries, grouped per owner like put_all."""
        keys, values = self._columns(entries)
        await self.client.map_call(m.PUT_IF_ABSENT, self.name, keys, values, ttl_ms=ttl_ms_of(ttl))

    async def replace(self, key: Key, value: Any, ttl: float | None = None) -> Any:
        """Store ``value`` under ``key`` only if the key has a value; returns that value (None: the
        key had none, and nothing was stored). Atomic on the key's owner."""
        return self._value(await self._write_one(m.REPLACE, key, value, ttl))

    async def replace_if_same(self, key: Key, old_value: Any, new_value: Any, ttl: float | None = None) -> bool:
        """Store ``new_value`` under ``key`` only if it holds ``old_value`` (compared serialized,
        byte for byte); whether it did. Atomic on the key's owner: a compare-and-set."""
        expected = self.value_serializer.dumps(old_value)
        return await self._write_one(m.REPLACE_IF_SAME, key, new_value, ttl, expected) == expected

    async def remove_if_same(self, key: Key, value: Any) -> bool:
        """Remove ``key`` only if it holds ``value`` (compared serialized); whether it did."""
        held = await self._write_one(m.REMOVE_IF_SAME, key, value, None)
        return held == self.value_serializer.dumps(value)

    async def set_ttl(self, key: Key, ttl: float | None) -> bool:
        """Give ``key``'s entry a new TTL, counted from now: ``ttl`` seconds (0: until removed;
        None: the map's ``time_to_live_seconds``); whether the key had an entry (none: nothing
        changes). Its value stays; the owner writes it again with the new expiry, so its version
        and update time change as with any write."""
        (held,) = await self.client.map_call(
            m.SET_TTL, self.name, [self._key(key)], previous=True, ttl_ms=ttl_ms_of(ttl)
        )
        return held is not None

    async def get_entry_view(self, key: Key) -> EntryView | None:
        """The key's entry with its metadata (times, expiry, hits, version), None when it has
        none. It counts no read (no hit, no access time)."""
        (data,) = await self.client.map_call(m.ENTRY_VIEW, self.name, [self._key(key)])
        return None if data is None else entry_view_of(data, self.value_serializer.loads)

    async def get(self, key: Key, default: Any = None) -> Any:
        (data,) = await self.client.map_call(m.GET, self.name, [self._key(key)])
        return default if data is None else self.value_serializer.loads(data)

    async def contains_key(self, key: Key) -> bool:
        (data,) = await self.client.map_call(m.GET, self.name, [self._key(key)])
        return data is not None

    async def remove(self, key: Key) -> Any:
        """Remove ``key``; returns the value it had (None if there was none)."""
        (old,) = await self.client.map_call(m.REMOVE, self.name, [self._key(key)], previous=True)
        return self._value(old)

    async def delete(self, key: Key) -> None:
        await self.client.map_call(m.REMOVE, self.name, [self._key(key)])

    async def discard(self, key: Key) -> bool:
        """Remove ``key``; whether it was there (one call: no window between asking and removing)."""
        (old,) = await self.client.map_call(m.REMOVE, self.name, [self._key(key)], previous=True)
        return old is not None

    async def put_all(self, entries: Mapping[Key, Any] | Iterable[tuple[Key, Any]], ttl: float | None = None) -> None:
        """Store every entry (``ttl`` as put's, for each)."""
        keys, values = self._columns(entries)
        await self.client.map_call(m.PUT, self.name, keys, values, ttl_ms=ttl_ms_of(ttl))

    def _columns(self, entries: Mapping[Key, Any] | Iterable[tuple[Key, Any]]) -> tuple[list[bytes], list[bytes]]:
        pairs = entries.items() if isinstance(entries, Mapping) else entries
        keys: list[bytes] = []
        values: list[bytes] = []
        dump_key, dump_value = self.key_serializer.dumps, self.value_serializer.dumps
        for key, value in pairs:
            keys.append(dump_key(key))
            values.append(dump_value(value))
        return keys, values

    async def get_all(self, keys: Iterable[Key]) -> dict[Key, Any]:
        """The keys that have a value, with their values (missing keys are left out)."""
        wanted = list(dict.fromkeys(keys))
        found = await self.client.map_call(m.GET, self.name, [self._key(key) for key in wanted])
        load = self.value_serializer.loads
        return {key: load(data) for key, data in zip(wanted, found, strict=True) if data is not None}

    async def remove_all(self, keys: Iterable[Key]) -> None:
        await self.client.map_call(m.REMOVE, self.name, [self._key(key) for key in dict.fromkeys(keys)])

    # --- whole-map reads (a scan of every partition, a few at a time) -------------------------------

    async def _scan_all(self, keys_only: bool) -> AsyncIterator[tuple[list[bytes], list[bytes]]]:
        count = await self.client.partition_count()
        window = asyncio.Semaphore(SCAN_PARALLEL_PARTITIONS)

        async def one(pid: int) -> tuple[list[bytes], list[bytes]]:
            async with window:
                return await self.client.scan_partition(self.name, pid, keys_only=keys_only)

        tasks = [asyncio.ensure_future(one(pid)) for pid in range(count)]
        try:
            for task in tasks:
                yield await task
        finally:
            for task in tasks:
                task.cancel()

    async def size(self) -> int:
        """Entries in the map, counted partition by partition (each count as its owner has it)."""
        count = await self.client.partition_count()
        window = asyncio.Semaphore(SCAN_PARALLEL_PARTITIONS)

        async def one(pid: int) -> int:
            async with window:
                return await self.client.count_partition(self.name, pid)

        return sum(await asyncio.gather(*(one(pid) for pid in range(count))))

    async def keys(self) -> list[Any]:
        load = self.key_serializer.loads
        return [load(key) async for keys, _ in self._scan_all(keys_only=True) for key in keys]

    async def values(self) -> list[Any]:
        load = self.value_serializer.loads
        return [load(value) async for _, values in self._scan_all(keys_only=False) for value in values]

    async def entries(self) -> list[tuple[Any, Any]]:
        load_key, load_value = self.key_serializer.loads, self.value_serializer.loads
        return [
            (load_key(key), load_value(value))
            async for keys, values in self._scan_all(keys_only=False)
            for key, value in zip(keys, values, strict=True)
        ]

    async def clear(self) -> int:
        """Remove every entry, partition by partition; returns how many were removed. Not atomic:
        a write that lands during the clear may survive it (as with Hazelcast's clear on a busy map)."""
        removed = 0
        async for keys, _ in self._scan_all(keys_only=True):
            if keys:
                await self.client.map_call(m.REMOVE, self.name, keys)
                removed += len(keys)
        return removed
