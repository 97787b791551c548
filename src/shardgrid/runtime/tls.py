"""TLS contexts from a member's settings (stdlib ``ssl``).

With a certificate and key, a member serves TLS; with a CA file as well, it asks every peer, member
or client, for a certificate that CA signed (mutual TLS), and checks the members it dials against
it. Without a CA file, the members it dials are checked against the system's trust store.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from shardgrid.core.errors import ConfigError


def _load_chain(context: ssl.SSLContext, cert_file: Path, key_file: Path) -> None:
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as error:
        raise ConfigError(f"tls_cert_file {cert_file} / tls_key_file {key_file}: cannot be loaded ({error})") from None


def _load_ca(context: ssl.SSLContext, ca_file: Path) -> None:
    try:
        context.load_verify_locations(cafile=ca_file)
    except (OSError, ssl.SSLError) as error:
        raise ConfigError(f"tls_ca_file {ca_file}: cannot be loaded ({error})") from None


def server_context(cert_file: Path | None, key_file: Path | None, ca_file: Path | None) -> ssl.SSLContext | None:
    """What the member's listener wraps its connections in; None without a certificate."""
    if cert_file is None or key_file is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(context, cert_file, key_file)
    if ca_file is not None:
        _load_ca(context, ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def client_context(ca_file: Path | None, cert_file: Path | None = None, key_file: Path | None = None) -> ssl.SSLContext:
    """What a member dialing a member, or a client, speaks TLS with: the server's certificate is
    checked (against ``ca_file`` or the system's store, host name included); ``cert_file`` and
    ``key_file`` are presented when the server asks for a certificate."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca_file is not None:
        _load_ca(context, ca_file)
    if cert_file is not None and key_file is not None:
        _load_chain(context, cert_file, key_file)
    return context
