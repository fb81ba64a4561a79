"""AMQP over TLS (rabbitmq.com/ssl.html) and SASL EXTERNAL (rabbitmq_auth_mechanism_ssl) with
pika and aio-pika, against brokers configured with RabbitMQ's keys (listeners.ssl.default,
ssl_options.*, auth_mechanisms, ssl_cert_login_from). Certificates are made at test time by
tests/integration/certs.py. Own brokers, so skipped under BROKER_TEST_URI."""

from __future__ import annotations

import asyncio
import socket
import ssl
import urllib.parse
import warnings

import aio_pika
import pika
import pika.exceptions
import pytest
from certs import TestCA
from helpers import start_embedded

from broker.config import load_config
from broker.management import shapes
from broker.tls import distinguished_name, external_login_name, server_context

pytestmark = pytest.mark.usefixtures("embedded_only")



@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return TestCA(str(tmp_path_factory.mktemp("ca")))


def tls_config(ca, **extra):
    server = ca.issue("broker-under-test", server=True)
    cfg = dict(listeners_ssl_default="0", ssl_options_certfile=server.cert,
               ssl_options_keyfile=server.key, ssl_options_cacertfile=ca.ca.cert,
               ssl_options_verify="verify_peer",
               auth_mechanisms=("PLAIN", "AMQPLAIN", "EXTERNAL"),
               ssl_cert_login_from="common_name")
    cfg.update(extra)
    return cfg


@pytest.fixture(scope="module")
def tlsb(embedded_only_module, ca):
    b = start_embedded(**tls_config(ca))
    users = b.broker.users
    b.call(lambda: users.add_user("cert-user"))  # no password: EXTERNAL only
    b.call(lambda: users.set_permissions("cert-user", "/", ".*", ".*", ".*"))
    yield b
    b.stop()


def client_context(ca, pair=None, **kw) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca.ca.cert)
    for k, v in kw.items():
        setattr(ctx, k, v)
    if pair is not None:
        ctx.load_cert_chain(pair.cert, pair.key)
    return ctx


def pika_tls(b, ctx, credentials=None) -> pika.BlockingConnection:
    params = pika.ConnectionParameters(
        "127.0.0.1", b.ssl_port, "/", credentials or pika.PlainCredentials("guest", "guest"),
        ssl_options=pika.SSLOptions(ctx, "localhost"))
    return pika.BlockingConnection(params)


def roundtrip(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"over tls")
    assert ch.basic_get(q, auto_ack=True)[2] == b"over tls"


def test_pika_plain_login_over_tls(tlsb, ca):
    conn = pika_tls(tlsb, client_context(ca))
    roundtrip(conn)
    assert tlsb.call(lambda: sorted(c.tls for c in tlsb.broker.connections)) == [True]
    conn.close()
    plain = pika.BlockingConnection(pika.URLParameters(tlsb.url))  # plain listener still on
    roundtrip(plain)
    plain.close()


def test_pika_external_login_with_client_certificate(tlsb, ca):
    conn = pika_tls(tlsb, client_context(ca, ca.issue("cert-user")),
                    pika.credentials.ExternalCredentials())
    roundtrip(conn)
    assert tlsb.call(lambda: [c.username for c in tlsb.broker.connections]) == ["cert-user"]
    # the management API's TLS fields of the connection (rabbit_reader's ssl info items)
    [fields] = tlsb.call(lambda: [shapes.tls_fields(c) for c in tlsb.broker.connections])
    assert fields["ssl_protocol"] in ("tlsv1.3", "tlsv1.2")
    assert fields["ssl_cipher"] and fields["ssl_hash"] and fields["ssl_key_exchange"]
    assert "CN=cert-user" in fields["peer_cert_subject"]
    assert fields["peer_cert_issuer"] and fields["peer_cert_validity"].endswith("Z")
    conn.close()


def test_external_refused_for_unknown_user_or_no_certificate(tlsb, ca):
    for ctx in (client_context(ca, ca.issue("stranger")), client_context(ca)):
        with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
            pika_tls(tlsb, ctx, pika.credentials.ExternalCredentials())
        assert "Login was refused using authentication mechanism EXTERNAL" in str(info.value)


def test_external_is_not_offered_on_plain_connections(tlsb):
    params = pika.URLParameters(tlsb.url)
    params.credentials = pika.credentials.ExternalCredentials()
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(params)


def test_aio_pika_over_tls_plain_and_external(tlsb, ca):
    client = ca.issue("cert-user")

    async def main() -> None:
        url = f"amqps://guest:guest@localhost:{tlsb.ssl_port}/"
        conn = await aio_pika.connect(url, ssl_context=client_context(ca))
        async with conn:
            ch = await conn.channel()
            q = await ch.declare_queue(exclusive=True)
            await ch.default_exchange.publish(aio_pika.Message(b"aio tls"), routing_key=q.name)
            msg = await q.get(timeout=5)
            assert msg.body == b"aio tls"
            await msg.ack()
        query = urllib.parse.urlencode({"auth": "external", "cafile": ca.ca.cert,
                                        "certfile": client.cert, "keyfile": client.key})
        conn = await aio_pika.connect(f"amqps://localhost:{tlsb.ssl_port}/?{query}")
        async with conn:
            ch = await conn.channel()
            await ch.declare_queue(exclusive=True)

    asyncio.run(asyncio.wait_for(main(), 20))


def test_tls_below_1_2_is_refused(tlsb, ca):
    assert server_context(tlsb.broker.config).minimum_version == ssl.TLSVersion.TLSv1_2
    with warnings.catch_warnings():  # the client side of TLS 1.1 is deprecated in Python
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx = client_context(ca, maximum_version=ssl.TLSVersion.TLSv1_1)
        ctx.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
        with socket.create_connection(("127.0.0.1", tlsb.ssl_port), timeout=5) as raw:
            with pytest.raises((ssl.SSLError, OSError)):
                ctx.wrap_socket(raw, server_hostname="localhost")
    ok = client_context(ca, maximum_version=ssl.TLSVersion.TLSv1_2)
    with socket.create_connection(("127.0.0.1", tlsb.ssl_port), timeout=5) as raw:
        with ok.wrap_socket(raw, server_hostname="localhost") as tls_sock:
            assert tls_sock.version() == "TLSv1.2"
            tls_sock.sendall(b"AMQP\x00\x00\x09\x01")
            assert tls_sock.recv(7)[:1] == b"\x01"  # connection.start's method frame


def test_fail_if_no_peer_cert_and_tls_only(ca):
    b = start_embedded(**tls_config(ca, ssl_options_fail_if_no_peer_cert=True,
                                    listeners_tcp="none"))
    try:
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            pika_tls(b, client_context(ca))  # no client certificate: handshake fails
        conn = pika_tls(b, client_context(ca, ca.issue("cert-any")))  # PLAIN + a cert
        roundtrip(conn)
        conn.close()
        assert b.port == 0  # no plain listener was bound
    finally:
        b.stop()


def test_distinguished_name_login_as_rabbitmq_formats_it(ca, tmp_path):
    pair = ca.issue("alice", organization="Example, Inc")
    b = start_embedded(**tls_config(ca, ssl_cert_login_from="distinguished_name"))
    try:
        dn = "O=Example\\, Inc,CN=alice"  # RDNs reversed, RFC 4514 escaping
        b.call(lambda: b.broker.users.add_user(dn))
        b.call(lambda: b.broker.users.set_permissions(dn, "/", ".*", ".*", ".*"))
        conn = pika_tls(b, client_context(ca, pair), pika.credentials.ExternalCredentials())
        assert b.call(lambda: [c.username for c in b.broker.connections]) == [dn]
        conn.close()
    finally:
        b.stop()


def test_login_name_rules_without_a_broker():
    class Cfg:
        ssl_options_verify = "verify_peer"
        ssl_cert_login_from = "subject_alternative_name"
        ssl_cert_login_san_type = "email"
        ssl_cert_login_san_index = 1

    cert = {"subject": ((("countryName", "GB"),), (("commonName", "bob"),)),
            "subjectAltName": (("DNS", "h"), ("email", "a@x"), ("email", "b@x"))}
    assert external_login_name(cert, Cfg) == "b@x"
    Cfg.ssl_cert_login_san_index = 5
    assert external_login_name(cert, Cfg) is None
    Cfg.ssl_cert_login_from = "common_name"
    assert external_login_name(cert, Cfg) == "bob"
    Cfg.ssl_options_verify = "verify_none"  # rabbit_ssl: unsafe without peer verification
    assert external_login_name(cert, Cfg) is None
    assert distinguished_name(cert["subject"]) == "CN=bob,C=GB"


def test_every_tls_key_is_settable_with_set_and_toml(tmp_path):
    toml = tmp_path / "broker.toml"
    toml.write_text('listeners.tcp = "none"\n'
                    '[ssl_options]\ncertfile = "/c.pem"\nverify = "verify_peer"\n')
    cfg = load_config(["--config", str(toml),
                       "--set", "listeners.ssl.default=5671",
                       "--set", "ssl_options.keyfile=/k.pem",
                       "--set", "ssl_options.cacertfile=/ca.pem",
                       "--set", "ssl_options.fail_if_no_peer_cert=true",
                       "--set", "auth_mechanisms=PLAIN,EXTERNAL",
                       "--set", "ssl_cert_login_from=common_name",
                       "--set", "connection_max=infinity"], environ={})
    assert (cfg.listeners_tcp, cfg.ssl_options_certfile, cfg.ssl_options_verify) == (
        "none", "/c.pem", "verify_peer")
    assert (cfg.listeners_ssl_default, cfg.ssl_options_keyfile, cfg.ssl_options_cacertfile,
            cfg.ssl_options_fail_if_no_peer_cert) == ("5671", "/k.pem", "/ca.pem", True)
    assert cfg.auth_mechanisms == ("PLAIN", "EXTERNAL")
    assert cfg.ssl_cert_login_from == "common_name" and cfg.connection_max == -1
    with pytest.raises(ValueError):
        load_config(["--set", "ssl_options.verify=maybe"], environ={})
