"""A cluster with a secret: what gets in and what does not."""

from __future__ import annotations

import contextlib

import pytest

from shardgrid.core import messages as m
from shardgrid.core.session import PeerRole, Proof
from tests.runtime.local_cluster import LocalCluster

from .raw import Raw, fake_member

SECRET = "s3cret-for-tests"


@pytest.fixture(scope="module")
def secret_cluster(tmp_path_factory):
    with LocalCluster(tmp_path_factory.mktemp("secret"), 1, "--set", f"cluster_secret={SECRET}") as running:
        running.wait_for_log(running.addresses[0], "leader-changed")
        yield running


def test_member_hello_without_the_secret_is_refused(secret_cluster):
    address = secret_cluster.addresses[0]
    raw = Raw(address, PeerRole.MEMBER, fake_member("127.0.0.1:9"), secret="wrong")
    try:
        with pytest.raises(ConnectionError, match="secret"):
            raw.handshake()
    finally:
        raw.close()


def test_a_recorded_proof_does_not_open_another_session(secret_cluster):
    address = secret_cluster.addresses[0]
    honest = Raw(address, secret=SECRET)
    honest.handshake()
    recorded = [message for message in honest.sent_handshake if isinstance(message, Proof)]
    honest.close()
    replay = Raw(address, secret="wrong")
    try:
        replay.send(replay.hello)
        replay.recv_one()  # the Challenge, with a fresh nonce
        replay.send(recorded[0])
        replay.send(m.MemberStatusRequest(1))
        answer = None
        with contextlib.suppress(ConnectionError, TimeoutError):
            answer = replay.recv_one(5)
        assert not isinstance(answer, m.MemberStatus)
    finally:
        replay.close()


def test_with_a_secret_a_client_session_adds_no_member_either(secret_cluster):
    """The secret keeps strangers out, but a CLIENT session (which needs no member identity) can
    still make the leader add any member it names: roles are not separated."""
    from shardgrid.core.config import MemberConfig

    address = secret_cluster.addresses[0]
    raw = Raw(address, secret=SECRET)
    try:
        raw.handshake()
        raw.send(m.JoinRequest(fake_member("127.0.0.1:2"), False, True, MemberConfig().settings_digest))
        secret_cluster.wait_for_log(address, "member-added member=127.0.0.1:2/", timeout_s=5)
    except AssertionError:
        return  # not added: fine
    finally:
        raw.close()
    pytest.fail("a client session made the leader add a member at 127.0.0.1:2")
