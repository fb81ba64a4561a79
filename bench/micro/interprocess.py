"""Prototype: the cost of moving batches of messages between two OS processes (issue 15,
item 5; the one number that decides docs/multicore.md).

Run: python bench/micro/interprocess.py [--json] [--messages N]

A front process (what would keep the readers and writers) sends messages to a worker process
(what would own queue processes) over a Unix socket pair, in batches, and the worker turns
every batch back into per-message records — the work a worker must do before a queue can take
them. Each message is what the broker would have to ship: a 16-byte msg_id, exchange and
routing key (short strings), the raw properties bytes and the body. Two encodings:

- `framed`: one length-prefixed frame per batch, each message a fixed struct (lengths) and
  its bytes, joined once; the worker slices them out (no per-message syscalls, no pickle);
- `pickle`: the same list of tuples through pickle (protocol 5), for comparison.

Modes: `one-way` (the front streams batches, the worker decodes them) and `round-trip` (after
each batch the worker answers with the batch's confirms, one u64 sequence number per message,
and the front waits for them before the next batch: the latency-bound case).

Reported per (encoding, mode, body size, batch size): wall µs per message, CPU µs per message
of the front and of the worker (resource.getrusage; on 2 cores the sum is what matters) and
msg/s. Correctness: the worker checks every message's sequence number arrives in order and
its body intact (a checksum over the bodies, compared at the end).
"""

from __future__ import annotations

import json
import os
import pickle
import resource
import socket
import struct
import sys
import time
import zlib

_LEN = struct.Struct("!I")
_MSG = struct.Struct("!16sQBBHI")  # msg_id, seq, len(exchange), len(routing key), len(props), len(body)
EXCHANGE = b"amq.direct"
ROUTING_KEY = b"bench.queue"
PROPS = b"\x90\x00\x18application/octet-stream\x02"  # content_type + delivery_mode


def messages(n: int, size: int) -> list[tuple[bytes, int, bytes, bytes, bytes, bytes]]:
    """n messages (msg_id, seq, exchange, routing key, raw props, body of `size` bytes)."""
    out = []
    for seq in range(n):
        body = (seq.to_bytes(8, "big") * (size // 8 + 1))[:size]
        out.append((seq.to_bytes(16, "big"), seq, EXCHANGE, ROUTING_KEY, PROPS, body))
    return out


def encode_framed(batch: list) -> bytes:
    """One batch as one frame: per message the fixed struct then its bytes."""
    parts = []
    pack = _MSG.pack
    for msg_id, seq, exch, rk, props, body in batch:
        parts.append(pack(msg_id, seq, len(exch), len(rk), len(props), len(body)))
        parts += (exch, rk, props, body)
    payload = b"".join(parts)
    return _LEN.pack(len(payload)) + payload


def decode_framed(payload: bytes) -> list:
    """The worker's side: the per-message records back out of one frame."""
    out = []
    pos = 0
    end = len(payload)
    unpack = _MSG.unpack_from
    size = _MSG.size
    while pos < end:
        msg_id, seq, le, lr, lp, lb = unpack(payload, pos)
        pos += size
        exch = payload[pos:pos + le]
        pos += le
        rk = payload[pos:pos + lr]
        pos += lr
        props = payload[pos:pos + lp]
        pos += lp
        body = payload[pos:pos + lb]
        pos += lb
        out.append((msg_id, seq, exch, rk, props, body))
    return out


def encode_pickle(batch: list) -> bytes:
    payload = pickle.dumps(batch, protocol=5)
    return _LEN.pack(len(payload)) + payload


def decode_pickle(payload: bytes) -> list:
    return pickle.loads(payload)


CODECS = {"framed": (encode_framed, decode_framed), "pickle": (encode_pickle, decode_pickle)}


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _recv_frame(sock: socket.socket) -> bytes:
    (n,) = _LEN.unpack(_recv_exact(sock, 4))
    return _recv_exact(sock, n) if n else b""


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def worker(sock: socket.socket, codec: str, round_trip: bool) -> None:
    """Decode batches until an empty frame; answer confirms after each batch when
    `round_trip`; finally report (count, checksum, in_order, cpu seconds)."""
    decode = CODECS[codec][1]
    cpu0 = _cpu()
    count = 0
    crc = 0
    expect = 0
    in_order = True
    while True:
        payload = _recv_frame(sock)
        if not payload:
            break
        batch = decode(payload)
        for record in batch:
            if record[1] != expect:
                in_order = False
            expect = record[1] + 1
            crc = zlib.crc32(record[5], crc)
        count += len(batch)
        if round_trip:
            acks = struct.pack(f"!{len(batch)}Q", *(r[1] for r in batch))
            sock.sendall(_LEN.pack(len(acks)) + acks)
    report = json.dumps([count, crc, in_order, _cpu() - cpu0]).encode()
    sock.sendall(_LEN.pack(len(report)) + report)


def run(codec: str, round_trip: bool, size: int, batch_size: int, n: int) -> dict:
    """One measurement: n messages of `size` bytes in batches of `batch_size`."""
    msgs = messages(n, size)
    batches = [msgs[i:i + batch_size] for i in range(0, n, batch_size)]
    want_crc = 0
    for m in msgs:
        want_crc = zlib.crc32(m[5], want_crc)
    front, back = socket.socketpair()
    for s in (front, back):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    pid = os.fork()
    if pid == 0:  # the worker
        front.close()
        try:
            worker(back, codec, round_trip)
        finally:
            os._exit(0)
    back.close()
    encode = CODECS[codec][0]
    cpu0 = _cpu()
    t0 = time.perf_counter()
    for batch in batches:
        front.sendall(encode(batch))
        if round_trip:
            acks = _recv_frame(front)
            assert len(acks) == 8 * len(batch)
    front.sendall(_LEN.pack(0))
    count, crc, in_order, worker_cpu = json.loads(_recv_frame(front))
    wall = time.perf_counter() - t0
    front_cpu = _cpu() - cpu0
    os.waitpid(pid, 0)
    front.close()
    assert count == n and crc == want_crc and in_order, (count, n, crc, want_crc, in_order)
    return {"codec": codec, "mode": "round-trip" if round_trip else "one-way",
            "body_bytes": size, "batch": batch_size, "messages": n,
            "wall_us_per_msg": round(wall / n * 1e6, 3),
            "front_cpu_us_per_msg": round(front_cpu / n * 1e6, 3),
            "worker_cpu_us_per_msg": round(worker_cpu / n * 1e6, 3),
            "msg_per_s": round(n / wall)}


def main() -> None:
    n = 100_000
    if "--messages" in sys.argv:
        n = int(sys.argv[sys.argv.index("--messages") + 1])
    results = []
    for codec in ("framed", "pickle"):
        for round_trip in (False, True):
            for size in (16, 1500):
                for batch in (1, 16, 256):
                    count = n if batch > 1 else max(n // 10, 1000)  # batch 1 is slow
                    results.append(run(codec, round_trip, size, batch, count))
    if "--json" in sys.argv:
        print(json.dumps({"loadavg": os.getloadavg(), "results": results}))
        return
    print(f"load average {os.getloadavg()}")
    print(f"{'codec':7} {'mode':10} {'body':>5} {'batch':>5} {'wall µs':>8} {'front µs':>8} "
          f"{'worker µs':>9} {'msg/s':>9}")
    for r in results:
        print(f"{r['codec']:7} {r['mode']:10} {r['body_bytes']:5} {r['batch']:5} "
              f"{r['wall_us_per_msg']:8.3f} {r['front_cpu_us_per_msg']:8.3f} "
              f"{r['worker_cpu_us_per_msg']:9.3f} {r['msg_per_s']:9}")


if __name__ == "__main__":
    main()
