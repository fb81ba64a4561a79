# Owns: decoding SASL responses of connection.start-ok for the PLAIN, AMQPLAIN and EXTERNAL
# mechanisms.
# Talks to: handshake.py only (credentials go on to the reader's authenticate callback).
# Must never: check passwords, log secrets, or do I/O.
"""SASL PLAIN (RFC 4616) and AMQPLAIN response parsing (RabbitMQ rabbit_auth_mechanism_*)."""

from __future__ import annotations

import struct

from pamqp import decode

from broker.errors import AccessRefused, CommandInvalid, amqp_error

MECHANISMS = ("AMQPLAIN", "PLAIN")  # the order RabbitMQ 3.10 offers them in connection.start
KNOWN = ("AMQPLAIN", "EXTERNAL", "PLAIN")  # every mechanism we implement, in offer order


def offered(configured: tuple[str, ...], tls: bool) -> tuple[str, ...]:
    """The mechanisms connection.start lists: the configured ones (`auth_mechanisms`) we
    know, in RabbitMQ's order (its registry's, alphabetical); EXTERNAL only on a TLS
    connection (rabbit_auth_mechanism_ssl:should_offer)."""
    return tuple(m for m in KNOWN if m in configured and (m != "EXTERNAL" or tls))


def _as_bytes(value: str | bytes) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def _text(value: object) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8")
    if isinstance(value, str):
        return value
    raise TypeError("not a string")


def parse_response(mechanism: str, response: bytes | str) -> tuple[str, str]:
    """(username, password) from a start-ok `response`.

    PLAIN: "[authzid]\\0user\\0pass" (the authzid is ignored). AMQPLAIN: a field table
    *without* its 4-byte length prefix holding LOGIN and PASSWORD (py-amqp / old kombu).
    `response` may be str (pamqp decodes a UTF-8 longstr to str) or bytes. EXTERNAL: the
    response is ignored (the name comes from the client certificate): ("", "").
    Raises AccessRefused 403 for a malformed response, CommandInvalid 503 for an unknown
    mechanism ("unknown authentication mechanism 'X'", as rabbit_reader.erl).
    """
    raw = _as_bytes(response)
    if mechanism == "EXTERNAL":
        return "", ""
    if mechanism == "PLAIN":
        parts = raw.split(b"\x00")
        if len(parts) != 3:
            raise amqp_error(AccessRefused, f"response {raw!r} invalid")
        try:
            return parts[1].decode("utf-8"), parts[2].decode("utf-8")
        except UnicodeDecodeError as err:
            raise amqp_error(AccessRefused, "response is not UTF-8") from err
    if mechanism == "AMQPLAIN":
        try:
            _, table = decode.field_table(struct.pack(">I", len(raw)) + raw)
            return _text(table["LOGIN"]), _text(table["PASSWORD"])
        except (KeyError, ValueError, TypeError, struct.error) as err:
            raise amqp_error(AccessRefused, "AMQPLAIN response invalid") from err
    raise amqp_error(CommandInvalid, f"unknown authentication mechanism '{mechanism}'")
