"""The session handshake: both sides prove the cluster's secret; nothing passes before it."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from shardgrid.core import codec
from shardgrid.core import messages as m
from shardgrid.core.identity import MemberId
from shardgrid.core.session import (
    NONCE_BYTES,
    PROOF_BYTES,
    Challenge,
    Hello,
    PeerRole,
    Proof,
    Refused,
    Session,
    SessionSettings,
    SessionState,
    Welcome,
)

A = MemberId("aaaaaaaa-0000-4000-8000-000000000001", "127.0.0.1:5701")
B = MemberId("bbbbbbbb-0000-4000-8000-000000000002", "127.0.0.1:5702")
SETTINGS = SessionSettings("prod", codec.PROTOCOL_VERSION, b"s3cret")


def nonce(i: int) -> bytes:
    return bytes([i]) * NONCE_BYTES


def wire(message: Any) -> Any:
    (decoded,) = codec.FrameDecoder().feed(codec.encode(message))
    return decoded


def shake(initiator: Session, acceptor: Session, hello: Hello) -> None:
    """Carry messages both ways, through the codec, until nobody has anything to say."""
    to_acceptor, to_initiator = [hello], []
    for _ in range(10):
        for message in to_acceptor:
            to_initiator += acceptor.receive(wire(message)).send
        to_acceptor = []
        for message in to_initiator:
            to_acceptor += initiator.receive(wire(message)).send
        to_initiator = []
        if not to_acceptor:
            return


def established(role: PeerRole, identity: MemberId | None) -> tuple[Session, Session]:
    """A session from ``identity`` to member B, both sides sharing the secret, shaken to the end."""
    initiator, hello = Session.initiate(SETTINGS, role, identity, B.address, nonce(1), 0)
    acceptor = Session.accept(SETTINGS, B, nonce(2), 0)
    shake(initiator, acceptor, hello)
    assert initiator.established
    assert acceptor.established
    return initiator, acceptor


def test_two_members_that_share_the_secret_each_learn_the_other_as_proved() -> None:
    initiator, acceptor = established(PeerRole.MEMBER, A)
    assert (initiator.peer, acceptor.peer) == (B, A)
    assert acceptor.peer_role is PeerRole.MEMBER
    request = m.TableRequest()
    assert acceptor.receive(request).deliver is request


def test_a_client_is_anonymous_but_checks_the_member_it_talks_to() -> None:
    client, member = established(PeerRole.CLIENT, None)
    assert (client.peer, member.peer, member.peer_role) == (B, None, PeerRole.CLIENT)


def test_without_the_secret_neither_side_gets_through() -> None:
    wrong = SessionSettings("prod", codec.PROTOCOL_VERSION, b"guess")
    # A client with the wrong secret finds the member's proof wrong and stops there.
    client, hello = Session.initiate(wrong, PeerRole.CLIENT, None, B.address, nonce(1), 0)
    member = Session.accept(SETTINGS, B, nonce(2), 0)
    shake(client, member, hello)
    assert client.closed
    assert "member's proof" in client.refusal
    assert member.closed
    assert not member.established
    # An impostor that ignores the member's proof and answers anyway is refused.
    member = Session.accept(SETTINGS, B, nonce(2), 0)
    (challenge,) = member.receive(
        Hello(
            protocol_version=codec.PROTOCOL_VERSION,
            cluster_name="prod",
            role=PeerRole.MEMBER,
            identity=A,
            to_address=B.address,
            nonce=nonce(1),
        )
    ).send
    assert isinstance(challenge, Challenge)
    (refused,) = member.receive(Proof(b"\0" * PROOF_BYTES)).send
    assert isinstance(refused, Refused)
    assert member.closed
    assert member.peer is None


def test_a_proof_from_another_session_is_worth_nothing() -> None:
    initiator, hello = Session.initiate(SETTINGS, PeerRole.MEMBER, A, B.address, nonce(1), 0)
    first = Session.accept(SETTINGS, B, nonce(2), 0)
    (challenge,) = first.receive(hello).send
    (proof,) = initiator.receive(challenge).send
    second = Session.accept(SETTINGS, B, nonce(3), 0)  # a fresh nonce: the recorded proof replayed
    second.receive(hello)
    assert isinstance(second.receive(proof).send[0], Refused)
    assert not second.established


def test_another_cluster_or_protocol_version_is_refused_with_the_reason() -> None:
    member = Session.accept(SETTINGS, B, nonce(2), 0)
    (refused,) = member.receive(
        Hello(
            protocol_version=codec.PROTOCOL_VERSION,
            cluster_name="staging",
            role=PeerRole.MEMBER,
            identity=A,
            to_address=B.address,
            nonce=nonce(1),
        )
    ).send
    assert "staging" in refused.reason
    member = Session.accept(SETTINGS, B, nonce(2), 0)
    (refused,) = member.receive(
        Hello(
            protocol_version=codec.PROTOCOL_VERSION + 1,
            cluster_name="prod",
            role=PeerRole.MEMBER,
            identity=A,
            to_address=B.address,
            nonce=nonce(1),
        )
    ).send
    assert "protocol version" in refused.reason
    member = Session.accept(SETTINGS, B, nonce(2), 0)
    (refused,) = member.receive(
        Hello(
            protocol_version=codec.PROTOCOL_VERSION,
            cluster_name="prod",
            role=PeerRole.CLIENT,
            identity=A,
            to_address=B.address,
            nonce=nonce(1),
        )
    ).send
    assert "client does not" in refused.reason


def test_nothing_passes_before_the_handshake_and_a_closed_session_stays_closed() -> None:
    member = Session.accept(SETTINGS, B, nonce(2), 0)
    step = member.receive(m.TableRequest())
    assert step.deliver is None
    assert isinstance(step.send[0], Refused)
    assert member.state is SessionState.CLOSED
    assert (
        member.receive(
            Hello(
                protocol_version=codec.PROTOCOL_VERSION,
                cluster_name="prod",
                role=PeerRole.MEMBER,
                identity=A,
                to_address=B.address,
                nonce=nonce(1),
            )
        ).send
        == []
    )


def test_a_handshake_that_does_not_finish_in_time_expires() -> None:
    member = Session.accept(SETTINGS, B, nonce(2), 1_000)
    assert not member.expired(1_000 + SETTINGS.handshake_timeout_ms - 1)
    assert member.expired(1_000 + SETTINGS.handshake_timeout_ms)


def test_a_handshake_message_after_the_handshake_closes_the_session() -> None:
    initiator, hello = Session.initiate(SETTINGS, PeerRole.MEMBER, A, B.address, nonce(1), 0)
    acceptor = Session.accept(SETTINGS, B, nonce(2), 0)
    shake(initiator, acceptor, hello)
    assert isinstance(acceptor.receive(Welcome()).send[0], Refused)
    assert acceptor.closed


_replicas = st.sampled_from([A, B, MemberId("cccccccc-0000-4000-8000-000000000003", "127.0.0.1:5703")])
_nonces = st.binary(min_size=NONCE_BYTES, max_size=NONCE_BYTES)
_proofs = st.binary(min_size=PROOF_BYTES, max_size=PROOF_BYTES)
_hostile = st.one_of(
    st.builds(
        Hello,
        protocol_version=st.just(codec.PROTOCOL_VERSION),
        cluster_name=st.just("prod"),
        role=st.sampled_from(list(PeerRole)),
        identity=_replicas,
        to_address=st.sampled_from([A.address, B.address]),
        nonce=_nonces,
    ),
    st.builds(Challenge, _replicas, _nonces, _proofs),
    st.builds(Proof, _proofs),
    st.just(Welcome()),
    st.just(m.TableRequest()),
)


@given(st.lists(_hostile, max_size=6))
def test_a_peer_without_the_secret_never_establishes_whatever_it_sends(messages: list[Any]) -> None:
    member = Session.accept(SETTINGS, B, nonce(2), 0)
    for message in messages:
        step = member.receive(message)
        assert step.deliver is None
    assert not member.established


def test_a_handshake_relayed_through_a_process_the_member_dialed_establishes_nothing() -> None:
    """Found by an outside tester: T got member A to dial it and relayed A's handshake to member
    C; C took T's connection as A's."""
    c = MemberId("cccccccc-0000-4000-8000-000000000003", "127.0.0.1:5703")
    dialer, hello = Session.initiate(SETTINGS, PeerRole.MEMBER, A, "10.6.6.6:6666", nonce(1), 0)  # A dials T
    victim = Session.accept(SETTINGS, c, nonce(3), 0)  # T passes A's Hello on to C
    (answer,) = victim.receive(wire(hello)).send
    assert isinstance(answer, Refused)
    assert "not 10.6.6.6:6666" in answer.reason
    # A Hello rewritten for C's address no longer matches what A signs and checks.
    forged = Hello(
        protocol_version=hello.protocol_version,
        cluster_name=hello.cluster_name,
        role=hello.role,
        identity=hello.identity,
        to_address=c.address,
        nonce=hello.nonce,
    )
    victim = Session.accept(SETTINGS, c, nonce(3), 0)
    (challenge,) = victim.receive(wire(forged)).send
    assert isinstance(challenge, Challenge)
    (refused,) = dialer.receive(wire(challenge)).send
    assert isinstance(refused, Refused)
    assert not dialer.established
    assert not victim.established
