"""TLS between members and with clients (certificates made with trustme): with a CA file set, the
members ask every peer for a certificate that CA signed, and a client without TLS is turned away."""

from __future__ import annotations

import pytest
import trustme

from shardgrid.client import Client, ClusterUnavailableError

from .local_cluster import LocalCluster


@pytest.fixture
def certificates(tmp_path):
    ca = trustme.CA()
    member = ca.issue_cert("127.0.0.1")
    client = ca.issue_cert("shardgrid-client")
    paths = {name: tmp_path / f"{name}.pem" for name in ("ca", "cert", "key", "client_cert", "client_key")}
    ca.cert_pem.write_to_path(paths["ca"])
    member.private_key_pem.write_to_path(paths["key"])
    member.cert_chain_pems[0].write_to_path(paths["cert"])
    client.private_key_pem.write_to_path(paths["client_key"])
    client.cert_chain_pems[0].write_to_path(paths["client_cert"])
    return paths


def test_a_cluster_over_mutual_tls(tmp_path, certificates):
    tls = (
        "--set",
        f"tls_cert_file={certificates['cert']}",
        "--set",
        f"tls_key_file={certificates['key']}",
        "--set",
        f"tls_ca_file={certificates['ca']}",
    )
    with LocalCluster(tmp_path, 3, *tls) as running:
        running.wait_formed()
        assert "tls=true" in running.log_text(running.addresses[0])
        with Client(
            running.addresses[:1],
            tls_ca_file=certificates["ca"],
            tls_cert_file=certificates["client_cert"],
            tls_key_file=certificates["client_key"],
            operation_call_timeout_ms=60_000,
        ) as client:
            secure = client.get_map("secure")
            secure.put_all({f"k{i}": i for i in range(1_000)})
            assert secure.size() == 1_000
        with pytest.raises(ClusterUnavailableError):
            Client(running.addresses[:1], connect_timeout_ms=2_000, operation_call_timeout_ms=3_000)
        with pytest.raises(ClusterUnavailableError):  # TLS, but no client certificate
            Client(
                running.addresses[:1],
                tls_ca_file=certificates["ca"],
                connect_timeout_ms=2_000,
                operation_call_timeout_ms=3_000,
            )
