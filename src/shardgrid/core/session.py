"""The session handshake every connection completes before a member takes anything from it.

A sans-IO state machine per connection, like the member: the runtime feeds it the messages that
arrive and sends what it returns; once it is established, the runtime hands the member the
messages that follow, with the sender identity the handshake proved (never one a message claims).

Four messages, so that both sides prove they know the cluster's secret without sending it
(challenge-response with HMAC-SHA256 over a transcript of both nonces and both identities):

    initiator                                  acceptor
    Hello(version, cluster, role, identity, the address dialed, nonce) ->
                                               <- Challenge(identity, nonce, acceptor's proof)
    Proof(initiator's proof)                   ->
                                               <- Welcome()

The initiator checks the acceptor's proof before it proves anything itself, so a client never
talks to a process that does not know the secret either. The Hello names the address the
initiator dialed, the acceptor refuses one meant for another address, and both proofs cover it:
a process that gets a member to dial it cannot relay that member's handshake to a third member
and then speak to it under the relayed identity. Without a configured secret the proofs
are computed with an empty key: the cluster name and the protocol version are still checked, and
nothing is authenticated. Anything out of order, malformed or wrong ends the session with a
``Refused`` carrying the reason, and the connection is closed: the peer's error, never ours.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Annotated, Any

import msgspec

from shardgrid.core.errors import invariant, require
from shardgrid.core.identity import MAX_ADDRESS_CHARS, MemberId
from shardgrid.core.wire import Counter, Message

NONCE_BYTES = 32
PROOF_BYTES = hashlib.sha256().digest_size
MAX_CLUSTER_NAME_CHARS = 128
MAX_REASON_CHARS = 512

Nonce = Annotated[bytes, msgspec.Meta(min_length=NONCE_BYTES, max_length=NONCE_BYTES)]
ProofBytes = Annotated[bytes, msgspec.Meta(min_length=PROOF_BYTES, max_length=PROOF_BYTES)]
ClusterName = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_CLUSTER_NAME_CHARS)]


class PeerRole(enum.StrEnum):
    MEMBER = "member"  # a member process: it names its identity
    CLIENT = "client"  # a client: anonymous, it sends requests and gets answers


class Hello(Message, tag=10, kw_only=True):
    protocol_version: Counter
    cluster_name: ClusterName
    role: PeerRole
    identity: MemberId | None  # a member's; None for a client
    to_address: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ADDRESS_CHARS)]  # the address dialed
    nonce: Nonce


class Challenge(Message, tag=11):
    identity: MemberId  # the acceptor's
    nonce: Nonce
    proof: ProofBytes


class Proof(Message, tag=12):
    proof: ProofBytes


class Welcome(Message, tag=13):
    pass


class Refused(Message, tag=14):
    reason: Annotated[str, msgspec.Meta(max_length=MAX_REASON_CHARS)]


HANDSHAKE_TYPES = (Hello, Challenge, Proof, Welcome, Refused)


class SessionState(enum.Enum):
    AWAITING_HELLO = "awaiting-hello"  # acceptor, nothing received yet
    AWAITING_CHALLENGE = "awaiting-challenge"  # initiator, Hello sent
    AWAITING_PROOF = "awaiting-proof"  # acceptor, Challenge sent
    AWAITING_WELCOME = "awaiting-welcome"  # initiator, Proof sent
    ESTABLISHED = "established"
    CLOSED = "closed"


_NEXT: dict[SessionState, frozenset[SessionState]] = {
    SessionState.AWAITING_HELLO: frozenset({SessionState.AWAITING_PROOF, SessionState.CLOSED}),
    SessionState.AWAITING_CHALLENGE: frozenset({SessionState.AWAITING_WELCOME, SessionState.CLOSED}),
    SessionState.AWAITING_PROOF: frozenset({SessionState.ESTABLISHED, SessionState.CLOSED}),
    SessionState.AWAITING_WELCOME: frozenset({SessionState.ESTABLISHED, SessionState.CLOSED}),
    SessionState.ESTABLISHED: frozenset({SessionState.CLOSED}),
    SessionState.CLOSED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class SessionSettings:
    cluster_name: str
    protocol_version: int
    secret: bytes = field(default=b"", repr=False)
    handshake_timeout_ms: int = 5_000

    def validate(self) -> None:
        require(0 < len(self.cluster_name) <= MAX_CLUSTER_NAME_CHARS, "cluster_name must be 1..128 characters")
        require(self.handshake_timeout_ms > 0, "handshake_timeout_ms must be positive")


@dataclass(slots=True)
class Step:
    """What one received message did: messages to send back, and, once established, the message
    to hand to the member (None for the handshake's own)."""

    send: list[Any] = field(default_factory=list)
    deliver: Any = None


class Session:
    """One connection's handshake and, once established, the peer it proved to be."""

    def __init__(
        self,
        settings: SessionSettings,
        role: PeerRole,
        identity: MemberId | None,
        nonce: bytes,
        now_ms: int,
        initiator: bool,
    ) -> None:
        invariant(len(nonce) == NONCE_BYTES, "a nonce is NONCE_BYTES of fresh randomness")
        invariant((identity is None) == (role is PeerRole.CLIENT), "a member names its identity, a client does not")
        self.settings = settings
        self.role = role
        self.identity = identity
        self.nonce = nonce
        self.deadline_ms = now_ms + settings.handshake_timeout_ms
        self.initiator = initiator
        self.state = SessionState.AWAITING_CHALLENGE if initiator else SessionState.AWAITING_HELLO
        self.peer_role: PeerRole | None = None
        self.peer: MemberId | None = None  # the identity the peer proved (a member's)
        self.refusal = ""  # why it closed
        self._hello: Hello | None = None

    @classmethod
    def initiate(
        cls,
        settings: SessionSettings,
        role: PeerRole,
        identity: MemberId | None,
        to_address: str,
        nonce: bytes,
        now_ms: int,
    ) -> tuple[Session, Hello]:
        """A connection we opened to ``to_address``: the session, and the Hello to send first."""
        session = cls(settings, role, identity, nonce, now_ms, initiator=True)
        hello = Hello(
            protocol_version=settings.protocol_version,
            cluster_name=settings.cluster_name,
            role=role,
            identity=identity,
            to_address=to_address,
            nonce=nonce,
        )
        session._hello = hello
        return session, hello

    @classmethod
    def accept(cls, settings: SessionSettings, identity: MemberId, nonce: bytes, now_ms: int) -> Session:
        """A connection a peer opened to this member."""
        return cls(settings, PeerRole.MEMBER, identity, nonce, now_ms, initiator=False)

    @property
    def established(self) -> bool:
        return self.state is SessionState.ESTABLISHED

    @property
    def closed(self) -> bool:
        return self.state is SessionState.CLOSED

    def expired(self, now_ms: int) -> bool:
        """Still shaking hands past the deadline: the runtime closes the connection."""
        return not self.established and not self.closed and now_ms >= self.deadline_ms

    def receive(self, message: Any) -> Step:
        if self.state is SessionState.CLOSED:
            return Step()
        if self.state is SessionState.ESTABLISHED:
            if type(message) in HANDSHAKE_TYPES:
                return self._refuse("a handshake message after the handshake")
            return Step(deliver=message)
        if isinstance(message, Refused):
            self.refusal = f"refused by the peer: {message.reason}"
            self._move(SessionState.CLOSED)
            return Step()
        handler = {
            SessionState.AWAITING_HELLO: (Hello, self._on_hello),
            SessionState.AWAITING_CHALLENGE: (Challenge, self._on_challenge),
            SessionState.AWAITING_PROOF: (Proof, self._on_proof),
            SessionState.AWAITING_WELCOME: (Welcome, self._on_welcome),
        }[self.state]
        expected, method = handler
        if type(message) is not expected:
            return self._refuse(f"expected {expected.__name__}, got {type(message).__name__} before the handshake")
        return method(message)

    # --- the acceptor ----------------------------------------------------------------------------

    def _on_hello(self, hello: Hello) -> Step:
        settings = self.settings
        if hello.protocol_version != settings.protocol_version:
            theirs, ours = hello.protocol_version, settings.protocol_version
            return self._refuse(f"protocol version {theirs}, this member speaks {ours}")
        if hello.cluster_name != settings.cluster_name:
            return self._refuse(f"cluster {hello.cluster_name!r} is not this member's cluster")
        if (hello.identity is None) != (hello.role is PeerRole.CLIENT):
            return self._refuse("a member names its identity, a client does not")
        if hello.identity is not None and hello.identity == self.identity:
            return self._refuse("a peer cannot be this member")
        invariant(self.identity is not None, "an acceptor is a member")
        if hello.to_address != self.identity.address:
            return self._refuse(f"this is {self.identity.address}, not {hello.to_address}")
        if hello.nonce == self.nonce:
            return self._refuse("a reflected nonce")
        self._hello = hello
        self.peer_role = hello.role
        self._move(SessionState.AWAITING_PROOF)
        proof = self._proof(b"acceptor", hello, self.identity, self.nonce)
        return Step(send=[Challenge(self.identity, self.nonce, proof)])

    def _on_proof(self, message: Proof) -> Step:
        hello = self._hello
        invariant(hello is not None and self.identity is not None, "a proof follows our challenge")
        expected = self._proof(b"initiator", hello, self.identity, self.nonce)
        if not hmac.compare_digest(expected, message.proof):
            return self._refuse("the proof does not match this cluster's secret")
        self.peer = hello.identity
        self._move(SessionState.ESTABLISHED)
        return Step(send=[Welcome()])

    # --- the initiator ---------------------------------------------------------------------------

    def _on_challenge(self, challenge: Challenge) -> Step:
        hello = self._hello
        invariant(hello is not None, "an initiator sent its Hello")
        if challenge.nonce == self.nonce:
            return self._refuse("a reflected nonce")
        if challenge.identity == self.identity:
            return self._refuse("a peer cannot be this process")
        if challenge.identity.address != hello.to_address:
            return self._refuse(f"dialed {hello.to_address}, answered by {challenge.identity.address}")
        expected = self._proof(b"acceptor", hello, challenge.identity, challenge.nonce)
        if not hmac.compare_digest(expected, challenge.proof):
            return self._refuse("the member's proof does not match this cluster's secret")
        self.peer = challenge.identity
        self.peer_role = PeerRole.MEMBER
        self._move(SessionState.AWAITING_WELCOME)
        return Step(send=[Proof(self._proof(b"initiator", hello, challenge.identity, challenge.nonce))])

    def _on_welcome(self, _: Welcome) -> Step:
        self._move(SessionState.ESTABLISHED)
        return Step()

    # --- both --------------------------------------------------------------------------------------

    def _proof(self, side: bytes, hello: Hello, acceptor: MemberId, acceptor_nonce: bytes) -> bytes:
        """HMAC over everything both sides said: a proof made for one session, one direction or
        one pair of identities is worth nothing in another."""
        said = (hello.protocol_version, hello.cluster_name, hello.role, hello.identity, hello.to_address, hello.nonce)
        transcript = msgspec.msgpack.encode((side, *said, acceptor, acceptor_nonce))
        return hmac.new(self.settings.secret, transcript, hashlib.sha256).digest()

    def _refuse(self, reason: str) -> Step:
        self.refusal = reason
        self._move(SessionState.CLOSED)
        return Step(send=[Refused(reason[:MAX_REASON_CHARS])])

    def _move(self, state: SessionState) -> None:
        invariant(state in _NEXT[self.state], lambda: f"session cannot go from {self.state} to {state}")
        self.state = state
