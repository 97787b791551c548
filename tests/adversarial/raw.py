"""A hostile peer speaking the protocol over a plain socket (client or member handshake)."""

from __future__ import annotations

import enum
import os
import socket
import time
import uuid
from typing import Any

from shardgrid.core import codec
from shardgrid.core.identity import MemberId
from shardgrid.core.session import NONCE_BYTES, PeerRole, Session, SessionSettings


class Ending(enum.Enum):
    """How a peer's side of a connection stood when a read stopped."""

    OPEN = "open"
    CLOSED = "closed"
    RESET = "reset"


class Raw:
    def __init__(
        self,
        address: str,
        role: PeerRole = PeerRole.CLIENT,
        identity: MemberId | None = None,
        cluster: str = "shardgrid",
        secret: str = "",
        timeout_s: float = 10,
    ) -> None:
        host, _, port = address.rpartition(":")
        self.address = address
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.decoder = codec.FrameDecoder()
        self.inbox: list[Any] = []
        settings = SessionSettings(cluster, codec.PROTOCOL_VERSION, secret.encode())
        self.session, hello = Session.initiate(settings, role, identity, address, os.urandom(NONCE_BYTES), 0)
        self.hello = hello
        self.sent_handshake: list[Any] = [hello]

    def handshake(self, hello_sent: bool = False) -> None:
        if not hello_sent:
            self.send(self.hello)
        while not self.session.established:
            message = self.recv_one()
            step = self.session.receive(message)
            for reply in step.send:
                self.sent_handshake.append(reply)
                self.send(reply)
            if self.session.closed:
                raise ConnectionError(self.session.refusal)

    def send(self, message: Any) -> None:
        self.sock.sendall(codec.encode(message))

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_one(self, timeout_s: float = 10) -> Any:
        deadline = time.monotonic() + timeout_s
        while not self.inbox:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no message")
            self.sock.settimeout(left)
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("closed by the peer")
            self.inbox.extend(self.decoder.feed(data))
        return self.inbox.pop(0)

    def read_to_end(self, timeout_s: float = 10) -> tuple[Ending, int]:
        """Reads (and drops) what comes until the peer ends the connection or ``timeout_s`` passes:
        how it ended, and how many bytes came first."""
        deadline = time.monotonic() + timeout_s
        received = 0
        try:
            while time.monotonic() < deadline:
                self.sock.settimeout(max(0.01, deadline - time.monotonic()))
                data = self.sock.recv(1 << 20)
                if not data:
                    return Ending.CLOSED, received
                received += len(data)
        except ConnectionResetError:
            return Ending.RESET, received
        except BrokenPipeError:
            return Ending.CLOSED, received
        except TimeoutError:
            pass
        return Ending.OPEN, received

    def closed_by_peer(self, timeout_s: float = 10) -> bool:
        return self.read_to_end(timeout_s)[0] is not Ending.OPEN

    def reset_by_peer(self, timeout_s: float = 10) -> tuple[bool, int]:
        """Whether the peer reset the connection (rather than closing it after what it had sent),
        and how many bytes came first."""
        ending, received = self.read_to_end(timeout_s)
        return ending is Ending.RESET, received

    def close(self) -> None:
        self.sock.close()


def fake_member(address: str) -> MemberId:
    return MemberId(str(uuid.uuid4()), address)
