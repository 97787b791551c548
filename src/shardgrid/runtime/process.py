"""A member process: the core's ``Member`` on real sockets, timers and the monotonic clock.

Thin on purpose: every decision is the member's. This module moves frames between connections and
``Member.handle``, turns ``SetTimer`` into loop timers and ``Emit`` into log lines, and keeps the
connections honest:

- every connection completes the core's session handshake (``core/session.py``) before anything
  it sends reaches the member; the member then hears from the identity the handshake proved;
- a member reaches a peer over the connection it dialed to the peer's address (one per address);
  what a peer dials to us is where we hear from it. A frame meant for an earlier incarnation at an
  address (the uuid the handshake proved differs) is dropped, as the simulator's network does;
- bad bytes, an oversized or unknown frame, a failed or slow handshake: that connection is closed
  with one log line, and nothing else changes;
- nothing grows without bound: frames waiting for a dial, a peer's unsent backlog, handshaking
  connections, clients. A peer over its backlog is cut off (the member's timed resends bring what
  was lost once it reconnects); a client over its backlog stops being read until it catches up.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import random
import signal
import ssl
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from shardgrid.core import codec
from shardgrid.core import messages as m
from shardgrid.core.effects import Emit, KeepIdentity, Persist, ReplyToClient, Send, SendToAddress, SetTimer, Stop
from shardgrid.core.identity import MemberId
from shardgrid.core.inputs import LinkRestored, Start, StopSignalled, Synced, TimerFired
from shardgrid.core.inputs import Receive as ReceiveEvent
from shardgrid.core.member import Member
from shardgrid.core.member.discovery import REPORT_EVERY_RETRIES
from shardgrid.core.session import NONCE_BYTES, PeerRole, Session, SessionSettings
from shardgrid.runtime import logs, tls
from shardgrid.runtime.data_directory import DataDirectory
from shardgrid.runtime.frame_budget import FrameBudget
from shardgrid.runtime.metrics import MemberMetrics
from shardgrid.runtime.notices import notice_of
from shardgrid.runtime.record_file import DiskFailed, DiskFull
from shardgrid.runtime.settings import Settings
from shardgrid.runtime.stream import FrameStream

# Bounds of the runtime's own queues (the member bounds its own).
MAX_QUEUED_PER_DIAL = 4_096  # frames for a peer whose connection is still being made
MAX_HANDSHAKING_CONNECTIONS = 256  # connections that have not completed the handshake yet
MAX_CLIENT_CONNECTIONS = 4_096
PEER_BACKLOG_FACTOR = 4  # a peer with this many high-water marks unsent is cut off
MIN_REDIAL_MS = 100  # after a failed dial, sends to that address are dropped for this long ...
MAX_REDIAL_MS = 2_000  # ... doubling up to this
HOUSEKEEPING_MS = 100
CLOSE_FLUSH_S = 1.0  # how long a stopping process waits for its last frames to be written
STATUS_EVERY_TICKS = 10  # the metrics read the member's status once a second
MAX_TIMED_CALLS_PER_CLIENT = 100_000  # calls in flight whose latency is measured; more go untimed
MAX_LISTENERS_PER_CLIENT = 64  # event subscriptions on one client connection
MAX_LOST_PEERS = 1_024  # addresses whose frames may have been lost, kept until their link is back
# Connections refused by the handshake, and failed dials, are logged at most once per peer (and
# reason) every REPORT_EVERY_RETRIES join retries, as often as the member says why no cluster
# formed (10 s by default), with how many were not; the peers remembered for it at most:
MAX_BOUNDED_LOG_KEYS = 1_024
LOCAL_CLIENT = "local"  # the process itself, asking its member to leave on SIGTERM
# What a client session may send; anything else (a member's message) closes its connection.
CLIENT_MESSAGES = frozenset(
    {m.MapRequest, m.ScanRequest, m.TableRequest, m.MemberStatusRequest, m.AdminRequest, m.ListenRequest}
)
# What a connection's frames may be once its handshake is done (a stream takes only the handshake's
# until then), checked before they are decoded: a client session's requests, anything from a member.
_CLIENT_CODES = codec.codes_of(CLIENT_MESSAGES)


class LinkKind(enum.Enum):
    DIALED = "dialed"  # we opened it, to reach a member at an address
    ACCEPTED = "accepted"  # a member or a client opened it to us


@dataclass(eq=False, slots=True, kw_only=True)
class Link:
    kind: LinkKind
    address: str  # dialed: the address dialed; accepted: the socket's remote host:port
    session: Session | None = None
    stream: FrameStream | None = None
    client_id: str = ""  # an accepted client's name in ReplyToClient
    queued: list[tuple[str | None, Any]] = field(default_factory=list)  # (target uuid, message) before the handshake
    dial_task: asyncio.Task[None] | None = None
    calls: dict[int, tuple[float, str, str]] = field(default_factory=dict)  # a client's: call id -> (start, map, op)
    deferred: list[Any] = field(default_factory=list)  # a client's messages read while its answers piled up
    listening: list[int] = field(default_factory=list)  # a client's ListenRequest call ids: each gets the events
    clock_offset_ms: int = 0  # a client's: our clock less its clock for this connection, at most (_sent_at)


class MemberProcess:
    """Owns the sockets, the timers and the member; ``await run()`` until it stops."""

    def __init__(self, settings: Settings, logger: logging.Logger | None = None) -> None:
        self.settings = settings
        self.process = settings.process
        self.logger = logger or logging.getLogger(logs.LOGGER_NAME)
        self.member: Member | None = None
        self.identity: MemberId | None = None
        self.stop_reason = ""
        self.exit_code = 0
        self._server: asyncio.Server | None = None
        self._server_ssl = tls.server_context(
            self.process.tls_cert_file, self.process.tls_key_file, self.process.tls_ca_file
        )
        self._dial_ssl: ssl.SSLContext | None = None
        if self._server_ssl is not None:
            self._dial_ssl = tls.client_context(
                self.process.tls_ca_file, self.process.tls_cert_file, self.process.tls_key_file
            )
        secret = (self.process.cluster_secret or "").encode()
        self._session_settings = SessionSettings(
            self.process.cluster_name, codec.PROTOCOL_VERSION, secret, self.process.handshake_timeout_ms
        )
        self._links: dict[FrameStream, Link] = {}
        self._dialed: dict[str, Link] = {}
        self._redial_after: dict[str, tuple[float, int]] = {}  # address -> (loop time, backoff ms)
        # Peers whose frames may have been lost (a connection closed, a frame dropped): when a link
        # with one is up again the member is told (LinkRestored) and resends to it at once.
        self._lost_peers: dict[str, None] = {}
        self._clients: dict[str, Link] = {}
        self._client_counter = 0
        self._client_frames = FrameBudget(self.process.client_frame_budget_bytes)
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._t0 = 0.0
        # The loop this process runs on, kept: asyncio.get_running_loop() asks the kernel for the
        # pid on every call (about 280 ns here), and the data path asked it several times a message.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = asyncio.Event()
        self._housekeeping: asyncio.TimerHandle | None = None
        self._housekeeping_ms = 0  # when the last housekeeping tick ran
        self._signals = 0
        self._ticks = 0
        self.metrics = MemberMetrics()
        # A persistent member's data directory, and the sends and replies that wait for its next
        # sync (one sync for all a loop turn wrote: group commit), in order.
        self._disk: DataDirectory | None = None
        self._unsynced_sends: list[tuple[str, str | None, Any, bool]] = []
        self._sync_scheduled = False
        self._timed_sync: asyncio.TimerHandle | None = None  # fsync = every_ms: the next sync
        self._disk_refused = False  # the data directory refused a write or a sync
        interval_s = REPORT_EVERY_RETRIES * settings.member_config.join_retry_ms / 1000
        self._refusal_lines = logs.BoundedLines(self.logger, interval_s, MAX_BOUNDED_LOG_KEYS)
        self._dial_failure_lines = logs.BoundedLines(self.logger, interval_s, MAX_BOUNDED_LOG_KEYS)

    # --- the clock -------------------------------------------------------------------------------

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        return loop

    def now_ms(self) -> int:
        return int((self.loop.time() - self._t0) * 1000)

    # --- starting and stopping -------------------------------------------------------------------

    async def start(self) -> MemberId:
        """Listen, then start the member; returns its identity (with the port actually bound).
        A signal that came while it began listening (``install_signal_handlers`` goes first)
        stopped the process before it had a member: none is started, and ``run`` returns at once."""
        loop = self._loop = asyncio.get_running_loop()
        self._t0 = loop.time()
        process = self.process
        self._server = await loop.create_server(
            lambda: FrameStream(self, process.max_frame_bytes, process.write_high_water_bytes, accepted=True),
            process.host,
            process.port,
            ssl=self._server_ssl,
            reuse_address=True,
        )
        port = self._server.sockets[0].getsockname()[1]
        address = f"{process.host}:{port}"
        self.identity = MemberId(str(uuid.uuid4()), address)
        if self._stopped.is_set():
            return self.identity
        hash_seed = int.from_bytes(os.urandom(8), "little")
        disk = None
        if process.data_dir is not None:
            try:
                self._disk, kept, disk = DataDirectory.open(
                    process.data_dir,
                    address=address,
                    cluster_name=process.cluster_name,
                    hash_seed=hash_seed,
                    max_idle_ms=self.settings.member_config.max_idle_ms,
                    now_ms=self.now_ms(),
                )
                if kept is not None:
                    # Back at another address, it is the same member (the same uuid) there.
                    self.identity = MemberId(kept.uuid, address)
                else:
                    self._disk.set_identity(self.identity, process.cluster_name)
            except BaseException:
                self._server.close()
                raise
        seeds = tuple(dict.fromkeys((*process.join, address)))
        rng = random.Random(int.from_bytes(os.urandom(16), "big"))
        self.member = Member(
            self.identity,
            self.settings.member_config,
            seeds,
            rng,
            lite=process.lite,
            hash_seed=hash_seed,
            clock_offset_ms=int(time.time() * 1000) - self.now_ms(),
        )
        logs.log(
            self.logger,
            "member-listening",
            address=address,
            uuid=self.identity.uuid,
            cluster=process.cluster_name,
            lite=process.lite,
            tls=self._server_ssl is not None,
            join=list(process.join),
            loop=type(loop).__module__.split(".")[0],
            data_dir=str(process.data_dir) if process.data_dir is not None else None,
        )
        if process.metrics_port is not None:
            self.metrics.serve(process.host, process.metrics_port)
            logs.log(self.logger, "metrics-serving", address=f"{process.host}:{process.metrics_port}")
        self._handle(Start(disk))
        self._housekeeping = loop.call_later(HOUSEKEEPING_MS / 1000, self._on_housekeeping)
        return self.identity

    async def run(self) -> int:
        """Run until the member stops (graceful shutdown, cluster shutdown, a fatal error)."""
        await self._stopped.wait()
        await self._close_all()
        return self.exit_code

    def install_signal_handlers(self) -> None:
        """SIGTERM or SIGINT: leave gracefully (the member hands its replicas over first); a second
        one stops at once, as a crash would. Installed before ``start``: one that comes before the
        member exists stops the process (exit 0), with its member-exit line like any other stop."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self._on_signal, sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        """The member decides what a signal does (the first leaves, a second stops at once)."""
        logs.log(self.logger, "member-signalled", signal=sig.name)
        if self.member is None:
            self._finish("stopped by a signal before it started", 0)
            return
        self._handle(StopSignalled(LOCAL_CLIENT, 0))

    def _finish(self, reason: str, exit_code: int) -> None:
        if self._stopped.is_set():
            return
        self.stop_reason = reason
        self.exit_code = exit_code
        self._stopped.set()

    async def _close_all(self) -> None:
        if self._timed_sync is not None:
            self._timed_sync.cancel()
            self._timed_sync = None
        if not self._disk_refused and (self._unsynced_sends or (self._disk is not None and self._disk.unsynced)):
            self._sync()  # what the member said last leaves once it is on the disk (every write, whatever fsync)
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        if self._housekeeping is not None:
            self._housekeeping.cancel()
        if self._server is not None:
            self._server.close()
        for link in list(self._links.values()):
            if link.stream is not None:
                link.stream.close()
        for link in list(self._dialed.values()):
            if link.dial_task is not None:
                link.dial_task.cancel()
        # What the member said last (a reply, the commit that tells followers the cluster shut
        # down) leaves before the process does: each transport closes once its buffer is written.
        deadline = asyncio.get_running_loop().time() + CLOSE_FLUSH_S
        while self._links and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), CLOSE_FLUSH_S)
        if self._disk is not None:
            self._disk.close()
        logs.log(self.logger, "member-exit", reason=self.stop_reason, exit_code=self.exit_code)

    # --- the member ------------------------------------------------------------------------------

    def _handle(self, event: Any) -> None:
        member = self.member
        if member is None or self._stopped.is_set():
            return
        before = member.identity
        try:
            effects = member.handle(self.now_ms(), event)
        except Exception as error:  # our bug: the member never raises on a peer's input
            self.logger.critical("member-failed", exc_info=error, extra={"fields": {"error": repr(error)}})
            self._finish(f"internal error: {error!r}", 70)
            return
        if member.identity != before:
            self._forget_identity(before, member.identity)
        holding = False
        if self._disk is not None:
            holding = self._write(self._disk, effects)
            if self._stopped.is_set():
                return
        for effect in effects:
            kind = type(effect)
            if kind is Send:
                if holding:
                    self._unsynced_sends.append((effect.target.address, effect.target.uuid, effect.message, False))
                else:
                    self._send(effect.target.address, effect.target.uuid, effect.message)
            elif kind is ReplyToClient:
                if holding:
                    self._unsynced_sends.append((effect.client_address, None, effect.message, True))
                else:
                    self._reply(effect.client_address, effect.message)
            elif kind is SendToAddress:
                if holding:
                    self._unsynced_sends.append((effect.address, None, effect.message, False))
                else:
                    self._send(effect.address, None, effect.message)
            elif kind is SetTimer:
                self._set_timer(effect.name, effect.at_ms)
            elif kind is Emit:
                self._on_emit(effect.event)
            elif kind is Stop:
                self._finish(effect.reason, effect.exit_code)

    def _write(self, disk: DataDirectory, effects: list[Any]) -> bool:
        """Carry out a step's ``Persist`` effects; whether its sends must wait for the next sync
        (its own writes need it, or an earlier step's sends wait already: they go out in order)."""
        holding = bool(self._unsynced_sends)
        for effect in effects:
            try:
                if isinstance(effect, Persist):
                    disk.write(effect)
                    holding = holding or effect.hold_sends
                elif isinstance(effect, KeepIdentity):
                    disk.set_identity(effect.member, self.process.cluster_name)  # synced as it is written
            except (DiskFull, DiskFailed, OSError) as error:
                self._disk_failed("write", error)
                return True
        if holding and not self._sync_scheduled:
            # After every read this loop turn has ready: one sync for all of them.
            self._sync_scheduled = True
            self.loop.call_soon(self._sync)
        elif disk.unsynced and self._timed_sync is None and self.settings.member_config.fsync == "every_ms":
            # Writes that need not wait (fsync = every_ms): synced within fsync_interval_ms.
            interval_s = self.settings.member_config.fsync_interval_ms / 1000
            self._timed_sync = self.loop.call_later(interval_s, self._sync_on_timer)
        return holding

    def _sync_on_timer(self) -> None:
        self._timed_sync = None
        if not self._sync_scheduled:
            self._sync()

    def _sync(self) -> None:
        self._sync_scheduled = False
        disk = self._disk
        if disk is None:
            return
        try:
            seconds = disk.sync()
        except (DiskFailed, OSError) as error:
            self._disk_failed("sync", error)
            return
        sends, self._unsynced_sends = self._unsynced_sends, []
        for address, target_uuid, message, to_client in sends:
            if to_client:
                self._reply(address, message)
            else:
                self._send(address, target_uuid, message)
        self._report_synced(disk, seconds)

    def _report_synced(self, disk: DataDirectory, seconds: float) -> None:
        """Tell the member what of its writes is durable and how much room its disk has (and the
        metrics what the sync took)."""
        free_bytes = disk.free_bytes()
        self.metrics.on_sync(seconds, disk.file_bytes(), free_bytes)
        self._handle(Synced(disk.synced, free_bytes))

    def _disk_failed(self, what: str, error: BaseException) -> None:
        """The member's core counts on what it wrote being kept: a write or sync the disk refused
        leaves it ahead of its disk, so the process stops (nothing that waited was sent) and a
        restart comes back from what the disk holds."""
        self._unsynced_sends = []
        self._disk_refused = True  # nothing more is written or synced: the restart reads the disk
        logs.log(self.logger, "disk-failed", logging.CRITICAL, refused=what, error=str(error))
        self._finish(f"the data directory refused a {what}: {error}", 74)

    def _on_emit(self, event: Any) -> None:
        logs.log_member_event(self.logger, event)
        self.metrics.on_event(event)
        for link in self._clients.values():
            stream = link.stream
            if not link.listening or stream is None:
                continue
            if stream.backlog_bytes >= self.process.write_high_water_bytes:
                self.metrics.notices_dropped.inc()  # a listener that does not keep up loses news
                continue
            for call_id in link.listening:
                notice = notice_of(event, call_id)
                if notice is not None:
                    stream.send(notice)

    def _forget_identity(self, old: MemberId, new: MemberId) -> None:
        """Removed and rejoining as ``new``: every member connection proved ``old``; close them, so
        that no peer goes on talking to an incarnation that no longer exists. Client connections
        are reset too: a request still unread on one was sent to a member that no longer exists,
        and must not be applied by its successor (found by an outside tester: a request a client
        had given up on was applied after the member rejoined under a new identity)."""
        self.identity = new
        logs.log(self.logger, "member-new-identity", old=old, new=new)
        if self._disk is not None:
            self._disk.set_identity(new, self.process.cluster_name)
        for link in list(self._links.values()):
            if link.stream is None:
                continue
            if link.client_id == "":
                link.stream.close()
            else:
                link.stream.abort()
        for link in list(self._dialed.values()):
            self._drop_dialed(link)

    def _set_timer(self, name: str, at_ms: int) -> None:
        old = self._timers.pop(name, None)
        if old is not None:
            old.cancel()
        self._timers[name] = self.loop.call_at(self._t0 + at_ms / 1000, self._on_timer, name)

    def _on_timer(self, name: str) -> None:
        self._timers.pop(name, None)
        self._handle(TimerFired(name))

    # --- sending ---------------------------------------------------------------------------------

    def _send(self, address: str, target_uuid: str | None, message: Any) -> None:
        identity = self.identity
        if identity is not None and address == identity.address:
            # To itself (the simulator's network delivers these too): the next loop turn, uncoded.
            if target_uuid is None or target_uuid == identity.uuid:
                self.loop.call_soon(self._handle, ReceiveEvent(address, identity, None, message))
            return
        link = self._dialed.get(address)
        if link is None:
            redial = self._redial_after.get(address)
            if redial is not None and asyncio.get_running_loop().time() < redial[0]:
                self._dropped("unreachable", address=address)
                return
            link = self._dial(address)
            if link is None:
                self._dropped("unreachable")
                return
        session, stream = link.session, link.stream
        if session is None or stream is None or not session.established:
            if len(link.queued) >= MAX_QUEUED_PER_DIAL:
                self._dropped("unreachable", address=address)
                return
            link.queued.append((target_uuid, message))
            return
        self._send_established(link, target_uuid, message)

    def _send_established(self, link: Link, target_uuid: str | None, message: Any) -> None:
        session, stream = link.session, link.stream
        if session is None or stream is None or session.peer is None:
            return
        if target_uuid is not None and session.peer.uuid != target_uuid:
            self._dropped("stale")
            return
        if stream.backlog_bytes > PEER_BACKLOG_FACTOR * self.process.write_high_water_bytes:
            self._dropped("peer cut off", address=link.address)
            logs.log(self.logger, "peer-cut-off", logging.WARNING, peer=link.address, reason="not reading its frames")
            stream.abort()
            return
        self.metrics.on_sent(message, stream.send(message))

    def _dropped(self, reason: str, count: int = 1, address: str | None = None) -> None:
        self.metrics.frames_dropped.labels(reason).inc(count)
        if address is not None and count > 0:
            self._lost(address)

    def _lost(self, address: str) -> None:
        if address in self._lost_peers:
            return
        if len(self._lost_peers) >= MAX_LOST_PEERS:
            # Forgetting one costs that peer a resend by the backstop timer, not its data.
            del self._lost_peers[next(iter(self._lost_peers))]
        self._lost_peers[address] = None

    def _link_restored(self, peer: MemberId) -> None:
        if peer.address in self._lost_peers:
            del self._lost_peers[peer.address]
            self.metrics.links_restored.inc()
            self._handle(LinkRestored(peer))

    def _reply(self, client_id: str, message: Any) -> None:
        if client_id == LOCAL_CLIENT:
            return  # the answer to the leave a signal asked for: the member decides what follows
        link = self._clients.get(client_id)
        if link is None or link.stream is None:
            return
        if type(message) is m.MapReply and not message.more:
            started = link.calls.pop(message.call_id, None)
            if started is not None:
                elapsed = self.loop.time() - started[0]
                self.metrics.on_reply(started[1], started[2], message, elapsed)
        link.stream.send(message)

    def _dial(self, address: str) -> Link | None:
        host, _, port_text = address.rpartition(":")
        if not host or not port_text.isdigit():
            return None  # not an address we can dial (the member only names addresses it was given)
        link = Link(kind=LinkKind.DIALED, address=address)
        self._dialed[address] = link
        link.dial_task = asyncio.get_running_loop().create_task(self._connect(link, host, int(port_text)))
        return link

    async def _connect(self, link: Link, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        process = self.process
        try:
            _, stream = await asyncio.wait_for(
                loop.create_connection(
                    lambda: FrameStream(self, process.max_frame_bytes, process.write_high_water_bytes),
                    host,
                    port,
                    ssl=self._dial_ssl,
                    server_hostname=host if self._dial_ssl is not None else None,
                ),
                process.handshake_timeout_ms / 1000,
            )
        except (TimeoutError, OSError, ssl.SSLError) as error:
            self._dial_failed(link, f"{type(error).__name__}: {error}")
            return
        if self._dialed.get(link.address) is not link or self._stopped.is_set():
            stream.close()
            return
        if stream.closed:
            # Closed by the peer before this resumed: its close found no link to drop, so this
            # one must not be kept (it would never be dialed again).
            self._dial_failed(link, "the connection closed as it opened")
            return
        link.stream = stream
        self._links[stream] = link
        identity = self.identity
        if identity is None:
            stream.close()
            return
        session, hello = Session.initiate(
            self._session_settings, PeerRole.MEMBER, identity, link.address, os.urandom(NONCE_BYTES), self.now_ms()
        )
        link.session = session
        stream.send(hello)

    def _dial_failed(self, link: Link, reason: str) -> None:
        previous = self._redial_after.get(link.address)
        backoff = MIN_REDIAL_MS if previous is None else min(previous[1] * 2, MAX_REDIAL_MS)
        self._redial_after[link.address] = (asyncio.get_running_loop().time() + backoff / 1000, backoff)
        self._dropped("unreachable", len(link.queued), link.address)
        lines = self._dial_failure_lines
        lines.log(link.address, self.loop.time(), "dial-failed", logging.DEBUG, address=link.address, reason=reason)
        self._drop_dialed(link)

    def _drop_dialed(self, link: Link) -> None:
        if self._dialed.get(link.address) is link:
            del self._dialed[link.address]
        link.queued.clear()
        if link.dial_task is not None and not link.dial_task.done():
            link.dial_task.cancel()
        if link.stream is not None:
            link.stream.close()

    # --- what the streams report -----------------------------------------------------------------

    def on_connected(self, stream: FrameStream) -> None:
        if stream.accepted:
            self._accept(stream)  # its handshake deadline runs from now

    def on_messages(self, stream: FrameStream, messages: list[Any]) -> None:
        link = self._links.get(stream)
        if link is None:
            return
        if link.deferred:  # still working off an earlier read: keep the order
            link.deferred.extend(messages)
            stream.pause_reading()
            return
        self._take(link, stream, messages)

    def _take(self, link: Link, stream: FrameStream, messages: list[Any]) -> None:
        for position, message in enumerate(messages):
            if stream.closed:
                return
            if link.client_id and stream.over_high_water:
                # A client whose answers pile up: what it sent in the same read waits until they
                # drain (pausing the socket alone would still answer everything already read, and
                # a few bytes of requests can ask for megabytes of answers).
                link.deferred.extend(messages[position:])
                stream.pause_reading()
                return
            session = link.session
            if session is None:
                return
            was_established = session.established
            step = session.receive(message)
            for reply in step.send:
                stream.send(reply)
            if session.closed:
                self._refused(link, session.refusal, at_handshake=True)
                return
            if session.established and not was_established and not self._on_established(link):
                return
            if step.deliver is not None:
                self._deliver(link, step.deliver)

    def _accept(self, stream: FrameStream) -> Link | None:
        identity = self.identity
        if identity is None:
            stream.abort()
            return None
        handshaking = [
            link
            for link in self._links.values()
            if link.kind is LinkKind.ACCEPTED and link.session is not None and not link.session.established
        ]
        if len(handshaking) >= MAX_HANDSHAKING_CONNECTIONS:
            # The oldest makes room: connections that say nothing cannot lock everyone out until
            # they time out, and an honest handshake takes milliseconds, not the whole timeout.
            oldest = min(handshaking, key=lambda link: link.session.deadline_ms if link.session else 0)
            self._refused(oldest, f"evicted: {len(handshaking)} connections were still shaking hands")
            if oldest.stream is not None:
                oldest.stream.abort()
                self._links.pop(oldest.stream, None)  # counted out now, not when asyncio reports it closed
        link = Link(kind=LinkKind.ACCEPTED, address=f"{stream.peer_host}:{stream.peer_port}", stream=stream)
        link.session = Session.accept(self._session_settings, identity, os.urandom(NONCE_BYTES), self.now_ms())
        self._links[stream] = link
        return link

    def _on_established(self, link: Link) -> bool:
        session, stream = link.session, link.stream
        if session is None or stream is None:
            return False
        if link.kind is LinkKind.DIALED:
            stream.accept_only(None)
            queued, link.queued = link.queued, []
            self._redial_after.pop(link.address, None)
            for target_uuid, message in queued:
                self._send_established(link, target_uuid, message)
            if session.peer is not None:
                self._link_restored(session.peer)
            return True
        if session.peer_role is PeerRole.CLIENT:
            if len(self._clients) >= MAX_CLIENT_CONNECTIONS:
                self._refused(link, f"{MAX_CLIENT_CONNECTIONS} clients are connected already")
                return False
            stream.accept_only(_CLIENT_CODES, budget=self._client_frames)
            self._client_counter += 1
            link.client_id = f"client-{self._client_counter}@{link.address}"
            link.clock_offset_ms = self.now_ms()  # the client's clock for it starts at our Welcome
            self._clients[link.client_id] = link
            logs.log(self.logger, "client-connected", logging.DEBUG, client=link.client_id)
            return True
        peer = session.peer
        same = [
            other
            for other in self._links.values()
            if other.kind is LinkKind.ACCEPTED and other.session is not None and other.session.peer == peer
        ]
        if peer is not None and len(same) > self.process.max_connections_per_address:
            self._refused(link, f"{peer.address} already has {len(same) - 1} connections")
            return False
        stream.accept_only(None)
        if peer is not None:
            self._link_restored(peer)
        return True

    def _deliver(self, link: Link, message: Any) -> None:
        session = link.session
        if session is None:
            return
        if session.peer_role is PeerRole.CLIENT:
            if type(message) not in CLIENT_MESSAGES:
                self._refused(link, f"a client may not send {type(message).__name__}")
                return
            if type(message) is m.ListenRequest:  # the process's own service: the member is not asked
                if len(link.listening) >= MAX_LISTENERS_PER_CLIENT:
                    self._refused(link, f"over {MAX_LISTENERS_PER_CLIENT} event subscriptions on one connection")
                    return
                link.listening.append(message.call_id)
                if link.stream is not None and self.identity is not None:
                    link.stream.send(
                        m.EventNotice(call_id=message.call_id, kind="listening", member=self.identity.address)
                    )
                return
            sent_ms = None
            if type(message) is m.MapRequest:
                if len(link.calls) < MAX_TIMED_CALLS_PER_CLIENT:
                    now = self.loop.time()
                    link.calls[message.call_id] = (now, message.map_name, message.kind.value)
                if message.deadline_ms:
                    sent_ms = self._sent_at(link, message.sent_ms)
            self._handle(ReceiveEvent(link.client_id, None, None, message, sent_ms))
            return
        peer = session.peer
        if peer is None:
            return
        claimed = getattr(message, "member", None) if isinstance(message, m.JoinRequest | m.Unjoined) else peer
        if claimed != peer:
            self._refused(link, "a message names a member other than the one this connection proved to be")
            return
        self._handle(ReceiveEvent(peer.address, peer, None, message))

    def _sent_at(self, link: Link, client_sent_ms: int) -> int:
        """When a client sent a message stamped ``client_sent_ms`` on its clock for the connection
        (ms since the handshake ended there), on this member's clock, never later than it was. The
        client's clock started when our Welcome reached it, after we sent it (``clock_offset_ms``,
        set then): adding that offset gives an instant no later than the true one. Each message
        that is faster than that proves a smaller offset, which is kept, so a client clock running
        fast is followed; one running slow only makes messages look older (refused sooner). A
        message held up on its way never raises the offset: it just looks as old as it is."""
        now = self.now_ms()
        link.clock_offset_ms = min(link.clock_offset_ms, now - client_sent_ms)
        return client_sent_ms + link.clock_offset_ms

    def _refused(self, link: Link, reason: str, at_handshake: bool = False) -> None:
        """Close ``link`` and log why. A refusal by the handshake (another cluster name, a wrong
        secret or protocol version, either side's) comes again at every retry of a process that
        dials or is dialed, each join retry or each send: it is logged at most once per peer,
        direction and reason every REPORT_EVERY_RETRIES join retries, with how many were not (the
        metric counts every one; an accepted connection's peer is its host, each comes from another
        port). Any other refusal is one connection's doing, and is logged each time."""
        self.metrics.connections_refused.inc()
        peer = link.session.peer if link.session is not None else None
        fields = {"peer": link.address, "member": peer, "direction": link.kind.value, "reason": reason}
        if at_handshake:
            host = link.address if link.kind is LinkKind.DIALED else link.address.rpartition(":")[0]
            key = (link.kind, host, reason)
            self._refusal_lines.log(key, self.loop.time(), "connection-refused", logging.WARNING, **fields)
        else:
            logs.log(
                self.logger,
                "connection-refused",
                logging.WARNING,
                peer=link.address,
                member=peer,
                direction=link.kind.value,
                reason=reason,
                suppressed=0,
            )
        if link.stream is not None:
            link.stream.close()

    def on_broken(self, stream: FrameStream, reason: str) -> None:
        link = self._links.get(stream)
        address = link.address if link is not None else f"{stream.peer_host}:{stream.peer_port}"
        self.metrics.connections_refused.inc()
        logs.log(self.logger, "connection-closed", logging.WARNING, peer=address, reason=f"bad input: {reason}")

    def on_closed(self, stream: FrameStream) -> None:
        link = self._links.pop(stream, None)
        if link is None:
            return
        if link.client_id:
            self._clients.pop(link.client_id, None)
        session = link.session
        if session is not None and session.established and session.peer_role is PeerRole.MEMBER and session.peer:
            self._lost(session.peer.address)  # frames either way may have gone with it
        if link.queued:
            self._dropped("unreachable", len(link.queued), link.address)
            link.queued.clear()
        if link.kind is LinkKind.DIALED and self._dialed.get(link.address) is link:
            del self._dialed[link.address]

    def on_backlog(self, stream: FrameStream, over_high_water: bool) -> None:
        link = self._links.get(stream)
        if link is None or not link.client_id:
            return  # a peer's backlog is checked as frames are sent to it
        if over_high_water:
            stream.pause_reading()  # the client's next requests wait in its socket
            return
        waiting, link.deferred = link.deferred, []
        self._take(link, stream, waiting)
        if not link.deferred and not stream.over_high_water:
            stream.resume_reading()

    # --- housekeeping ------------------------------------------------------------------------------

    def _redial_lost(self) -> None:
        """A member whose connection was lost is dialed again even when nothing is being sent to
        it: its acknowledgements, or the resends it owes this member, may be what everyone waits
        on. An address no member has any more is forgotten."""
        member = self.member
        if member is None or not self._lost_peers:
            return
        addresses = {replica.address for replica in member.consensus.state.member_ids}
        now = asyncio.get_running_loop().time()
        for address in list(self._lost_peers):
            if address not in addresses:
                del self._lost_peers[address]
            elif address not in self._dialed:
                redial = self._redial_after.get(address)
                if redial is None or now >= redial[0]:
                    self._dial(address)

    def _on_housekeeping(self) -> None:
        # Connections are judged as of the tick before this one. A tick that comes late (the loop
        # was busy, or the process stopped) runs before the reads that waited with it, and what a
        # connection owes may be among them: a client's frame, or a handshake's next message (a
        # member stopped past the handshake timeout refused every connection that was shaking hands
        # when it stopped). Between two ticks the loop has read what was waiting at the first, so
        # nothing is judged missing while it waits unread, and a loop that is late on every tick
        # still judges every connection, one tick later (skipping late ticks instead left a busy
        # member's silent connections open for as long as it stayed busy: found by an outside tester).
        as_of_ms, self._housekeeping_ms = self._housekeeping_ms, self.now_ms()
        as_of = self._t0 + as_of_ms / 1000  # in the loop's time, as the streams keep theirs
        process = self.process
        for link in list(self._links.values()):
            session = link.session
            if session is not None and session.expired(as_of_ms):
                self._refused(link, f"no handshake within {process.handshake_timeout_ms} ms")
            elif link.client_id and link.stream is not None:
                overdue = link.stream.frame_overdue(process.frame_timeout_ms, process.frame_stall_timeout_ms, as_of)
                if overdue:
                    link.stream.abort()  # its unread answers go too: a client that reads none holds them for ever
                    self._refused(link, overdue)
        self._redial_lost()
        now = self.loop.time()
        self._refusal_lines.flush(now)
        self._dial_failure_lines.flush(now)
        self._ticks += 1
        if self._ticks % STATUS_EVERY_TICKS == 0 and self.member is not None:
            disk = self._disk
            if disk is not None and not self._sync_scheduled:
                # The free space again, with nothing new synced: a member that refused writes for
                # want of room takes them again once it has room (its own writes may be refused).
                self._report_synced(disk, 0.0)
            self.metrics.on_status(self.member.status(0))
            kinds = {"client": 0, "member_dialed": 0, "member_accepted": 0}
            for link in self._links.values():
                kind = "client" if link.client_id else f"member_{link.kind.value}"
                kinds[kind] += 1
            for kind, count in kinds.items():
                self.metrics.connections.labels(kind).set(count)
            self.metrics.client_frame_bytes_claimed.set(self._client_frames.claimed_bytes)
            self.metrics.client_frames_waiting.set(self._client_frames.waiting)
        self._housekeeping = asyncio.get_running_loop().call_later(HOUSEKEEPING_MS / 1000, self._on_housekeeping)
