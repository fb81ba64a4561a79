"""Directory-name encoding shared by the message store (vhost directories) and the queue index
(queue directories), in its own module so neither imports the other for it (STYLE §9).
Pure; no I/O.
"""

from __future__ import annotations


def base36(digest: bytes) -> str:
    """Big-endian unsigned `digest` in base 36, digits 0-9A-Z (Erlang's `~.36B`)."""
    n = int.from_bytes(digest, "big")
    digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    out = []
    while True:
        n, r = divmod(n, 36)
        out.append(digits[r])
        if n == 0:
            return "".join(reversed(out))
