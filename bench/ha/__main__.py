# bench/ha/__main__.py — `python -m bench.ha`: the HA prototype's one command.
#
# Owns: the run plan (engines × batch sizes × commits in flight, then the kill -9 run), the
# latency and rate arithmetic, the quorum-queue estimate, the RabbitMQ run beside it, and the
# JSON document.
# Talks to: bench.ha.engines (members and clients); `python -m bench` as a subprocess for
# RabbitMQ's quorum queue (the project's own PerfTest-style harness, unchanged).
# Must never: count a commit the engine did not confirm, or call a run good when an entry it
# confirmed cannot be read back.
"""Commits/s and commit latency of three local members of an existing Raft engine.

A *commit* is one replicated write of a batch of ``--size``-byte entries (etcd: one txn of
puts; PySyncObj: one replicated call). A quorum queue built on the engine needs one commit per
publish batch and one per settle batch, so its estimated msg/s is ``entries/s ÷ 2`` at the same
batch size; the publish+settle runs measure that directly (a publish commit of ``batch`` entries,
then a settle commit deleting them). The kill run SIGKILLs the leader a third of the way in, reads
every confirmed key back from the new leader, restarts the killed member on its own data dir and
reads every key back from it too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

from bench.ha import engines


def _pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def _value(key: bytes, size: int) -> bytes:
    """A value that can be checked on read-back without keeping it: the key, repeated."""
    return (key * (size // len(key) + 1))[:size]


def _entries(prefix: bytes, w: int, seq: int, batch: int, size: int,
             pack: bool) -> list[tuple[bytes, bytes]]:
    """One commit's ``(key, value)`` pairs: ``batch`` keys of ``size`` bytes, or with ``pack``
    one key holding the ``batch`` entries end to end (a log record per publish batch, as a
    queue would write its own log into the engine instead of one key per message)."""
    keys = [b"%s/%d/%010d" % (prefix, w, seq + i) for i in range(batch)]
    if pack:
        return [(keys[0], b"".join(_value(k, size) for k in keys))]
    return [(k, _value(k, size)) for k in keys]


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


async def measure(cluster: engines.Cluster, prefix: bytes, batch: int, inflight: int,
                  seconds: float, size: int, pack: bool = False) -> dict:
    """``inflight`` writers, each committing ``batch`` entries at a time, for ``seconds``."""
    lat: list[float] = []
    failures = 0
    entries = 0
    stop = time.monotonic() + seconds

    async def writer(w: int) -> None:
        nonlocal failures, entries
        c = cluster.client()
        c.cur = w % len(cluster.members)  # writers spread over members, as channels would be
        seq = 0
        try:
            while time.monotonic() < stop:
                ents = _entries(prefix, w, seq, batch, size, pack)
                t0 = time.perf_counter()
                try:
                    await c.commit(ents)
                except engines.CommitFailed:
                    failures += 1
                    continue
                lat.append(time.perf_counter() - t0)
                seq += batch
                entries += batch
        finally:
            await c.close()

    t0 = time.monotonic()
    await asyncio.gather(*(writer(w) for w in range(inflight)))
    dt = time.monotonic() - t0
    return {
        "batch": batch, "inflight": inflight, "pack": pack, "seconds": round(dt, 2),
        "commits": len(lat), "entries": entries, "failures": failures,
        "commits_per_s": round(len(lat) / dt, 1),
        "entries_per_s": round(entries / dt, 1),
        "mb_per_s": round(entries * size / dt / 1e6, 2),
        "p50_ms": round(_pct(lat, 50) * 1000, 2), "p99_ms": round(_pct(lat, 99) * 1000, 2),
        # one commit per publish batch + one per settle batch (a settle is a few bytes, so
        # this is the conservative side)
        "quorum_queue_msg_per_s_est": round(entries / dt / 2, 1),
        "load_avg": _load(),
    }


async def measure_qq(cluster: engines.Cluster, prefix: bytes, batch: int, inflight: int,
                     seconds: float, size: int, pack: bool = False) -> dict:
    """A quorum queue's two commits per message, measured: each writer commits a publish batch
    (``batch`` entries of ``size`` bytes), then a settle batch removing the same keys."""
    pub: list[float] = []
    settle: list[float] = []
    msgs = 0
    failures = 0
    stop = time.monotonic() + seconds

    async def writer(w: int) -> None:
        nonlocal msgs, failures
        c = cluster.client()
        c.cur = w % len(cluster.members)
        seq = 0
        try:
            while time.monotonic() < stop:
                ents = _entries(prefix, w, seq, batch, size, pack)
                try:
                    t0 = time.perf_counter()
                    await c.commit(ents)
                    t1 = time.perf_counter()
                    await c.settle([k for k, _ in ents])
                    t2 = time.perf_counter()
                except engines.CommitFailed:
                    failures += 1
                    continue
                pub.append(t1 - t0)
                settle.append(t2 - t1)
                seq += batch
                msgs += batch
        finally:
            await c.close()

    t0 = time.monotonic()
    await asyncio.gather(*(writer(w) for w in range(inflight)))
    dt = time.monotonic() - t0
    return {
        "batch": batch, "inflight": inflight, "pack": pack, "seconds": round(dt, 2),
        "failures": failures, "msg_per_s": round(msgs / dt, 1), "commits_per_s": round(2 * len(pub) / dt, 1),
        "publish_p50_ms": round(_pct(pub, 50) * 1000, 2),
        "publish_p99_ms": round(_pct(pub, 99) * 1000, 2),
        "settle_p50_ms": round(_pct(settle, 50) * 1000, 2),
        "settle_p99_ms": round(_pct(settle, 99) * 1000, 2),
        "load_avg": _load(),
    }


async def _read_back(cluster: engines.Cluster, i: int, prefix: bytes, want: int,
                     limit_s: float = 30.0) -> tuple[dict[bytes, bytes], str | None]:
    """Every entry under ``prefix`` as member ``i`` sees it, once it has caught up; and the
    last error if it never answered a read (a member still replaying is not a member that
    lost entries: the report tells them apart)."""
    deadline = time.monotonic() + limit_s
    stored: dict[bytes, bytes] = {}
    error = None
    while True:
        c = cluster.client()
        c.cur = i
        try:
            stored = await c.read_all(prefix)
            error = None
        except Exception as exc:  # noqa: BLE001 - a member still starting; bounded by deadline
            stored, error = {}, repr(exc)[:300]
        finally:
            await c.close()
        if len(stored) >= want or time.monotonic() > deadline:
            return stored, error
        await asyncio.sleep(0.5)


async def kill_run(cluster: engines.Cluster, prefix: bytes, batch: int, inflight: int,
                   seconds: float, size: int, pack: bool = False,
                   catch_up_s: float = 120.0) -> dict:
    """Writers run for ``seconds``; a third of the way in the leader is SIGKILLed. Recovery is
    the time from the kill to the first confirmation of a commit sent after it; then every confirmed key is
    read back from a survivor."""
    acked: list[tuple[bytes, bytes]] = []  # every (key, value) a confirmed commit wrote
    confirmed_at: list[tuple[float, float]] = []  # (sent, confirmed) per commit
    failures = 0
    stop = time.monotonic() + seconds
    leader = await cluster.leader_async()
    killed: dict = {"t": None, "member": None, "elected_s": None}

    async def writer(w: int) -> None:
        nonlocal failures
        c = cluster.client()
        c.cur = leader  # the client sits with the leader, as a channel on the leader's node
        seq = 0
        try:
            while time.monotonic() < stop:
                ents = _entries(prefix, w, seq, batch, size, pack)
                t_sent = time.monotonic()
                try:
                    await c.commit(ents)
                except engines.CommitFailed:
                    failures += 1
                    await asyncio.sleep(0.01)
                    continue  # resend the same keys (at-least-once; a put is idempotent)
                confirmed_at.append((t_sent, time.monotonic()))
                acked.extend(ents)
                seq += batch
        finally:
            await c.close()

    async def killer() -> None:
        await asyncio.sleep(seconds / 3)
        i = await cluster.leader_async()
        killed["member"] = cluster.members[i].name
        killed["t"] = time.monotonic()
        cluster.kill(i)
        while time.monotonic() < stop:  # how long the survivors take to elect a leader
            try:
                await cluster.leader_async()
            except Exception:  # noqa: BLE001 - no leader yet (or a member not answering)
                await asyncio.sleep(0.05)
                continue
            killed["elected_s"] = time.monotonic() - killed["t"]
            break

    await asyncio.gather(killer(), *(writer(w) for w in range(inflight)))
    t_kill = killed["t"]
    # a commit confirmed just after the kill may have been committed before it (its reply was
    # on the wire): recovery counts from the kill to the first commit *sent* after the kill
    after = sorted(done for sent, done in confirmed_at if sent > t_kill)
    recovery = (after[0] - t_kill) if after else None
    before = sorted(done for _, done in confirmed_at if done <= t_kill)
    done_all = sorted(done for _, done in confirmed_at)
    gap = max((b - a for a, b in zip(done_all, done_all[1:], strict=False)), default=None)
    new_leader = await cluster.leader_async()
    stored, _ = await _read_back(cluster, new_leader, prefix, len(acked), limit_s=5)
    lost = [k for k, v in acked if stored.get(k) != v]
    # the killed member restarts from its own data dir and must catch up to the same entries
    i_killed = next(i for i, m in enumerate(cluster.members) if m.name == killed["member"])
    t_restart = time.monotonic()
    cluster.restart(i_killed)
    again, again_error = await _read_back(cluster, i_killed, prefix, len(acked), catch_up_s)
    caught_up_s = time.monotonic() - t_restart
    lost_restarted = [k for k, v in acked if again.get(k) != v]
    return {
        "batch": batch, "inflight": inflight, "pack": pack, "seconds": seconds,
        "killed": killed["member"], "new_leader": cluster.members[new_leader].name,
        "recovery_s": None if recovery is None else round(recovery, 3),
        "leader_elected_s": None if killed["elected_s"] is None else round(killed["elected_s"], 3),
        "last_commit_before_kill_s": round(t_kill - before[-1], 3) if before else None,
        "longest_gap_between_confirms_s": None if gap is None else round(gap, 3),
        "commit_failures": failures, "entries_confirmed": len(acked) * (batch if pack else 1),
        "keys_confirmed": len(acked),
        "keys_read_back": len(stored), "entries_lost": len(lost) * (batch if pack else 1),
        "lost_sample": [k.decode() for k in lost[:5]],
        "restarted_member_keys_read_back": len(again),
        "restarted_member_entries_lost": len(lost_restarted) * (batch if pack else 1),
        "restarted_member_caught_up_s": round(caught_up_s, 2),
        "restarted_member_caught_up": len(lost_restarted) == 0,
        "restarted_member_last_error": again_error,
        "load_avg": _load(),
    }


def run_engine(engine: str, ns: argparse.Namespace, base_dir: str, base_port: int) -> dict:
    cluster = engines.make(engine, os.path.join(base_dir, engine), base_port)
    doc: dict = {"engine": engine, "members": 3, "entry_size": ns.size}
    try:
        cluster.start(3)
        doc.update(version=cluster.version, fsync=cluster.fsync, runs=[])
        for pack in ns.layouts:
            for inflight in ns.inflight:
                for b in ns.batches:
                    if pack and b == 1:
                        continue  # one entry packed is the same commit as one entry
                    prefix = b"bench/%s/b%d/i%d/p%d" % (engine.encode(), b, inflight, pack)
                    r = asyncio.run(measure(cluster, prefix, b, inflight, ns.seconds, ns.size,
                                            pack))
                    doc["runs"].append(r)
                    if not ns.quiet:
                        print(f"{engine} {'packed' if pack else 'per-key'} batch={b:<4} "
                              f"inflight={inflight:<3} "
                              f"{r['commits_per_s']:>8} commits/s {r['entries_per_s']:>9} "
                              f"entries/s p50 {r['p50_ms']} ms p99 {r['p99_ms']} ms "
                              f"load {r['load_avg'][0]}", file=sys.stderr)
        if ns.qq:
            doc["quorum_queue"] = []
            for pack in ns.layouts:
                for b in ns.batches:
                    if pack and b == 1:
                        continue
                    r = asyncio.run(measure_qq(
                        cluster, b"bench/%s/qq%d/p%d" % (engine.encode(), b, pack), b,
                        ns.qq_inflight, ns.seconds, ns.size, pack))
                    doc["quorum_queue"].append(r)
                    if not ns.quiet:
                        print(f"{engine} quorum queue {'packed' if pack else 'per-key'} "
                              f"batch={b:<4} inflight={ns.qq_inflight} "
                              f"{r['msg_per_s']:>8} msg/s publish p50 {r['publish_p50_ms']} "
                              f"ms settle p50 {r['settle_p50_ms']} ms load {r['load_avg'][0]}",
                              file=sys.stderr)
        if ns.kill:
            r = asyncio.run(kill_run(cluster, b"bench/%s/kill" % engine.encode(), ns.kill_batch,
                                     ns.kill_inflight, ns.kill_seconds, ns.size,
                                     ns.layouts[-1], ns.catch_up_timeout))
            doc["kill"] = r
            if not ns.quiet:
                print(f"{engine} kill -9 {r['killed']}: commits resumed after "
                      f"{r['recovery_s']} s, {r['entries_confirmed']} confirmed, "
                      f"{r['entries_lost']} lost; restarted member caught up in "
                      f"{r['restarted_member_caught_up_s']} s, "
                      f"{r['restarted_member_entries_lost']} missing there "
                      f"(last error: {r['restarted_member_last_error']})", file=sys.stderr)
    finally:
        cluster.stop()
    return doc


def run_rabbitmq(ns: argparse.Namespace, out_dir: str) -> dict:
    """RabbitMQ's quorum queue in the paper's shape, through the project's own harness."""
    path = os.path.join(out_dir, "rabbitmq-quorum.json")
    cmd = [sys.executable, "-m", "bench", "--scenario", "paper", "--uri", ns.rabbitmq_uri,
           "--queue-args", "x-queue-type=quorum", "-s", str(ns.size), "-z",
           str(ns.rabbitmq_seconds), "--json", path, "--quiet"]
    load0 = _load()
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL)
    with open(path) as f:
        full = json.load(f)
    return {"command": " ".join(cmd[1:]), "load_avg_before": load0, "load_avg_after": _load(),
            "rates": full.get("rates"), "latency_ms": full.get("latency_ms"),
            "confirm_latency_ms": full.get("confirm_latency_ms"), "totals": full.get("totals"),
            "broker": full.get("broker"), "ok": full.get("ok")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.ha",
        description="Three local members of an existing Raft engine (fsync as the engine "
                    "allows): commits/s and latency for 1 KB entries one at a time and batched, "
                    "kill -9 of the leader with read-back, and RabbitMQ's quorum queue beside.")
    p.add_argument("--engine", action="append", choices=engines.ENGINES,
                   help="engine to run (repeatable; default etcd)")
    p.add_argument("--batches", default="1,10,50,200",
                   help="entries per commit, comma-separated (default 1,10,50,200)")
    p.add_argument("--inflight", default="1,8",
                   help="commits in flight (writers), comma-separated (default 1,8)")
    p.add_argument("--layout", default="per-key,packed",
                   help="per-key (one key per entry) and/or packed (one key per batch: the "
                        "queue's own log records); comma-separated, default both; the kill "
                        "run uses the last")
    p.add_argument("-s", "--size", type=int, default=1024, help="entry size in bytes")
    p.add_argument("-z", "--seconds", type=float, default=5.0, help="seconds per point")
    p.add_argument("--no-qq", dest="qq", action="store_false",
                   help="skip the publish+settle (quorum queue) runs")
    p.add_argument("--qq-inflight", type=int, default=8,
                   help="writers in the publish+settle runs (default 8)")
    p.add_argument("--no-kill", dest="kill", action="store_false",
                   help="skip the kill -9 run")
    p.add_argument("--kill-batch", type=int, default=10, help="batch size in the kill run")
    p.add_argument("--kill-inflight", type=int, default=4, help="writers in the kill run")
    p.add_argument("--kill-seconds", type=float, default=15.0, help="length of the kill run")
    p.add_argument("--catch-up-timeout", type=float, default=120.0,
                   help="seconds the restarted member may take to serve every entry")
    p.add_argument("--rabbitmq-uri", default=None,
                   help="also run RabbitMQ's quorum queue (paper shape) on this URI")
    p.add_argument("--rabbitmq-seconds", type=int, default=20)
    p.add_argument("--base-port", type=int, default=23790, help="first of 6 local ports")
    p.add_argument("--dir", default=None, help="data dirs (default: a temp dir, removed)")
    p.add_argument("--json", default=None, help="write the result document here")
    p.add_argument("--quiet", action="store_true")
    ns = p.parse_args(argv)
    ns.engine = ns.engine or ["etcd"]
    ns.batches = [int(x) for x in ns.batches.split(",")]
    ns.inflight = [int(x) for x in ns.inflight.split(",")]
    layouts = {"per-key": False, "packed": True}
    try:
        ns.layouts = [layouts[x] for x in ns.layout.split(",")]
    except KeyError as exc:
        p.error(f"--layout: unknown {exc}; per-key or packed")

    doc: dict = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "os": platform.platform()},
        "load_avg_start": _load(), "engines": [],
    }
    tmp = None
    base = ns.dir
    if base is None:
        tmp = tempfile.TemporaryDirectory(prefix="bench-ha-", dir="/var/tmp")
        base = tmp.name
    try:
        for k, engine in enumerate(ns.engine):
            doc["engines"].append(run_engine(engine, ns, base, ns.base_port + 10 * k))
        if ns.rabbitmq_uri:
            doc["rabbitmq_quorum"] = run_rabbitmq(ns, base)
            if not ns.quiet:
                r = doc["rabbitmq_quorum"]["rates"]
                print(f"rabbitmq quorum queue (paper shape): {r}", file=sys.stderr)
    finally:
        if tmp is not None:
            tmp.cleanup()
    doc["load_avg_end"] = _load()
    text = json.dumps(doc, indent=1)
    if ns.json:
        with open(ns.json, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    bad = [e["engine"] for e in doc["engines"]
           if e.get("kill", {}).get("entries_lost")
           or e.get("kill", {}).get("restarted_member_entries_lost")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
