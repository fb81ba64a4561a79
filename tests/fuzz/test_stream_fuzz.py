"""Fuzzing the stream protocol listener (issue 37 item 2) as tests/fuzz/test_fuzz.py fuzzes
the AMQP port: each example is a valid stream protocol session (handshake, create, publish,
subscribe, offsets, close) with structure-aware mutations: flipped bytes, cut or repeated
frames, wrong sizes, keys and versions. A case fails if the broker logs an ERROR (an
unexpected exception: a bug, never the client's fault), does not close the socket within 5 s
of the client's end of file (a hang), or a bystander connection on the AMQP port stops
answering (a stall)."""

from __future__ import annotations

import logging
import random
import socket
import struct

import pika
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.embedded import EmbeddedBroker
from tests.fuzz.harness import _Errors


def _s(text: str) -> bytes:
    b = text.encode()
    return struct.pack(">H", len(b)) + b


def _f(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


SESSION = [
    _f(struct.pack(">HHII", 17, 1, 1, 1) + _s("product") + _s("fuzz")),
    _f(struct.pack(">HHI", 18, 1, 2)),
    _f(struct.pack(">HHI", 19, 1, 3) + _s("PLAIN") + struct.pack(">i", 12) + b"\0guest\0guest"),
    _f(struct.pack(">HHII", 0x8014, 1, 65536, 0)),
    _f(struct.pack(">HHI", 21, 1, 4) + _s("/")),
    _f(struct.pack(">HHII", 27, 1, 5, 1) + struct.pack(">HHH", 8, 1, 2)),
    _f(struct.pack(">HHI", 13, 1, 6) + _s("fz") + struct.pack(">I", 1) + _s("max-age")
       + _s("1h")),
    _f(struct.pack(">HHIB", 1, 1, 7, 1) + _s("fuzzer") + _s("fz")),
    _f(struct.pack(">HHBI", 2, 1, 1, 2) + struct.pack(">Qi", 1, 3) + b"abc"
       + struct.pack(">Qi", 2, 0)),
    _f(struct.pack(">HHBI", 2, 2, 1, 1) + struct.pack(">Q", 3) + _s("eu")
       + struct.pack(">i", 1) + b"z"),
    _f(struct.pack(">HHIB", 7, 1, 8, 1) + _s("fz") + struct.pack(">hH", 1, 2)),
    _f(struct.pack(">HHBH", 9, 1, 1, 5)),
    _f(struct.pack(">HH", 10, 1) + _s("r") + _s("fz") + struct.pack(">Q", 1)),
    _f(struct.pack(">HHI", 11, 1, 9) + _s("r") + _s("fz")),
    _f(struct.pack(">HHII", 15, 1, 10, 2) + _s("fz") + _s("nope")),
    _f(struct.pack(">HHI", 28, 1, 11) + _s("fz")),
    _f(struct.pack(">HHI", 5, 1, 12) + _s("fuzzer") + _s("fz")),
    _f(struct.pack(">HHIB", 12, 1, 13, 1)),
    _f(struct.pack(">HHI", 14, 1, 14) + _s("fz")),
    _f(struct.pack(">HHIH", 22, 1, 15, 1) + _s("bye")),
]


def mutate(frames: list[bytes], rnd: random.Random) -> bytes:
    """One to three mutations of the session, structure-aware where it helps."""
    out = list(frames)
    for _ in range(rnd.randint(1, 3)):
        i = rnd.randrange(len(out))
        f = bytearray(out[i])
        if not f:
            continue  # dropped already
        kind = rnd.randrange(7)
        if kind == 0 and len(f) > 4:  # flip a byte of the body
            f[rnd.randrange(4, len(f))] ^= 1 << rnd.randrange(8)
        elif kind == 1:  # a wrong size
            f[0:4] = struct.pack(">I", max(0, len(f) - 4 + rnd.choice([-3, -1, 1, 7, 1 << 20])))
        elif kind == 2 and len(f) > 8:  # another key or version
            f[4 + rnd.randrange(4)] = rnd.randrange(256)
        elif kind == 3:  # cut the frame short
            f = f[:rnd.randrange(len(f))]
        elif kind == 4:  # repeat it
            out.insert(i, bytes(f))
        elif kind == 5:  # drop it
            f = bytearray()
        else:  # random bytes inside the body
            pos = rnd.randrange(4, max(5, len(f)))
            f[pos:pos] = rnd.randbytes(rnd.randrange(1, 9))
        out[i] = bytes(f)
    return b"".join(out)


@pytest.fixture(scope="module")
def target(embedded_only_module):
    errors = _Errors()
    logging.getLogger("broker").addHandler(errors)
    b = EmbeddedBroker(stream_listeners_tcp_default="0").start()
    bystander = pika.BlockingConnection(pika.URLParameters(b.url))
    yield b, errors, bystander.channel()
    bystander.close()
    b.stop()
    logging.getLogger("broker").removeHandler(errors)


def _run(port: int, data: bytes) -> bool:
    """Send `data`, end the stream, read until the broker closes: True if it did within
    5 s."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            return True  # closed on us while sending: closed
        while True:
            try:
                if not sock.recv(65536):
                    return True
            except ConnectionResetError:
                return True
            except TimeoutError:
                return False
    finally:
        sock.close()


def test_the_unmutated_session_runs_clean(target):
    b, errors, _ch = target
    assert _run(b.stream_port, b"".join(SESSION))
    assert errors.records == []


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rnd=st.randoms(use_true_random=False))
def test_mutated_sessions_never_crash_hang_or_stall_the_broker(target, rnd: random.Random):
    b, errors, ch = target
    closed = _run(b.stream_port, mutate(SESSION, rnd))
    assert closed, "the broker did not close the connection within 5 s (hang)"
    assert errors.records == [], [r.getMessage() for r in errors.records]
    ch.queue_declare("", exclusive=True)  # the bystander still gets answers


def test_the_oracle_sees_an_injected_crash(target, monkeypatch):
    """With the metadata handler made to raise, the unmutated session is a crash: the
    broker logs the traceback and closes only that connection (541's analogue here is
    INTERNAL_ERROR in a close)."""
    from broker.stream_protocol import core, reader

    def boom(conn, frame):
        raise RuntimeError("injected failure")

    b, errors, ch = target
    monkeypatch.setitem(reader._HANDLERS, (core.METADATA, False), boom)
    assert _run(b.stream_port, b"".join(SESSION))
    assert any("internal error" in r.getMessage() for r in errors.records)
    errors.records.clear()
    ch.queue_declare("", exclusive=True)
