"""TLS on the member port (`clustering.tls = true`): every member holds a certificate and
key signed by the cluster's CA; the leader's listener asks for the connecting member's
certificate and both sides verify the other's against the CA (TLS ≥ 1.2), before the cluster
secret is even sent. The files are `clustering.tls_certfile`, `_keyfile` and `_cacertfile`,
each defaulting to its `ssl_options.*` counterpart (the AMQPS listener's)."""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.config import BrokerConfig


class MemberTLSError(ValueError):
    """clustering.tls is on but a certificate, key or CA file is missing or unreadable."""


def _files(config: BrokerConfig) -> tuple[str, str, str]:
    cert = config.clustering_tls_certfile or config.ssl_options_certfile
    key = config.clustering_tls_keyfile or config.ssl_options_keyfile
    ca = config.clustering_tls_cacertfile or config.ssl_options_cacertfile
    if not (cert and key and ca):
        raise MemberTLSError("clustering.tls needs a certificate, a key and a CA file "
                             "(clustering.tls_certfile, _keyfile, _cacertfile, or ssl_options.*)")
    return cert, key, ca


def _context(config: BrokerConfig, side: ssl._SSLMethod) -> ssl.SSLContext:
    """A TLS ≥ 1.2 context of `side` with the member's certificate and the cluster's CA."""
    cert, key, ca = _files(config)
    ctx = ssl.SSLContext(side)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
        ctx.load_verify_locations(ca)
    except (OSError, ssl.SSLError) as exc:
        raise MemberTLSError(f"clustering.tls: {exc}") from exc
    return ctx


def server_context(config: BrokerConfig) -> ssl.SSLContext | None:
    """The leader's listener context (the member's certificate required), or None with
    clustering.tls off."""
    if not config.clustering_tls:
        return None
    ctx = _context(config, ssl.PROTOCOL_TLS_SERVER)
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def client_context(config: BrokerConfig) -> ssl.SSLContext | None:
    """A follower's (and its proxy's) context towards the leader, or None with TLS off:
    the leader's certificate must be the CA's and name the host of its advertised URI."""
    if not config.clustering_tls:
        return None
    return _context(config, ssl.PROTOCOL_TLS_CLIENT)
