# Owns: RabbitMQ-compatible salted password hashes (rabbit_password, rabbit_password_hashing_*).
# Talks to: definitions.py (stores the hashes), users.py (checks logins).
# Must never: log or store a clear-text password, or do I/O.
"""Password hashing compatible with RabbitMQ's internal auth backend.

Format (rabbit_password:hash/2): 4 random salt bytes followed by H(salt + UTF-8 password),
where H is SHA-256 (`rabbit_password_hashing_sha256`, RabbitMQ's default since 3.6), SHA-512
(`rabbit_password_hashing_sha512`) or MD5 (`rabbit_password_hashing_md5`, also what a user with
no `hashing_algorithm` means: rabbit_password:hashing_mod(undefined)). A definitions file holds
the hash base64-encoded in `password_hash`, so users exported from RabbitMQ log in here
unchanged. One check costs one hash of a password bounded by the frame size: microseconds.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os

SHA256 = "rabbit_password_hashing_sha256"
SHA512 = "rabbit_password_hashing_sha512"
MD5 = "rabbit_password_hashing_md5"
DEFAULT_ALGORITHM = SHA256  # rabbit_password ?DEFAULT_HASHING_MODULE
SALT_BYTES = 4

_DIGESTS = {SHA256: hashlib.sha256, SHA512: hashlib.sha512, MD5: hashlib.md5}


def hashing_module(algorithm: str | None) -> str:
    """The algorithm name for a stored user; None/"" means MD5 (RabbitMQ's legacy users).
    Raises ValueError for an algorithm we do not implement."""
    name = algorithm or MD5
    if name not in _DIGESTS:
        raise ValueError(f"unsupported hashing algorithm '{name}'")
    return name


def hash_password(password: str, algorithm: str = DEFAULT_ALGORITHM,
                  salt: bytes | None = None) -> bytes:
    """salt(4) + H(salt + UTF-8 password) as RabbitMQ's rabbit_password:hash/2 (bytes)."""
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    digest = _DIGESTS[hashing_module(algorithm)]
    return salt + digest(salt + password.encode("utf-8", "surrogateescape")).digest()


def check_password(password: str, password_hash: bytes | None,
                   algorithm: str | None = DEFAULT_ALGORITHM) -> bool:
    """True if `password` matches `password_hash` (constant-time compare). A missing or
    malformed hash, or an unknown algorithm, never matches."""
    if not password_hash or len(password_hash) <= SALT_BYTES:
        return False
    try:
        expected = hash_password(password, hashing_module(algorithm), password_hash[:SALT_BYTES])
    except ValueError:
        return False
    return hmac.compare_digest(expected, password_hash)


def encode_hash(password_hash: bytes | None) -> str:
    """The `password_hash` field of a RabbitMQ definitions file (base64; "" for none)."""
    return base64.b64encode(password_hash).decode("ascii") if password_hash else ""


def decode_hash(text: str) -> bytes | None:
    """Inverse of `encode_hash`; "" → None. Raises ValueError for text that is not base64."""
    if not text:
        return None
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as err:
        raise ValueError("password_hash is not base64") from err
