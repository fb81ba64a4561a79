"""The stream protocol over TLS (issue 37 item 1): stream.listeners.ssl.default with the
broker's ssl_options.*, rstream connecting with a CA-verified context, PLAIN and SASL
EXTERNAL (the client certificate's common name, as rabbitmq_auth_mechanism_ssl), and
metadata answering the TLS port. Certificates are made at test time."""

from __future__ import annotations

import asyncio
import ssl

import pytest
import rstream

from broker.embedded import EmbeddedBroker
from tests.integration.certs import TestCA


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    ca = TestCA(str(tmp_path_factory.mktemp("ca")))
    server = ca.issue("localhost", server=True)
    b = EmbeddedBroker(stream_listeners_ssl_default="0", ssl_options_certfile=server.cert,
                       ssl_options_keyfile=server.key, ssl_options_cacertfile=ca.ca.cert,
                       ssl_options_verify="verify_peer",
                       auth_mechanisms=("PLAIN", "AMQPLAIN", "EXTERNAL"),
                       ssl_cert_login_from="common_name").start()
    b.call(lambda: b.broker.users.add_user("cert-user"))  # no password: EXTERNAL only
    b.call(lambda: b.broker.users.set_permissions("cert-user", "/", ".*", ".*", ".*"))
    yield b, ca
    b.stop()


def _ctx(ca, pair=None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca.ca.cert)
    if pair is not None:
        ctx.load_cert_chain(pair.cert, pair.key)
    return ctx


def test_rstream_over_tls_with_plain_and_external(tls):
    b, ca = tls
    assert b.stream_port is None and b.stream_ssl_port  # only the TLS listener asked for

    async def main() -> bool:
        async with rstream.Producer("localhost", b.stream_ssl_port, ssl_context=_ctx(ca),
                                    username="guest", password="guest") as p:
            await p.create_stream("tls-s")
            await p.send_wait("tls-s", rstream.AMQPMessage(body=b"over tls"))
        user = ca.issue("cert-user")
        async with rstream.Producer(
                "localhost", b.stream_ssl_port, ssl_context=_ctx(ca, user), username="",
                password="", sasl_configuration_mechanism=rstream.SlasMechanism.MechanismExternal
        ) as p:
            return await p.stream_exists("tls-s")  # logged in by its certificate alone

    assert asyncio.run(asyncio.wait_for(main(), 30)) is True
    attempts = b.call(lambda: b.broker.auth_attempts.as_list())
    stream = next(a for a in attempts if a["protocol"] == "stream")
    assert stream["auth_attempts_failed"] == 0 and stream["auth_attempts_succeeded"] >= 2
    q = b.call(lambda: b.broker.vhosts["/"].queues["tls-s"])
    assert b.call(lambda: q.log.next_offset) == 1
