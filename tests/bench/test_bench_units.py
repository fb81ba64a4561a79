"""Pure parts of the bench: histogram, options, topology, verification, compare summary."""

from __future__ import annotations

import argparse
import random

import pytest

from bench import compare, options, report, scenarios, topology
from bench.histogram import Histogram, bucket, bucket_value


def test_histogram_percentiles_are_hdrhistograms() -> None:
    """Percentiles come from the hdrhistogram library and match its own record_value path."""
    from hdrh.histogram import HdrHistogram

    rng = random.Random(1)
    values = [int(rng.lognormvariate(7, 1.5)) for _ in range(20000)]
    h = Histogram()
    lib = HdrHistogram(1, 1 << 36, 2)
    for v in values:
        h.record(v)
        lib.record_value(v)
    values.sort()
    p = h.percentiles((50, 95, 99, 99.9))
    for q in (50, 95, 99, 99.9):
        assert p[f"p{q:g}"] == round(min(lib.get_value_at_percentile(q), values[-1]) / 1000, 3)
        exact = values[int(len(values) * q / 100) - 1] / 1000
        assert abs(p[f"p{q:g}"] - exact) <= 0.01 * exact + 0.001, q
    assert p["max"] == values[-1] / 1000 and p["count"] == 20000
    back = HdrHistogram.decode(h.encode())
    assert back.get_total_count() == 20000
    assert back.get_value_at_percentile(99) == lib.get_value_at_percentile(99)


def test_histogram_index_is_the_librarys() -> None:
    from hdrh.histogram import HdrHistogram

    lib = HdrHistogram(1, 1 << 36, 2)
    for v in [*range(0, 5000), 65535, 65536, 123456789, (1 << 36) - 1]:
        assert bucket(v) == lib._counts_index_for(v), v
    assert bucket(1 << 40) == bucket(1 << 36)
    np = pytest.importorskip("numpy")
    from bench import batch

    vs = np.array([0, 5, 255, 256, 257, 1000, 99999, 1 << 37], dtype=np.int64)
    idx, counts, vmax = batch.latency_buckets(10**15, 10**15 - vs * 1000)
    assert sorted(idx.tolist()) == sorted({bucket(int(v)) for v in vs})
    assert vmax == 1 << 36


def test_histogram_buckets_are_monotonic_and_merge() -> None:
    idx = [bucket(v) for v in range(0, 100000, 7)]
    assert idx == sorted(idx)
    for v in (0, 63, 64, 65, 255, 256, 1000, 123456789):
        assert abs(bucket_value(bucket(v)) - v) <= max(0.5, v / 128)
    a, b = Histogram(), Histogram()
    a.record(10)
    b.record(2000)
    a.merge_sparse({str(k): c for k, c in b.take_sparse().items()})
    assert a.total == 2 and b.total == 0
    assert Histogram().percentiles()["p50"] is None
    c = Histogram()
    c.record(3)
    c.record(5)
    assert c.percentiles((50, 100)) == {"p50": 0.003, "p100": 0.005, "max": 0.005, "count": 2}


def parse(*argv: str, base: options.Scenario | None = None) -> options.Scenario:
    p = argparse.ArgumentParser()
    options.add_run_options(p)
    return options.scenario_from_args(p.parse_args(list(argv)), base or options.Scenario())


def test_perftest_flags_map_to_the_scenario() -> None:
    sc = parse("--uri", "amqp://u:p@h:1/v", "-x", "2", "-y", "3", "-u", "q", "-e", "ex", "-t",
               "topic", "-k", "rk", "-s", "1500", "-f", "persistent", "-f", "mandatory", "-c",
               "200", "-q", "100", "-A", "50", "-r", "1000", "-z", "5", "-C", "99",
               "--producer-channel-count", "2", "--consumer-channel-count", "3",
               "--queue-args", "x-max-length=10,x-queue-type=classic", "--json", "out.json")
    assert (sc.producers, sc.consumers, sc.queue, sc.exchange, sc.exchange_type) == (
        2, 3, "q", "ex", "topic")
    assert (sc.routing_key, sc.size, sc.persistent, sc.mandatory, sc.confirm) == (
        "rk", 1500, True, True, 200)
    assert (sc.prefetch, sc.multi_ack_every, sc.rate, sc.time, sc.pmessages) == (
        100, 50, 1000.0, 5.0, 99)
    assert dict(sc.queue_args) == {"x-max-length": 10, "x-queue-type": "classic"}
    assert sc.to_json()["uri"] == "amqp://u:***@h:1/v"
    assert parse("-a").auto_ack is True


@pytest.mark.parametrize("argv", [["-s", "8"], ["-z", "0"], ["-e", ""], ["-q", "10", "-A", "20"],
                                  ["--queue-pattern", "nope"], ["-f", "fast"]])
def test_contradictory_options_are_refused(argv: list[str]) -> None:
    with pytest.raises(ValueError) as info:
        parse(*argv)
    assert str(info.value)


def test_topology_queue_pattern_is_per_queue_like_perftest() -> None:
    sc = parse("--queue-pattern", "perf-%d", "--queue-pattern-from", "1", "--queue-pattern-to",
               "3", "-x", "2", "-y", "3", "--producer-channel-count", "2",
               "--consumer-channel-count", "3")
    plan = topology.build_plan(sc)
    assert plan.queues == ["perf-1", "perf-2", "perf-3"]
    assert len(plan.producers) == 6 and len(plan.consumers) == 9
    assert len(plan.fanout) == 12 and set(plan.fanout.values()) == {1}
    assert plan.bindings[0] == ("perf-1", "direct", "perf-1")
    assert plan.producers[0].channels[0][2] == "perf-1"
    assert plan.consumers[-1].channels == ("perf-3",) * 3
    assert not plan.generated


def test_topology_without_queue_gives_each_consumer_channel_its_own_queue() -> None:
    plan = topology.build_plan(scenarios.named("fanout"))
    assert len(plan.queues) == 10 and plan.fanout == {0: 10}
    assert len(plan.exchanges) == 1 and plan.exchanges[0][1] == "fanout"
    assert plan.generated


def test_spread_keeps_one_producer_and_one_consumer_apart() -> None:
    plan = topology.build_plan(scenarios.named("s1"))
    assert [(len(p), len(c)) for p, c in plan.workers] == [(1, 0), (0, 1)]


def test_named_scenarios_match_the_issue() -> None:
    s1, s2, paper = (scenarios.named(n) for n in ("s1", "s2", "paper"))
    assert (s1.size, s1.confirm, s1.auto_ack, s1.persistent) == (16, 0, True, False)
    assert (s2.confirm, s2.prefetch, s2.multi_ack_every, s2.auto_ack) == (200, 200, 50, False)
    assert (paper.producers, paper.producer_channel_count, paper.consumers,
            paper.consumer_channel_count, paper.size, paper.persistent,
            paper.exchange_durable) == (2, 2, 3, 3, 1500, True, True)
    backlog = scenarios.named("backlog")
    assert backlog.pmessages == 200_000 and backlog.consume_after_publish
    with pytest.raises(KeyError):
        scenarios.named("nope")


def _verify(consumed: dict[int, list[int]], fanout: int = 1) -> dict:
    published = {0: {"count": 4, "checksum": 6, "nacked": 0, "timed_out": 0, "resent": 0}}
    return report.verify(published, consumed, {0: fanout}, auto_ack=False, resend=False,
                         has_consumers=True)


def test_verify_catches_loss_duplication_and_swaps() -> None:
    assert _verify({0: [4, 6]})["status"] == "ok"
    lost = _verify({0: [3, 5]})
    assert (lost["status"], lost["lost"], lost["duplicated"]) == ("failed", 1, 0)
    dup = _verify({0: [5, 8]})
    assert (dup["status"], dup["lost"], dup["duplicated"]) == ("failed", 0, 1)
    swap = _verify({0: [4, 7]})  # seq 0 lost, seq 1 twice: count right, checksum wrong
    assert swap["status"] == "failed" and swap["checksum_ok"] is False
    assert _verify({0: [8, 12]}, fanout=2)["status"] == "ok"
    assert _verify({0: [4, 6], 9: [1, 0]})["status"] == "failed"


def test_compare_summary_medians_and_ratio() -> None:
    def doc(rate: float) -> dict:
        return {"rates": {"publish": rate, "confirm": 0, "consume": rate},
                "latency_ms": {"p50": 1.0, "p99": 2.0}, "confirm_latency_ms": {"p50": None},
                "broker": None}

    runs = [{"side": s, "round": r, "result": doc(v)}
            for r, (s, v) in enumerate([("A", 100), ("B", 300), ("A", 120), ("B", 200),
                                        ("A", 80), ("B", 250)])]
    s = compare.summarize(runs)
    assert s["A"]["publish"] == 100 and s["B"]["publish"] == 250
    assert s["ratio"]["publish"] == 2.5 and s["ratio"]["broker cpu"] is None
    assert "publish (msg/s)" in compare.table(s, ("A", "B"))


@pytest.mark.parametrize("cmd", [[], ["compare"], ["plot"], ["sink"], ["selftest"]])
def test_help_works_for_every_subcommand(cmd: list[str], capsys: pytest.CaptureFixture) -> None:
    from bench.__main__ import main

    with pytest.raises(SystemExit) as info:
        main([*cmd, "-h"])
    assert info.value.code == 0
    assert "usage: python -m bench" in capsys.readouterr().out


def test_more_queues_spread_over_several_exchanges() -> None:
    sc = parse("--queue-pattern", "q-%d", "--queue-pattern-to", "4", "-e", "bench-x",
               "--exchanges", "2")
    plan = topology.build_plan(sc)
    assert [e[0] for e in plan.exchanges] == ["bench-x-0", "bench-x-1"]
    assert [b[1] for b in plan.bindings] == ["bench-x-0", "bench-x-1"] * 2
    assert [p.channels[0][1] for p in plan.producers] == ["bench-x-0", "bench-x-1"] * 2
    with pytest.raises(ValueError):
        parse("--exchanges", "2")


def test_sweep_plan_interleaves_modes_and_uses_two_exchanges_above_15() -> None:
    from bench import sweep

    assert sweep.plan_runs([1, 20], ["default", "ack"], 2)[:4] == [
        (1, "default", 1), (1, "ack", 1), (1, "default", 2), (1, "ack", 2)]
    base = scenarios.named("paper")
    sc = sweep.scenario_for(base, 20, "ack")
    assert (sc.queue_pattern_to, sc.exchanges, dict(sc.queue_args)) == (20, 2, {
        "x-confirm-on": "ack"})
    assert sweep.scenario_for(base, 15, "default").exchanges == 1
    assert dict(sweep.scenario_for(base, 3, "default").queue_args) == {}
    text = sweep.table({1: {"default": [100.0], "ack": [300.0]}}, ["default", "ack"])
    assert "3.00" in text


def test_sweep_target_names_a_mode_on_its_own_broker() -> None:
    from bench import sweep

    assert sweep.parse_target("rabbitmq=default@amqp://g:g@h:5672/%2F") == (
        "rabbitmq", "default", "amqp://g:g@h:5672/%2F")
    assert sweep.parse_target("al=ack-lite@amqp://u:p@w@h/") == ("al", "ack-lite",
                                                                  "amqp://u:p@w@h/")
    for bad in ("rabbitmq", "x=default", "=ack@amqp://h", "x=@amqp://h"):
        with pytest.raises(ValueError):
            sweep.parse_target(bad)


def test_tail_causes_reads_a_runs_share_of_the_loop_lag_histogram() -> None:
    """bench.tail_causes (issue 36 item 1): the run's samples are after minus before; a
    quantile is the upper bound of the bucket that holds it."""
    from bench import tail_causes as tc

    before = {"0.005": 90.0, "0.01": 95.0, "0.025": 99.0, "+Inf": 100.0, "count": 100.0,
              "sum": 0.3}
    after = {"0.005": 1080.0, "0.01": 1090.0, "0.025": 1098.0, "+Inf": 1100.0,
             "count": 1100.0, "sum": 1.3}
    run = tc.delta(before, after)  # 990 under 5 ms, 5 under 10, 4 under 25 ms, 1 above
    assert run["count"] == 1000
    assert tc.quantile(run, 0.5) == 0.005
    assert tc.quantile(run, 0.995) == 0.01
    assert tc.quantile(run, 0.9995) == float("inf")
    assert tc.above(run, 0.005) == 10 and tc.above(run, 0.025) == 1
    assert tc.quantile({"count": 0.0}, 0.99) is None
