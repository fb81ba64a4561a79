"""Short bench runs: against the broker fixture, and against the (deliberately faulty) sink."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from bench import coordinator, report, scenarios
from bench.options import Scenario

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def sink() -> Iterator[Callable[..., tuple[str, subprocess.Popen[str]]]]:
    """sink(*args) -> (uri, process): `python -m bench sink --port 0 *args`, ready-line awaited."""
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str) -> tuple[str, subprocess.Popen[str]]:
        proc = subprocess.Popen([sys.executable, "-m", "bench", "sink", "--port", "0", *args],
                                cwd=ROOT, stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 15)
        assert ready, "sink did not report ready within 15 s"
        line = proc.stdout.readline()
        assert line.startswith("sink listening on "), line
        port = int(line.rsplit(":", 1)[1])
        return f"amqp://guest:guest@127.0.0.1:{port}/%2F", proc

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def tiny(name: str, uri: str, **changes: Any) -> Scenario:
    """A named scenario cut down to a fixed message count (deterministic, ~1 s)."""
    changes.setdefault("time", 0)
    changes.setdefault("pmessages", 2000)
    changes.setdefault("quiet", True)
    changes.setdefault("drain_timeout", 5.0)
    changes.setdefault("confirm_timeout", 5.0)
    return scenarios.named(name).replace(uri=uri, **changes)


@pytest.mark.parametrize("name", ["s2", "paper"])
def test_run_against_broker_is_exactly_once_and_schema_valid(broker: Any, tmp_path: Any,
                                                             name: str) -> None:
    out = tmp_path / "r.json"
    doc = coordinator.run(tiny(name, broker.url, pmessages=500, json=str(out)))
    assert doc["errors"] == []
    assert report.check_schema(doc) == []
    assert json.loads(out.read_text()) == json.loads(json.dumps(doc))
    channels = 1 if name == "s2" else 4
    assert doc["totals"]["published"] == doc["totals"]["confirmed"] == 500 * channels
    assert doc["totals"]["consumed"] == 500 * channels
    v = doc["verification"]
    assert (v["status"], v["mode"], v["expected"], v["lost"], v["duplicated"]) == (
        "ok", "ack", 500 * channels, 0, 0)
    assert doc["latency_ms"]["count"] == 500 * channels
    assert doc["confirm_latency_ms"]["p50"] is not None and doc["ok"] is True
    assert doc["scenario"]["name"] == name and "***" in doc["scenario"]["uri"]


def test_backlog_publishes_first_then_drains(broker: Any) -> None:
    doc = coordinator.run(tiny("backlog", broker.url, pmessages=1000))
    assert doc["verification"]["status"] == "ok" and doc["totals"]["consumed"] == 1000
    assert doc["errors"] == []


@pytest.mark.parametrize(("fault", "lost", "duplicated"), [("drop", 1, 0), ("duplicate", 0, 1)])
def test_exactly_once_check_catches_a_faulty_sink(sink: Any, fault: str, lost: int,
                                                  duplicated: int) -> None:
    uri, _ = sink("--fault", fault, "--fault-at", "77")
    doc = coordinator.run(tiny("s2", uri, drain_timeout=1.0))
    v = doc["verification"]
    assert (v["status"], v["lost"], v["duplicated"]) == ("failed", lost, duplicated)
    assert doc["ok"] is False and doc["errors"] == []


@pytest.mark.parametrize(("name", "changes", "expected"), [
    ("fanout", {"pmessages": 300}, 3000),  # 1 KB: slice-per-message runs, 10 queues
    ("paper", {"pmessages": 300}, 1200),  # 1500 B, producer/consumer channel numbers differ
    ("paper", {"pmessages": 300, "size": 16}, 1200),  # bytes.replace runs, rechannelled
    ("s2", {"pmessages": 20, "size": 140_000}, 20),  # bodies over frame_max: several frames
])
def test_the_sink_itself_is_exactly_once(sink: Any, name: str, changes: dict[str, int],
                                         expected: int) -> None:
    uri, _ = sink()
    doc = coordinator.run(tiny(name, uri, **changes))
    v = doc["verification"]
    assert (v["status"], v["expected"]) == ("ok", expected), v


@pytest.mark.parametrize("resend", [False, True])
def test_nack_is_counted_and_resent_with_resend(sink: Any, resend: bool) -> None:
    uri, _ = sink("--fault", "nack", "--fault-at", "5")
    doc = coordinator.run(tiny("s2", uri, pmessages=200, resend=resend, drain_timeout=1.0))
    assert doc["totals"]["nacked"] == 1
    assert doc["totals"]["resent"] == (1 if resend else 0)
    v = doc["verification"]
    if resend:
        assert v["status"] == "ok"
    else:
        assert (v["status"], v["lost"]) == ("failed", 1)
        assert "not resent" in v["reason"]


def test_connection_blocked_pauses_publishing(sink: Any) -> None:
    uri, _ = sink("--block-at", "50", "--block-for", "0.6")
    doc = coordinator.run(tiny("s2", uri, pmessages=300))
    assert doc["blocked_seconds"] >= 0.5
    assert doc["duration_s"]["publishing"] >= 0.5
    assert doc["verification"]["status"] == "ok"


def test_broker_going_away_is_reported_not_hung(sink: Any) -> None:
    uri, proc = sink()
    lines: list[str] = []

    def progress(line: str) -> None:
        lines.append(line)
        if proc.poll() is None:
            proc.kill()

    started = time.monotonic()
    doc = coordinator.run(tiny("s1", uri, time=30, pmessages=0, quiet=False), out=progress)
    assert time.monotonic() - started < 20
    assert lines and doc["ok"] is False
    assert any("connection lost" in e or "Connection" in e for e in doc["errors"]), doc["errors"]


def test_compare_and_plot_cli(broker: Any, tmp_path: Any, capsys: Any) -> None:
    from bench.__main__ import main

    out = tmp_path / "cmp.json"
    rc = main(["compare", broker.url, broker.url, "--scenario", "s1", "-z", "0.5", "-r", "2000",
               "--rounds", "3", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "B/A" in text and text.count("round ") == 6
    doc = json.loads(out.read_text())
    assert doc["schema"] == "bench-compare/1" and len(doc["runs"]) == 6
    assert [r["side"] for r in doc["runs"]] == ["A", "B"] * 3
    png = tmp_path / "cmp.png"
    assert main(["plot", str(out), "-o", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bodies_larger_than_frame_max_against_broker(broker: Any) -> None:
    doc = coordinator.run(tiny("s2", broker.url, pmessages=30, size=300_000))
    assert doc["verification"]["status"] == "ok" and doc["totals"]["consumed"] == 30
    assert doc["rates"]["consume_mb_s"] > 0 and doc["errors"] == []


def test_sweep_cli_runs_the_paper_per_queue_count(broker: Any, tmp_path: Any,
                                                  capsys: Any) -> None:
    from bench.__main__ import main

    out, png = tmp_path / "sweep.json", tmp_path / "sweep.png"
    rc = main(["sweep", broker.url, "--queues", "1,2", "-z", "0", "-C", "100",
               "--drain-timeout", "5", "--out", str(out), "--png", str(png)])
    assert rc == 0, capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["schema"] == "bench-sweep/1" and set(doc["points"]) == {"1", "2"}
    assert [r["result"]["totals"]["consumed"] for r in doc["runs"]] == [400, 800]
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_sweep_targets_run_each_series_on_its_own_uri(broker: Any, tmp_path: Any,
                                                      capsys: Any) -> None:
    from bench.__main__ import main

    out = tmp_path / "sweep.json"
    rc = main(["sweep", "unused", "--queues", "1", "-z", "0", "-C", "100",
               "--drain-timeout", "5", "--out", str(out),
               "--target", f"persist=default@{broker.url}",
               "--target", f"ack-lite=ack-lite@{broker.url}"])
    text = capsys.readouterr().out
    assert rc == 0, text
    doc = json.loads(out.read_text())
    assert [(r["series"], r["mode"]) for r in doc["runs"]] == [("persist", "default"),
                                                             ("ack-lite", "ack-lite")]
    assert "ack-lite/persist" in text and "broker CPU" in text


def test_consumer_cancelled_by_the_broker_is_reported(broker: Any) -> None:
    import asyncio

    from pamqp import commands

    from bench.amqp import URI, Connection

    sc = tiny("s2", broker.url, time=30, pmessages=0, quiet=False, rate=500.0)

    async def delete_queue() -> None:
        conn = await Connection.open(URI.parse(broker.url), "test-admin")
        ch = await conn.channel()
        await ch.rpc(commands.Queue.Delete(queue=sc.queue), commands.Queue.DeleteOk)
        await conn.close()

    deleted: list[bool] = []

    def progress(line: str) -> None:
        if not deleted:
            deleted.append(True)
            asyncio.run(delete_queue())

    started = time.monotonic()
    doc = coordinator.run(sc, out=progress)
    assert time.monotonic() - started < 20
    assert deleted and doc["ok"] is False
    assert any("cancelled" in e for e in doc["errors"]), doc["errors"]


# A producer closes its connection right after its last publish (issue 8 item 6). ----------

BURST = 50_000  # 16 B publishes, no confirms: the producer runs far ahead of the broker


@pytest.mark.parametrize("auto_ack", [True, False], ids=["auto-ack", "manual-ack"])
def test_messages_published_just_before_connection_close_all_arrive(
        broker: Any, monkeypatch: pytest.MonkeyPatch, auto_ack: bool) -> None:
    """The producer sends connection.close right behind a burst the broker is still working
    through (credit flow engaged); every message must still be consumed exactly once."""
    blockings = _count_credit_flow_blockings(broker, monkeypatch)
    manual = {} if auto_ack else {"prefetch": 500, "multi_ack_every": 50}
    doc = coordinator.run(tiny("s1", broker.url, pmessages=BURST, auto_ack=auto_ack,
                               drain_timeout=2.0, **manual))
    assert doc["errors"] == []
    assert doc["totals"]["published"] == BURST
    if blockings is not None:
        assert blockings[0] > 0, "credit flow never blocked: the test did not load the broker"
    v = doc["verification"]
    assert (v["status"], v["expected"], v["lost"], v["duplicated"]) == ("ok", BURST, 0, 0), v


def _count_credit_flow_blockings(broker: Any, monkeypatch: pytest.MonkeyPatch) -> list[int] | None:
    """Count the in-process broker's holds on a producer: credit-flow blockings (sender out
    of credit) and reads left for a next loop turn (the reader's slices, issue 49); None
    for an external broker (BROKER_TEST_URI), which cannot be observed."""
    if not hasattr(broker, "broker"):
        return None
    from broker.credit_flow import CreditFlow
    from broker.reader import Reader

    count = [0]
    send = CreditFlow.send
    next_slice = Reader._next_slice

    def counting_send(self: CreditFlow, peer: Any, n: int = 1) -> bool:
        blocked = send(self, peer, n)
        count[0] += blocked
        return blocked

    def counting_next_slice(self: Reader) -> None:
        count[0] += 1
        next_slice(self)

    monkeypatch.setattr(CreditFlow, "send", counting_send)
    monkeypatch.setattr(Reader, "_next_slice", counting_next_slice)
    return count


def test_loss_of_the_last_message_before_close_is_reported(sink: Any) -> None:
    uri, _ = sink("--fault", "drop", "--fault-at", "2000")  # the producer's last publish
    doc = coordinator.run(tiny("s1", uri, pmessages=2000, drain_timeout=1.0))
    v = doc["verification"]
    assert (v["status"], v["expected"], v["consumed"], v["lost"], v["duplicated"]) == (
        "failed", 2000, 1999, 1, 0), v
    assert "1 lost" in v["reason"] and doc["ok"] is False and doc["errors"] == []


def test_producer_sharing_a_connection_with_a_consumer_closes_only_its_channel(
        sink: Any) -> None:
    import asyncio
    import multiprocessing

    from bench.amqp import URI, Connection
    from bench.consumer import Consumer
    from bench.publisher import Publisher
    from bench.worker import Worker

    uri, _ = sink()
    sc = tiny("s1", uri, pmessages=100)
    here, there = multiprocessing.Pipe()

    async def scenario() -> None:
        worker = Worker(sc, [], [], there, "t")
        shared = await Connection.open(URI.parse(uri), "shared")
        alone = await Connection.open(URI.parse(uri), "alone")
        cons = Consumer(await shared.channel(), "q", worker.tally, auto_ack=True, prefetch=0,
                        ack_every=0)
        all_in = asyncio.Event()

        def on_deliver(*args: int) -> None:
            cons.on_deliver(*args)
            if worker.tally.consumed == 200:
                all_in.set()

        cons.ch.on_deliver, cons.ch.on_deliver_run = on_deliver, None  # one at a time
        await cons.consume()
        worker.consumers.append(cons)
        pubs = [Publisher(await c.channel(), i, "", "q", sc) for i, c in enumerate((shared, alone))]
        await asyncio.gather(*(worker.run_producer(c, [p]) for c, p in zip((shared, alone), pubs,
                                                                            strict=True)))
        await asyncio.wait_for(asyncio.gather(*worker.closing), 5)
        assert pubs[0].ch.closed and not shared.closed.is_set()  # the consumer keeps its conn
        assert alone.closed.is_set() and alone.close_ok and alone.error is None
        await asyncio.wait_for(all_in.wait(), 5)
        assert worker.tally.per_producer == {0: [100, 4950], 1: [100, 4950]}
        assert not here.poll()  # no error reported to the coordinator
        await shared.close()

    try:
        asyncio.run(scenario())
    finally:
        here.close()
        there.close()


@pytest.mark.parametrize("open_loop", [False, True])
def test_open_loop_charges_a_stall_to_every_message_due_during_it(sink: Any,
                                                                  open_loop: bool) -> None:
    """--open-loop (issue 36 item 2): the sink blocks publishers for 0.6 s after 200 of
    1000 messages sent at 1000 msg/s. Timed from when each was due, the ~600 messages due
    during the block each waited part of it (p50 over 100 ms, max about 0.6 s); timed from
    when each went out (closed loop, coordinated omission) the stall vanishes."""
    uri, _ = sink("--block-at", "200", "--block-for", "0.6")
    doc = coordinator.run(tiny("s2", uri, pmessages=1000, rate=1000.0, open_loop=open_loop))
    assert doc["verification"]["status"] == "ok"
    confirm = doc["confirm_latency_ms"]
    if open_loop:
        assert confirm["p50"] > 100 and 450 < confirm["max"] < 1500, confirm
    else:
        assert confirm["p99"] < 100, confirm


def test_latency_curve_runs_alternated_points_and_plots(sink: Any, tmp_path: Any) -> None:
    """`python -m bench.latency_curve` against two null servers (the client's own floor):
    every point run once per round per target, alternated, summarized with the spread, and
    plotted."""
    from bench import latency_curve

    (uri_a, _), (uri_b, _) = sink(), sink()
    assert latency_curve.main(["--shape", "s2", "--target", f"a={uri_a}",
                               "--target", f"b={uri_b}", "--rates", "500,1000",
                               "--rounds", "2", "-z", "1", "--quiet-load", "100",
                               "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "curve.json").read_text())
    assert [(r["rate"], r["round"], r["target"]) for r in doc["runs"]] == [
        (500.0, 1, "a"), (500.0, 1, "b"), (500.0, 2, "a"), (500.0, 2, "b"),
        (1000.0, 1, "a"), (1000.0, 1, "b"), (1000.0, 2, "a"), (1000.0, 2, "b")]
    for name in ("a", "b"):
        for rate in ("500", "1000"):
            point = doc["summary"][name][rate]
            assert point["sustained"] is True, point
            p99 = point["confirm_ms"]["p99"]
            assert p99["min"] <= p99["median"] <= p99["max"]
    assert (tmp_path / "curve.png").stat().st_size > 10_000


def test_latency_curve_stops_a_target_at_its_maximum(sink: Any, tmp_path: Any) -> None:
    """`--up-to b=500`: target b runs only the points at or below 500 msg/s, a goes on."""
    from bench import latency_curve

    (uri_a, _), (uri_b, _) = sink(), sink()
    assert latency_curve.main(["--shape", "s2", "--target", f"a={uri_a}",
                               "--target", f"b={uri_b}", "--rates", "500,1000",
                               "--up-to", "b=500", "--rounds", "1", "-z", "1",
                               "--quiet-load", "100", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "curve.json").read_text())
    assert [(r["rate"], r["target"]) for r in doc["runs"]] == [
        (500.0, "a"), (500.0, "b"), (1000.0, "a")]
    assert sorted(doc["summary"]["b"]) == ["500"]


def test_latency_curve_table_says_where_the_subject_is_at_or_below(tmp_path: Any, capsys: Any
                                                                   ) -> None:
    """`--table`: one row per rate, the medians with their range, the verdict per rate."""
    from bench import latency_curve

    def point(p99: float, p999: float, sustained: bool = True) -> dict:
        def c(v: float) -> dict:
            return {"median": v, "min": v / 2, "max": v * 2}
        return {"sustained": sustained, "confirm_ms": {"p99": c(p99), "p99.9": c(p999),
                                                       "max": c(p999 * 2)}}

    doc = {"summary": {"base": {"100": point(2.0, 4.0), "200": point(1.0, 1.0, False)},
                       "subj": {"100": point(1.0, 5.0), "200": point(0.5, 0.5),
                                "300": point(0.7, 0.9)}}}
    path = tmp_path / "curve.json"
    path.write_text(json.dumps(doc))
    assert latency_curve.main(["--table", str(path), "base", "subj"]) == 0
    rows = capsys.readouterr().out.strip().splitlines()
    assert rows[2] == ("| 100 | 2.00 (1.00-4.00) | 1.00 (0.50-2.00) | 4.00 (2.00-8.00) | "
                       "5.00 (2.50-10.00) | 8.0 | 10.0 | yes, no |")
    assert rows[3].endswith("| - |") and "(not sustained)" in rows[3]
    doc["summary"]["floor"] = {"100": point(0.5, 0.9)}
    path.write_text(json.dumps(doc))
    assert latency_curve.main(["--table", str(path), "base", "subj"]) == 0
    rows = capsys.readouterr().out.strip().splitlines()
    assert rows[0].endswith("| floor p99 / p99.9 |")
    assert rows[2].endswith("| yes, no | 0.50 / 0.90 |") and rows[3].endswith("| - | - |")
    assert rows[4].startswith("| 300 | - | 0.70")


def test_latency_curve_floor_runs_a_null_server_at_every_rate(sink: Any, tmp_path: Any) -> None:
    """`--floor`: the client's own latency, against a null server the curve starts itself,
    as one more target at every rate."""
    from bench import latency_curve

    uri, _proc = sink()
    assert latency_curve.main(["--shape", "s2", "--target", f"a={uri}", "--rates", "500",
                               "--rounds", "1", "-z", "1", "--quiet-load", "100", "--floor",
                               "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "curve.json").read_text())
    assert [(r["rate"], r["target"]) for r in doc["runs"]] == [(500.0, "a"), (500.0, "floor")]
    assert doc["summary"]["floor"]["500"]["sustained"] is True
