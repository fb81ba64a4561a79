"""A stream protocol client on a plain socket, frame by frame (RabbitMQ's PROTOCOL.adoc):
for the tests that need exact frames, or a connection that stays open while something
else (the HTTP API, a browser) looks at it."""

from __future__ import annotations

import socket
import struct


def s(text: str) -> bytes:
    b = text.encode()
    return struct.pack(">H", len(b)) + b


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def read_frame(sock: socket.socket) -> bytes:
    head = recv_exact(sock, 4)
    return recv_exact(sock, struct.unpack(">I", head)[0])


def recv_exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def closed(sock: socket.socket, seconds: float = 5.0) -> bool:
    """Whether the server closes the socket within `seconds` (what it sent before, such as
    deliveries still in flight, is read and dropped)."""
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def tuned(b, props: dict[str, str] | None = None) -> socket.socket:
    """A raw connection through peer properties, PLAIN and tune (frame_max 4096, no
    heartbeat), not yet open."""
    sock = socket.create_connection(("127.0.0.1", b.stream_port), timeout=5)
    props = props or {}
    sock.sendall(frame(struct.pack(">HHII", 17, 1, 1, len(props))
                       + b"".join(s(k) + s(v) for k, v in props.items())))
    assert struct.unpack_from(">HHIH", read_frame(sock)) == (0x8011, 1, 1, 1)
    sock.sendall(frame(struct.pack(">HHI", 18, 1, 2)))
    reply = read_frame(sock)
    assert struct.unpack_from(">HHIH", reply) == (0x8012, 1, 2, 1)
    assert b"PLAIN" in reply
    sock.sendall(frame(struct.pack(">HHI", 19, 1, 3) + s("PLAIN")
                       + struct.pack(">i", 12) + b"\0guest\0guest"))
    assert struct.unpack_from(">HHIH", read_frame(sock)) == (0x8013, 1, 3, 1)
    tune = read_frame(sock)
    key, _v, frame_max, heartbeat = struct.unpack(">HHII", tune)
    assert (key, frame_max, heartbeat) == (20, 1_048_576, 60)
    sock.sendall(frame(struct.pack(">HHII", 0x8014, 1, 4096, 0)))
    return sock


def opened(b, props: dict[str, str] | None = None) -> socket.socket:
    """A raw connection through the whole handshake: peer properties, PLAIN, tune, open."""
    sock = tuned(b, props)
    sock.sendall(frame(struct.pack(">HHI", 21, 1, 4) + s("/")))
    reply = read_frame(sock)
    assert struct.unpack_from(">HHIH", reply) == (0x8015, 1, 4, 1)
    assert b"advertised_port" in reply
    return sock


def publish_frame(publisher_id: int, items: list[tuple[int, bytes]]) -> bytes:
    body = struct.pack(">HHBI", 2, 1, publisher_id, len(items)) + b"".join(
        struct.pack(">Qi", pid, len(m)) + m for pid, m in items)
    return frame(body)



def request(sock: socket.socket, key: int, corr: int, body: bytes) -> int:
    """Send command `key` (version 1) with `body` after its correlation id; the response
    code of the answer with that id (other frames in between are skipped)."""
    sock.sendall(frame(struct.pack(">HHI", key, 1, corr) + body))
    while True:
        f = read_frame(sock)
        k, _v, c, code = struct.unpack_from(">HHIH", f)
        if k == (key | 0x8000) and c == corr:
            return code


def create_stream(sock: socket.socket, name: str, corr: int = 100) -> int:
    return request(sock, 13, corr, s(name) + struct.pack(">I", 0))


def declare_publisher(sock: socket.socket, publisher_id: int, reference: str, stream: str,
                      corr: int = 101) -> int:
    return request(sock, 1, corr, struct.pack(">B", publisher_id) + s(reference) + s(stream))


def subscribe_first(sock: socket.socket, subscription_id: int, stream: str, credit: int = 10,
                    corr: int = 102) -> int:
    """Subscribe from `first` (offset type 1) with `credit` chunks and no properties."""
    return request(sock, 7, corr, struct.pack(">B", subscription_id) + s(stream)
                   + struct.pack(">HHI", 1, credit, 0))


def confirmed_ids(sock: socket.socket, n: int) -> list[int]:
    """Publishing ids of publish_confirm frames read until `n` are confirmed."""
    got: list[int] = []
    while len(got) < n:
        f = read_frame(sock)
        key, _v, _pub, count = struct.unpack_from(">HHBI", f)
        if key == 3:
            got += struct.unpack_from(f">{count}Q", f, 9)
    return got
