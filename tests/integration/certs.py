"""A throwaway certificate authority for TLS tests, made at test time with `cryptography`
(never checked-in keys): a CA, a server certificate for 127.0.0.1/localhost and client
certificates with a chosen common name (and optional SANs). Files are PEM in `directory`."""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class Pair:
    """A certificate and its key, as PEM file paths."""

    cert: str
    key: str


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())  # fast to make, unlike RSA


def _write(directory: str, name: str, cert: x509.Certificate, key: object) -> Pair:
    cert_path = os.path.join(directory, f"{name}.pem")
    key_path = os.path.join(directory, f"{name}.key")
    with open(cert_path, "wb") as fh:
        fh.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as fh:
        fh.write(key.private_bytes(  # type: ignore[attr-defined]
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
    return Pair(cert_path, key_path)


class TestCA:
    """`TestCA(dir)`: `ca` (its certificate file is the cacertfile), `issue(cn, ...)`."""

    __test__ = False  # not a pytest class

    def __init__(self, directory: str, name: str = "pybroker test CA") -> None:
        self.directory = directory
        self._key = _key()
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()),
                           critical=False)
            .sign(self._key, hashes.SHA256()))
        self.ca = _write(directory, "ca", self._cert, self._key)

    def issue(self, common_name: str, *, server: bool = False, organization: str | None = None,
              dns: tuple[str, ...] = (), emails: tuple[str, ...] = (),
              client_too: bool = False) -> Pair:
        """A certificate signed by this CA; `server=True` adds 127.0.0.1 and localhost;
        `client_too` with it makes one for both ends (a cluster member's)."""
        key = _key()
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        if organization:
            attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.RFC822Name(e) for e in emails]
        if server:
            sans += [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder().subject_name(x509.Name(attrs))
            .issuer_name(self._cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                self._key.public_key()), critical=False)
            .add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                if server and client_too else
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return _write(self.directory, common_name.replace(" ", "_"), cert, key)
