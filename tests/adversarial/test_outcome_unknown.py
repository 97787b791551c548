"""A write that was never sent is reported as one that may have been applied.

``AsyncClient._attempt`` turns a failure to *connect* to the owner (ClusterUnavailableError, or
the connect timing out) into the same ``(batch, None)`` as a lost answer, and
``call_policy.on_no_answer`` marks the write ``maybe_applied``. So with the only member down (or
the owner's address refusing connections), where not one byte of the request left the client:

- ``fail_on_indeterminate_operation_state=True``: ``IndeterminateOperationStateError`` at once
  ("applied by an owner but not confirmed ..., or the owner left before answering"), the error an
  application must treat as "may have happened";
- otherwise ``OperationTimeoutError.outcome_unknown`` is True ("some writes may have been
  applied").

Expected: outcome known (not applied): ``outcome_unknown`` False, and no
IndeterminateOperationStateError for a request that never reached a member.
"""

from __future__ import annotations

import time

import pytest

from shardgrid.client import Client, OperationTimeoutError
from shardgrid.client.errors import ClusterUnavailableError
from tests.runtime.local_cluster import LocalCluster


@pytest.fixture(scope="module")
def dead_cluster_client(tmp_path_factory):
    with LocalCluster(tmp_path_factory.mktemp("dead"), 1, "--partition-count", "7") as running:
        running.wait_formed()
        clients = [
            Client(running.addresses, operation_call_timeout_ms=3_000, attempt_timeout_ms=1_000),
            Client(
                running.addresses,
                operation_call_timeout_ms=3_000,
                attempt_timeout_ms=1_000,
                fail_on_indeterminate_operation_state=True,
            ),
        ]
        try:
            for client in clients:
                client.get_map("m").set("warm", 1)  # table known, connection open
            running.kill(running.addresses[0])
            time.sleep(1.0)  # the clients have seen their connections close
            yield clients
        finally:
            for client in clients:
                client.close()


def test_timeout_of_a_write_never_sent_is_not_outcome_unknown(dead_cluster_client):
    client = dead_cluster_client[0]
    with pytest.raises((OperationTimeoutError, ClusterUnavailableError)) as raised:
        client.get_map("m").set("k", 1)
    if isinstance(raised.value, OperationTimeoutError):
        assert raised.value.outcome_unknown is False, f"never sent, yet: {raised.value}"


def test_no_indeterminate_state_for_a_write_never_sent(dead_cluster_client):
    client = dead_cluster_client[1]
    with pytest.raises((OperationTimeoutError, ClusterUnavailableError)) as raised:
        client.get_map("m").set("k", 1)  # not IndeterminateOperationStateError: nothing reached a member
    assert not getattr(raised.value, "outcome_unknown", False), f"never sent, yet: {raised.value}"
