# bench/ha/syncobj_member.py — one PySyncObj member as its own process.
#
# Owns: a replicated dict of entries (key -> value), PySyncObj's file journal in the member's
# own directory, and a tiny request server the bench's client talks to.
# Talks to: its two partners over PySyncObj's TCP transport; bench.ha.engines over a
# length-prefixed pickle protocol on --listen (loopback only, bench use only).
# Must never: be used outside the bench (pickle over a socket trusts the peer).
"""``python -m bench.ha.syncobj_member --self HOST:PORT --partner ... --listen PORT --dir DIR``.

Requests (pickled tuples, each framed by a 4-byte big-endian length):
``("append", [(key, value), ...])`` -> ``("ok", None)`` once the batch is committed and applied
here (PySyncObj forwards it to the leader when this member follows); ``("settle", [key, ...])``
removes keys in one commit; ``("status", None)`` ->
``("ok", {"leader": "host:port" | None, "self": "host:port"})``; ``("read", None)`` ->
``("ok", {key: value})`` after one committed no-op, so it reflects every earlier commit.
"""

from __future__ import annotations

import argparse
import os
import pickle
import socketserver
import struct
import sys

from pysyncobj import SyncObj, SyncObjConf, replicated


class Log(SyncObj):
    def __init__(self, self_addr: str, partners: list[str], conf: SyncObjConf) -> None:
        super().__init__(self_addr, partners, conf)
        self.entries: dict[bytes, bytes] = {}  # applied state: every committed entry

    @replicated
    def append(self, batch: list[tuple[bytes, bytes]]) -> int:
        for k, v in batch:
            self.entries[k] = v
        return len(batch)

    @replicated
    def settle(self, keys: list[bytes]) -> int:
        for k in keys:
            self.entries.pop(k, None)
        return len(keys)

    @replicated
    def noop(self) -> int:
        return 0


def _recv(sock) -> object | None:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (n,) = struct.unpack(">I", head)
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(1 << 20, n - len(buf)))
        if not chunk:
            return None
        buf += chunk
    return pickle.loads(buf)


def _send(sock, obj: object) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(struct.pack(">I", len(data)) + data)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ha.syncobj_member")
    p.add_argument("--self", dest="self_addr", required=True)
    p.add_argument("--partner", action="append", default=[])
    p.add_argument("--listen", type=int, required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--period", type=float, default=0.01,
                   help="appendEntriesPeriod and autoTickPeriod, seconds (PySyncObj: 0.1, 0.05)")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds a commit may wait")
    ns = p.parse_args(argv)
    os.makedirs(ns.dir, exist_ok=True)
    conf = SyncObjConf(
        journalFile=os.path.join(ns.dir, "journal.bin"),
        fullDumpFile=os.path.join(ns.dir, "dump.bin"),
        dynamicMembershipChange=False,
        # a Raft log that is never compacted during a bench run: compaction pickles the whole
        # state and would show up as a latency spike unrelated to commits
        logCompactionMinEntries=10**9,
        logCompactionMinTime=10**9,
        # the defaults (append entries every 100 ms, tick every 50 ms) put a commit at ~200 ms
        # (measured: 4.9 commits/s one at a time); 10 ms is the fairest setting we found
        appendEntriesPeriod=ns.period,
        autoTickPeriod=ns.period,
    )
    log = Log(ns.self_addr, ns.partner, conf)

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            while True:
                req = _recv(self.request)
                if req is None:
                    return
                op, arg = req
                try:
                    if op == "append":
                        res = log.append(arg, sync=True, timeout=ns.timeout)
                    elif op == "settle":
                        res = log.settle(arg, sync=True, timeout=ns.timeout)
                    elif op == "status":
                        leader = log._getLeader()
                        res = {"leader": None if leader is None else str(leader.address
                                                                        if hasattr(leader, "address") else leader),
                               "self": ns.self_addr}
                    elif op == "read":
                        log.noop(sync=True, timeout=ns.timeout)
                        res = dict(log.entries)
                    else:
                        raise ValueError(op)
                except Exception as exc:  # noqa: BLE001 - reported to the bench client as-is
                    _send(self.request, ("error", repr(exc)))
                else:
                    _send(self.request, ("ok", res))

    class Server(socketserver.ThreadingTCPServer):
        allow_reuse_address = True
        daemon_threads = True

    with Server(("127.0.0.1", ns.listen), Handler) as srv:
        print(f"ready {ns.self_addr}", flush=True)
        srv.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
