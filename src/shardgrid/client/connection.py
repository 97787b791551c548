"""One client connection to one member: the handshake, then calls matched to their answers.

Calls are pipelined: many may be in flight on one connection, each with its own call id, and the
answers come back in any order. A reply that a member split (``MapReply.more``) is put back
together here. A lost connection fails every call in flight at once, so the caller can decide
(with ``core.call_policy``) what to do about each.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections import deque
from collections.abc import Callable
from typing import Any

import msgspec

from shardgrid.client.errors import AuthenticationError, ClusterUnavailableError
from shardgrid.core import messages as m
from shardgrid.core.limits import MAX_OPERATIONS_PER_REQUEST
from shardgrid.core.session import NONCE_BYTES, PeerRole, Session, SessionSettings
from shardgrid.runtime.stream import FrameStream

MAX_CALLS_IN_FLIGHT = 10_000  # per connection; a caller past it waits for a slot


class ConnectionLost(Exception):
    """The connection closed (or broke) before the answer came."""


class MemberConnection:
    def __init__(
        self,
        address: str,
        session_settings: SessionSettings,
        ssl_context: ssl.SSLContext | None,
        max_frame_bytes: int,
        high_water_bytes: int,
    ) -> None:
        self.address = address
        self._session_settings = session_settings
        self._ssl = ssl_context
        self._max_frame_bytes = max_frame_bytes
        self._high_water_bytes = high_water_bytes
        self._stream: FrameStream | None = None
        self._session: Session | None = None
        self._established: asyncio.Future[None] | None = None
        self._calls: dict[int, tuple[asyncio.Future[Any], list[m.MapReply]]] = {}
        self._tables: deque[asyncio.Future[m.TableReply]] = deque()
        self._listeners: dict[int, Callable[[m.EventNotice], None]] = {}
        self._next_call_id = 0
        self._writable = asyncio.Event()
        self._writable.set()
        self._slots = asyncio.Semaphore(MAX_CALLS_IN_FLIGHT)
        self.closed = False
        self.close_reason = ""
        self._epoch = 0.0  # the loop's time when the handshake ended: this connection's clock starts

    async def open(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        host, _, port = self.address.rpartition(":")
        if not host or not port.isdigit():
            raise ClusterUnavailableError(f"{self.address!r} is not host:port")
        self._established = loop.create_future()
        try:
            async with asyncio.timeout(timeout_s):
                _, stream = await loop.create_connection(
                    lambda: FrameStream(self, self._max_frame_bytes, self._high_water_bytes),
                    host,
                    int(port),
                    ssl=self._ssl,
                    server_hostname=host if self._ssl is not None else None,
                )
                self._stream = stream
                session, hello = Session.initiate(
                    self._session_settings, PeerRole.CLIENT, None, self.address, os.urandom(NONCE_BYTES), 0
                )
                self._session = session
                stream.send(hello)
                await self._established
        except TimeoutError:
            self.close()
            raise ClusterUnavailableError(f"{self.address}: no connection within {timeout_s:.1f} s") from None
        except (OSError, ssl.SSLError) as error:
            self.close()
            raise ClusterUnavailableError(f"{self.address}: cannot connect ({error})") from None

    # --- calls -----------------------------------------------------------------------------------

    def new_call_id(self) -> int:
        self._next_call_id += 1
        return self._next_call_id

    async def call(self, message: Any, deadline: float | None = None) -> Any:
        """Send a message with a ``call_id`` and return its answer (a MapReply put back together, an
        AdminReply, a MemberStatus). Raises ConnectionLost. ``deadline``: the loop's time after
        which a map request may no longer take effect; it is stamped on the request as it leaves
        (``MapRequest.sent_ms`` on this connection's clock, ``deadline_ms`` from then on)."""
        async with self._slots:
            stream = self._live_stream()
            loop = asyncio.get_running_loop()
            future: asyncio.Future[Any] = loop.create_future()
            self._calls[message.call_id] = (future, [])
            try:
                await self._writable.wait()
                if deadline is not None and type(message) is m.MapRequest:
                    now = loop.time()
                    message = msgspec.structs.replace(
                        message,
                        sent_ms=int((now - self._epoch) * 1000),
                        deadline_ms=max(1, int((deadline - now) * 1000)),
                    )
                stream.send(message)
                return await future
            finally:
                self._calls.pop(message.call_id, None)

    async def table_page(self, first_partition: int) -> m.TableReply:
        stream = self._live_stream()
        future: asyncio.Future[m.TableReply] = asyncio.get_running_loop().create_future()
        self._tables.append(future)
        stream.send(m.TableRequest(first_partition))
        return await future

    def listen(self, on_notice: Callable[[m.EventNotice], None]) -> int:
        """Ask the member for its events; ``on_notice`` gets each (on the client's loop) until
        the connection closes. Returns the subscription's call id."""
        stream = self._live_stream()
        call_id = self.new_call_id()
        self._listeners[call_id] = on_notice
        stream.send(m.ListenRequest(call_id))
        return call_id

    def _live_stream(self) -> FrameStream:
        stream = self._stream
        if self.closed or stream is None or stream.closed:
            raise ConnectionLost(self.close_reason or "closed")
        return stream

    def close(self, reason: str = "closed by the client") -> None:
        """Reset the connection: what the kernel still holds of it (a request an unreachable member
        never acknowledged) is dropped at once, never sent late. Closed gracefully instead, the
        kernel retransmits such a request until the member can be reached again, which may be long
        after the client gave up on it and sent it again elsewhere (found by an outside tester:
        requests arrived 12 to 53 s late and were applied over newer writes)."""
        if not self.closed:
            self.closed = True
            self.close_reason = reason
        if self._stream is not None:
            self._stream.abort()
        self._fail_all()

    # --- what the stream reports -----------------------------------------------------------------

    def on_connected(self, stream: FrameStream) -> None:
        pass  # the stream takes only the handshake's messages until ``on_messages`` opens it

    def on_messages(self, stream: FrameStream, messages: list[Any]) -> None:
        session = self._session
        if session is None:
            return
        for message in messages:
            if not session.established:
                step = session.receive(message)
                for reply in step.send:
                    stream.send(reply)
                if session.closed:
                    self._refused(session.refusal)
                    return
                if session.established:
                    self._epoch = asyncio.get_running_loop().time()
                    stream.accept_only(None)
                    if self._established is not None and not self._established.done():
                        self._established.set_result(None)
                continue
            self._on_answer(message)

    def _on_answer(self, message: Any) -> None:
        kind = type(message)
        if kind is m.MapReply:
            entry = self._calls.get(message.call_id)
            if entry is None:
                return  # an answer to a call given up on
            future, parts = entry
            if future.done():
                return
            parts.append(message)
            if not message.more:
                future.set_result(_joined(parts))
            elif len(parts) > MAX_OPERATIONS_PER_REQUEST:  # a member splits at most a part per key
                future.set_result(_unjoinable(message.call_id, f"{len(parts)} parts and more to come"))
        elif kind is m.EventNotice:
            listener = self._listeners.get(message.call_id)
            if listener is not None:
                listener(message)
        elif kind is m.TableReply:
            while self._tables:
                future = self._tables.popleft()
                if not future.done():
                    future.set_result(message)
                    break
        elif hasattr(message, "call_id"):
            entry = self._calls.get(message.call_id)
            if entry is not None and not entry[0].done():
                entry[0].set_result(message)

    def _refused(self, reason: str) -> None:
        self.close_reason = f"{self.address} refused the handshake: {reason}"
        error: Exception
        if "secret" in reason or "cluster" in reason or "protocol" in reason:
            error = AuthenticationError(self.close_reason)
        else:
            error = ClusterUnavailableError(self.close_reason)
        if self._established is not None and not self._established.done():
            self._established.set_exception(error)
        self.close(self.close_reason)

    def on_broken(self, stream: FrameStream, reason: str) -> None:
        self.close_reason = f"{self.address} sent bad input: {reason}"

    def on_closed(self, stream: FrameStream) -> None:
        self.closed = True
        if not self.close_reason:
            self.close_reason = f"{self.address} closed the connection"
        if self._established is not None and not self._established.done():
            self._established.set_exception(ClusterUnavailableError(self.close_reason))
        self._fail_all()
        self._writable.set()

    def on_backlog(self, stream: FrameStream, over_high_water: bool) -> None:
        if over_high_water:
            self._writable.clear()
        else:
            self._writable.set()

    def _fail_all(self) -> None:
        for future, _ in list(self._calls.values()):
            if not future.done():
                future.set_exception(ConnectionLost(self.close_reason))
        while self._tables:
            future = self._tables.popleft()
            if not future.done():
                future.set_exception(ConnectionLost(self.close_reason))


def _joined(parts: list[m.MapReply]) -> m.MapReply:
    """One reply out of the parts of a split one (each covers the keys from its first_index).
    Parts that do not cover the keys end to end, from the first, are no answer a member writes:
    they join into one that answers no key (which the caller takes for a malformed answer)."""
    parts.sort(key=lambda part: part.first_index)
    start = 0
    for part in parts:
        if part.first_index != start or (part.more and not part.codes):
            return _unjoinable(parts[0].call_id, f"a part from key {part.first_index} where key {start} was next")
        start += len(part.codes)
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    codes = b"".join(part.codes for part in parts)
    values = m.Column(b"".join(part.values.data for part in parts), b"".join(part.values.lengths for part in parts))
    return m.MapReply(
        call_id=first.call_id,
        codes=codes,
        values=values,
        present=b"".join(part.present for part in parts),
        redirects=first.redirects,
        retry_after_ms=first.retry_after_ms,
        reason=first.reason,
    )


def _unjoinable(call_id: int, problem: str) -> m.MapReply:
    return m.MapReply(call_id=call_id, codes=b"", reason=f"an answer in parts that do not fit together: {problem}")
