# Owns: turning the ssl_options.* configuration into an ssl.SSLContext for the amqps
# listener, parsing listener addresses, and the EXTERNAL mechanism's user name taken from a
# verified client certificate.
# Talks to: server.py (builds the context and the listener), the reader (peer certificate →
# user name at protocol-header time).
# Must never: accept TLS below 1.2, or name a user from a certificate that was not verified.
"""TLS for AMQP (rabbitmq.com/ssl.html) and SASL EXTERNAL (rabbitmq_auth_mechanism_ssl).

Configuration keys are RabbitMQ's, with dots as underscores in `BrokerConfig`:

- `listeners.ssl.default` — "5671" or "HOST:PORT" turns the amqps listener on;
  `listeners.tcp = none` turns the plain one off.
- `ssl_options.certfile` / `ssl_options.keyfile` — the server's PEM chain and key;
  `ssl_options.cacertfile` — CAs trusted for client certificates.
- `ssl_options.verify` — `verify_none` (default: no client certificate asked for) or
  `verify_peer` (asked for and verified against cacertfile); with
  `ssl_options.fail_if_no_peer_cert = true` a client without one fails the TLS handshake.
- TLS 1.2 is the minimum version (RabbitMQ's recommendation; 1.0/1.1 are refused).
- `ssl_cert_login_from` — how EXTERNAL names the user: `distinguished_name` (RabbitMQ's
  default; RFC 4514 order, e.g. "CN=alice,O=Example"), `common_name`, or
  `subject_alternative_name` (with `ssl_cert_login_san_type` dns/ip/email/uri and
  `ssl_cert_login_san_index`, from 0). As in rabbit_ssl, a name is only taken when
  `ssl_options.verify = verify_peer`.
- `certificates_not_after(path)` — when the certificates of a PEM file expire (the
  certificate-expiration health check).
"""

from __future__ import annotations

import base64
import datetime
import re
import ssl
from typing import Any

# RabbitMQ's short names for subject attributes (rabbit_cert_info:format_rdn); Python's ssl
# module reports the long names
_SHORT_NAMES = {
    "surname": "SN", "givenName": "GIVENNAME", "initials": "INITIALS",
    "generationQualifier": "GENERATIONQUALIFIER", "commonName": "CN", "localityName": "L",
    "stateOrProvinceName": "ST", "organizationName": "O", "organizationalUnitName": "OU",
    "title": "TITLE", "countryName": "C", "serialNumber": "SERIALNUMBER",
    "pseudonym": "PSEUDONYM", "domainComponent": "DC", "emailAddress": "EMAILADDRESS",
    "streetAddress": "STREET", "userId": "UID",
}
_SAN_TYPES = {"dns": "DNS", "ip": "IP Address", "email": "email", "uri": "URI"}


class TLSConfigError(ValueError):
    """The ssl_options cannot make a working server context (missing or unreadable files)."""


def server_context(config: Any) -> ssl.SSLContext:
    """An SSLContext for the amqps listener from `config`'s ssl_options_* fields.

    Raises TLSConfigError when certfile/keyfile are missing or cannot be loaded, or when
    verify_peer is asked for without a cacertfile."""
    if not config.ssl_options_certfile or not config.ssl_options_keyfile:
        raise TLSConfigError("listeners.ssl.default needs ssl_options.certfile and "
                             "ssl_options.keyfile")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(config.ssl_options_certfile, config.ssl_options_keyfile)
        if config.ssl_options_cacertfile:
            ctx.load_verify_locations(config.ssl_options_cacertfile)
    except (OSError, ssl.SSLError) as err:
        raise TLSConfigError(f"cannot load TLS files: {err}") from err
    if config.ssl_options_verify == "verify_peer":
        if not config.ssl_options_cacertfile:
            raise TLSConfigError("ssl_options.verify = verify_peer needs ssl_options.cacertfile")
        ctx.verify_mode = (ssl.CERT_REQUIRED if config.ssl_options_fail_if_no_peer_cert
                           else ssl.CERT_OPTIONAL)
    else:
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def parse_listener(value: str, default_host: str) -> tuple[str, int]:
    """"5671" → (default_host, 5671); "0.0.0.0:5671" / "[::1]:5671" → (host, port).
    Raises ValueError for anything else."""
    text = value.strip()
    host, sep, port = text.rpartition(":")
    if not sep:
        return default_host, int(text)
    host = host.strip("[]") or default_host
    return host, int(port)


def _escape(value: str) -> str:
    """RFC 4514 escaping as rabbit_cert_info:escape_rdn_value."""
    out = []
    for i, ch in enumerate(value):
        if (i == 0 and ch in " #") or ch in '"+,;<>\\' or (ch == " " and i == len(value) - 1):
            out.append("\\" + ch)
        elif ord(ch) < 32 or ord(ch) >= 126:
            out.extend(f"\\{b:02X}" for b in ch.encode("utf-8"))
        else:
            out.append(ch)
    return "".join(out)


def distinguished_name(subject: tuple) -> str:
    """The subject of `ssl.getpeercert()` as RabbitMQ formats it: RDNs in reverse order
    joined by ",", multi-valued RDNs by "+"."""
    rdns = []
    for rdn in subject:
        rdns.append("+".join(f"{_SHORT_NAMES.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(reversed(rdns))


def external_login_name(peercert: dict | None, config: Any) -> str | None:
    """The EXTERNAL user name from a verified peer certificate (`ssl.getpeercert()`), or
    None when there is none, verification is off, or the requested field is absent."""
    if not peercert or config.ssl_options_verify != "verify_peer":
        return None
    how = config.ssl_cert_login_from
    subject = peercert.get("subject", ())
    if how == "common_name":
        names = [v for rdn in subject for k, v in rdn if k == "commonName"]
        return ",".join(names) or None
    if how in ("subject_alternative_name", "subject_alt_name"):
        wanted = _SAN_TYPES.get(config.ssl_cert_login_san_type, config.ssl_cert_login_san_type)
        values = [v for k, v in peercert.get("subjectAltName", ()) if k == wanted]
        index = config.ssl_cert_login_san_index
        return values[index] if 0 <= index < len(values) else None
    return distinguished_name(subject) or None


# -- certificate expiry (rabbit_mgmt_wm_health_check_certificate_expiration) -------------------
_PEM_CERT = re.compile(r"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", re.S)


def _tlv(der: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, content start, content end) of the DER element at `pos`."""
    tag, length = der[pos], der[pos + 1]
    pos += 2
    if length & 0x80:
        n = length & 0x7F
        length = int.from_bytes(der[pos:pos + n], "big")
        pos += n
    return tag, pos, pos + length


def _asn1_time(tag: int, text: str) -> datetime.datetime:
    """UTCTime (tag 0x17, YYMMDDHHMMSSZ; 50-99 are 19xx) or GeneralizedTime (0x18)."""
    if tag == 0x17:
        year = int(text[:2])
        text = str(1900 + year if year >= 50 else 2000 + year) + text[2:]
    return datetime.datetime.strptime(text[:14], "%Y%m%d%H%M%S").replace(tzinfo=datetime.UTC)


def certificates_not_after(path: str) -> list[datetime.datetime]:
    """The notAfter time of every certificate in the PEM file at `path` (a tiny DER walk:
    Certificate → tbsCertificate → [version], serial, signature, issuer, validity). Raises
    OSError for an unreadable file, ValueError for one without a parsable certificate."""
    with open(path, encoding="ascii", errors="replace") as f:
        blocks = _PEM_CERT.findall(f.read())
    if not blocks:
        raise ValueError("The certificate file provided does not contain any PEM entry.")
    out = []
    for block in blocks:
        try:
            der = base64.b64decode("".join(block.split()))
            _tag, tbs, _end = _tlv(der, _tlv(der, 0)[1])
            tag, _start, end = _tlv(der, tbs)
            pos = end if tag == 0xA0 else tbs  # the explicit [0] version, when present
            for _ in range(3):  # serial, signature algorithm, issuer
                pos = _tlv(der, pos)[2]
            _tag, pos, _end = _tlv(der, pos)  # into validity
            pos = _tlv(der, pos)[2]  # past notBefore
            tag, start, end = _tlv(der, pos)
            out.append(_asn1_time(tag, der[start:end].decode("ascii")))
        except (IndexError, ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"unparsable certificate: {exc}") from None
    return out
