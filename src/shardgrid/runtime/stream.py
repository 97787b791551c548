"""One TCP connection carrying the core's frames: decoded as bytes arrive, written once per loop turn.

An ``asyncio.Protocol`` rather than streams: ``data_received`` hands the bytes straight to the
codec's ``FrameDecoder`` (which refuses an oversized frame from its length prefix, before it
buffers the body), and frames sent during one turn of the event loop leave in one ``writelines``
call. The stream knows nothing of sessions or members: it tells its ``StreamOwner`` what arrived
and when it can or cannot take more, and the owner decides what that means for its peer.

Every stream starts out taking only the handshake's messages, in frames of at most
``MAX_HANDSHAKE_FRAME_BYTES``, whichever side dialed: until the owner's session has proved who the
peer is, it is a stranger (found by outside testers: a 16 MiB frame of empty commands decoded to
~400 MiB in a member that accepted it, in one that dialed an address a stranger had taken, and in a
client; 64 connections that never finished the handshake held 1 GiB of partial frames). The owner
widens it with ``accept_only`` once the handshake is done, and hands a client's stream the
process's ``FrameBudget``: from then on a part-read frame over ``UNBUDGETED_FRAME_BYTES`` is claimed
from it before the stream reads on (its reading paused while the claim waits), and ``frame_overdue``
tells the owner when a claimed frame has taken too long since its claim was granted, or has had no
byte come in for too long while the stream read.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from typing import Any, Protocol, cast

from shardgrid.core import codec
from shardgrid.core.errors import invariant
from shardgrid.core.limits import MAX_HANDSHAKE_FRAME_BYTES
from shardgrid.runtime.frame_budget import UNBUDGETED_FRAME_BYTES, FrameBudget

# SO_LINGER on, with no time: close() resets the connection and frees what the kernel still had
# queued to send, instead of sending it first.
_LINGER_NOT_AT_ALL = struct.pack("ii", 1, 0)


def _reset_on_close(transport: asyncio.BaseTransport) -> None:
    """A connection aborted is one whose peer we give up on: most often one that does not read
    (its answers or backups piled up, or its frame is overdue), so what the kernel had taken to
    send would wait for it as long as it keeps the connection open (found by an outside tester: a
    client closed for an overdue frame kept 4 MB of its answers in the member's kernel, in
    FIN-WAIT-1, for as long as it read nothing)."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):  # already closed or reset: nothing is held
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_NOT_AT_ALL)


class StreamOwner(Protocol):
    def on_connected(self, stream: FrameStream) -> None: ...

    def on_messages(self, stream: FrameStream, messages: list[Any]) -> None: ...

    def on_broken(self, stream: FrameStream, reason: str) -> None: ...

    def on_closed(self, stream: FrameStream) -> None: ...

    def on_backlog(self, stream: FrameStream, over_high_water: bool) -> None: ...


class FrameStream(asyncio.Protocol):
    """Frames in and out of one connection.

    ``send`` never blocks and never drops: it queues the frame for the end of this loop turn. How
    much may wait is the owner's call: ``backlog_bytes`` says how much does, and ``on_backlog``
    fires when the transport pauses writing (its buffer reached ``high_water_bytes``) or this
    turn's frames alone reach it (up), and when both are over (down).
    """

    def __init__(self, owner: StreamOwner, max_frame_bytes: int, high_water_bytes: int, accepted: bool = False) -> None:
        self.owner = owner
        self.accepted = accepted  # a listener made it (else we dialed)
        self.transport: asyncio.Transport | None = None
        self.peer_host = ""
        self.peer_port = 0
        self._decoder = codec.FrameDecoder(min(max_frame_bytes, MAX_HANDSHAKE_FRAME_BYTES), codec.HANDSHAKE_CODES)
        self._max_frame_bytes = max_frame_bytes
        self._high_water_bytes = high_water_bytes
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._flush_scheduled = False
        self._over_high_water = False
        self._transport_paused = False
        self._loop: asyncio.AbstractEventLoop | None = None  # kept: get_running_loop() costs a getpid
        self.closed = False
        # Reading stops while the owner asks (its answers pile up) or a frame's claim waits.
        self._paused_by_owner = False
        self._budget: FrameBudget | None = None
        self.claimed_frame_bytes = 0  # the part-read frame's claim (granted or waiting); 0: none
        self._waiting_for_budget = False
        self._granted_at = 0.0  # loop time the claim was granted
        self._progress_at = 0.0  # loop time a byte of the claimed frame last came (or reading resumed)

    # --- asyncio's callbacks ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: what matters is that it writes.
        if not callable(getattr(transport, "write", None)):
            raise TypeError(f"a frame stream runs over a stream transport, not {type(transport).__name__}")
        self.transport = cast(asyncio.Transport, transport)
        self._loop = asyncio.get_running_loop()
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer_host, self.peer_port = str(peer[0]), int(peer[1])
        # The transport's own buffer reports up at the high-water mark; ours adds the frames of
        # this loop turn on top of it.
        transport.set_write_buffer_limits(high=self._high_water_bytes, low=self._high_water_bytes // 4)
        self.owner.on_connected(self)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            messages = self._decoder.feed(data)
        except codec.StreamError as error:
            if error.decoded:
                self.owner.on_messages(self, error.decoded)
            self.owner.on_broken(self, str(error))
            self.close()
            return
        if self._budget is not None:
            self._account(bool(messages))
        if messages:
            self.owner.on_messages(self, messages)

    def eof_received(self) -> bool:
        return False  # half-closed is closed: the core has no use for a one-way connection

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._pending.clear()
        self._pending_bytes = 0
        self._end_claim()
        self.owner.on_closed(self)

    def pause_writing(self) -> None:
        self._transport_paused = True
        self._check_backlog()

    def resume_writing(self) -> None:
        self._transport_paused = False
        self._check_backlog()

    # --- what the owner calls --------------------------------------------------------------------

    def send(self, message: Any) -> int:
        """Queue ``message``; returns its frame's size. Raises ProtocolError (our message is over
        the frame limit) or TypeError (not a message): both are the sender's bug."""
        frame = codec.encode(message)
        if self.closed:
            return len(frame)
        self._pending.append(frame)
        self._pending_bytes += len(frame)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop = self._loop
            if loop is None:
                loop = self._loop = asyncio.get_running_loop()
            loop.call_soon(self._flush)
        if not self._over_high_water and self._pending_bytes >= self._high_water_bytes:
            self._check_backlog()
        return len(frame)

    @property
    def backlog_bytes(self) -> int:
        transport = self.transport
        buffered = transport.get_write_buffer_size() if transport is not None and not self.closed else 0
        return buffered + self._pending_bytes

    def accept_only(self, codes: frozenset[int] | None, budget: FrameBudget | None = None) -> None:
        """Take only frames of these wire codes (``codec.codes_of``) from now on, None for all, of
        up to the stream's own frame limit: a frame of another kind breaks the connection before it
        is decoded, a longer one from its length prefix. With ``budget``, each part-read frame over
        ``UNBUDGETED_FRAME_BYTES`` is claimed from it first."""
        self._decoder.accepted = codes
        self._decoder.max_frame_bytes = self._max_frame_bytes
        if budget is not None and self._budget is None:
            self._budget = budget
            self._account(False)

    def pause_reading(self) -> None:
        self._paused_by_owner = True
        self._set_reading()

    def resume_reading(self) -> None:
        if self._paused_by_owner:
            self._progress_at = self._now()  # nothing could come in while it was paused
        self._paused_by_owner = False
        self._set_reading()

    def frame_overdue(self, timeout_ms: int, stall_ms: int, as_of: float | None = None) -> str:
        """Why the claimed part-read frame is overdue ('' while it is not): not whole ``timeout_ms``
        after its claim was granted (whatever paused the reading meanwhile: a client that does not
        read its answers keeps its claim no longer than one that does not send), or no byte of it
        in ``stall_ms`` while the stream read (a claim that waited its turn and then sends nothing
        gives the budget back soon). Judged as of the loop time ``as_of`` (default now): what came
        in after it counts as having come then."""
        if not self.claimed_frame_bytes or self._waiting_for_budget:
            return ""
        now = self._now() if as_of is None else as_of
        if (now - self._granted_at) * 1000 > timeout_ms:
            return f"a frame of {self.claimed_frame_bytes} bytes was not whole {timeout_ms} ms after it was let in"
        if not self._paused_by_owner and (now - self._progress_at) * 1000 > stall_ms:
            return f"no byte of a frame of {self.claimed_frame_bytes} bytes came in {stall_ms} ms"
        return ""

    def budget_granted(self, frame_bytes: int) -> None:
        invariant(self._waiting_for_budget and frame_bytes == self.claimed_frame_bytes, "a grant answers our claim")
        self._waiting_for_budget = False
        self._granted_at = self._progress_at = self._now()
        self._set_reading()

    def close(self) -> None:
        """Close after what is queued has been written."""
        if self.closed:
            return
        self._flush()
        self.closed = True
        self._end_claim()
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Close at once, dropping what is queued, here and in the kernel (a peer that does not
        read): the peer sees the connection reset."""
        self.closed = True
        self._pending.clear()
        self._pending_bytes = 0
        self._end_claim()
        if self.transport is not None:
            _reset_on_close(self.transport)
            self.transport.abort()

    # --- inside ------------------------------------------------------------------------------------

    def _now(self) -> float:
        loop = self._loop
        return loop.time() if loop is not None else 0.0

    def _account(self, decoded: bool) -> None:
        """After a read: the claim follows the part-read frame. A frame decoded in this read means
        the one claimed (always the first in line) is whole, even when the next is as long."""
        partial = self._decoder.partial_frame_bytes
        wanted = partial if partial > UNBUDGETED_FRAME_BYTES else 0
        if self.claimed_frame_bytes and (decoded or wanted != self.claimed_frame_bytes):
            self._end_claim()
        if self.claimed_frame_bytes:
            self._progress_at = self._now()  # more of the same frame came in
            return
        if not wanted or self._budget is None:
            return
        self.claimed_frame_bytes = wanted
        self._granted_at = self._progress_at = self._now()
        if not self._budget.claim(self, wanted):
            self._waiting_for_budget = True  # read on once granted (``budget_granted``)
            self._set_reading()

    def _end_claim(self) -> None:
        if self.claimed_frame_bytes and self._budget is not None:
            self._budget.release(self)
        self.claimed_frame_bytes = 0
        self._waiting_for_budget = False

    def _set_reading(self) -> None:
        """Reads while neither the owner nor a waiting claim holds it."""
        transport = self.transport
        reading = not (self._paused_by_owner or self._waiting_for_budget)
        if transport is not None and not self.closed and transport.is_reading() != reading:
            if reading:
                transport.resume_reading()
            else:
                transport.pause_reading()

    def _flush(self) -> None:
        self._flush_scheduled = False
        if not self._pending or self.closed or self.transport is None:
            return
        frames, self._pending = self._pending, []
        self._pending_bytes = 0
        try:
            self.transport.writelines(frames)
        except (RuntimeError, OSError) as error:  # the transport closed under us
            self.owner.on_broken(self, f"write failed: {error}")
            self.abort()
            return
        self._check_backlog()

    def _check_backlog(self) -> None:
        # Over while the transport says so (it pauses at the high-water mark and resumes, always,
        # once drained below a quarter of it) or while this turn's frames alone reach the mark.
        # Nothing else: a state that only a later callback could clear would freeze the stream
        # when the callback never comes (a transport that was never paused never resumes).
        over = self._transport_paused or self._pending_bytes >= self._high_water_bytes
        if over != self._over_high_water:
            self._over_high_water = over
            self.owner.on_backlog(self, over)

    @property
    def over_high_water(self) -> bool:
        return self._over_high_water
