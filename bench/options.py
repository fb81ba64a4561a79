# bench/options.py — the run command line and the Scenario it produces.
#
# Owns: the frozen Scenario (every knob of one run) and the argparse parser that builds it with
# RabbitMQ PerfTest's option names and meanings where PerfTest has them.
# Talks to: bench.__main__ (parse), bench.scenarios (named presets), bench.topology and
# bench.coordinator (read the Scenario).
# Must never: open connections or read the environment beyond argv.
"""PerfTest-compatible options (https://rabbitmq.github.io/rabbitmq-perf-test/stable/htmlsingle/).

Options that PerfTest also has keep its short and long names and meaning; options PerfTest does
not have are long-only and marked "(bench)" in their help text.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from typing import Any

DEFAULT_URI = "amqp://guest:guest@127.0.0.1:5672/%2F"


@dataclass(frozen=True)
class Scenario:
    """Everything one run does. Units: sizes in bytes, rates in msg/s, times in seconds."""

    uri: str = DEFAULT_URI
    name: str = "custom"  # scenario name shown in reports
    producers: int = 1  # -x: producer connections (per queue with --queue-pattern)
    consumers: int = 1  # -y: consumer connections (per queue with --queue-pattern)
    queue: str | None = None  # -u: one shared queue; None = one queue per consumer channel
    queue_pattern: str | None = None  # e.g. 'perf-%d'
    queue_pattern_from: int = 1
    queue_pattern_to: int = 1
    exchange: str = "direct"  # -e ('' = default exchange, needs -u)
    exchange_type: str = "direct"  # -t
    exchange_durable: bool = False  # (bench) declare the exchange durable
    exchanges: int = 1  # (bench) with --queue-pattern: spread queues over N exchanges
    routing_key: str | None = None  # -k; None = queue name (-u / pattern) or a generated key
    size: int = 16  # -s: body bytes (>= 16: the bench's timestamp + tag header)
    flags: tuple[str, ...] = ()  # -f: 'persistent', 'mandatory'
    confirm: int = 0  # -c: outstanding confirms per producer channel; 0 = no confirms
    auto_ack: bool = False  # -a
    prefetch: int = 0  # -q: basic.qos prefetch_count per consumer; 0 = unlimited
    multi_ack_every: int = 0  # -A: ack with multiple=true every N messages; 0/1 = each
    rate: float = 0.0  # -r: msg/s per producer channel; 0 = unlimited
    # (bench) with -r: each message's latencies count from its scheduled send time
    # (publisher start + seq / rate), not from when it went out: no coordinated omission
    open_loop: bool = False
    time: float = 10.0  # -z: publishing duration (s); 0 = until -C is reached
    pmessages: int = 0  # -C: messages per producer channel; 0 = unlimited
    producer_channel_count: int = 1
    consumer_channel_count: int = 1
    queue_args: tuple[tuple[str, Any], ...] = ()  # --queue-args x-max-length=10,...
    # (bench) --message-priorities N: producer channel k publishes with priority k mod (N+1)
    # (0 = no priority property), to load priority queues with a mix of priorities
    message_priorities: int = 0
    # (bench) --message-id: every message carries its own message_id property (16 hex
    # digits of its tag), so no two publishes are alike, as many applications send them
    message_id: bool = False
    # (bench) --properties celery: every message carries a Celery 5 task message's properties
    # (content type/encoding, a headers table with its own task id, correlation_id, reply_to)
    properties: str = "none"
    # (bench) --delay-ms D: every message carries the header x-delay = D (an x-delayed-message
    # exchange holds it D ms); with -t x-delayed-message the exchange is declared with
    # x-delayed-type direct. The consumer's latency is then the lateness (from the due time).
    delay_ms: int = 0
    # (bench) --dedup-header: every message carries x-deduplication-header = its own id
    # (distinct; the message_id property too), to measure deduplication's cost per publish;
    # with -t x-message-deduplication the exchange gets x-cache-size 1 000 000
    dedup_header: bool = False
    json: str | None = None  # --json FILE
    resend: bool = False  # (bench) republish nacked and timed-out messages
    confirm_timeout: float = 30.0  # --confirm-timeout: give up (or resend) after (s)
    consume_after_publish: bool = False  # (bench) start consumers once producers finished
    drain_timeout: float = 15.0  # (bench) end the drain after this long without progress (s)
    processes: int = 0  # (bench) worker processes; 0 = one per connection, at most 2 × cores
    keep_queues: bool = False  # (bench) leave generated queues/exchange after the run
    quiet: bool = False  # (bench) no per-second progress line

    @property
    def persistent(self) -> bool:
        return "persistent" in self.flags

    @property
    def mandatory(self) -> bool:
        return "mandatory" in self.flags

    def validate(self) -> None:
        """Raise ValueError for contradictory options (checked before any connection)."""
        if self.size < 16:
            raise ValueError("-s must be >= 16 bytes (timestamp + producer tag header)")
        if self.time <= 0 and self.pmessages <= 0:
            raise ValueError("give a duration (-z > 0) or a message count (-C)")
        if self.exchange == "" and not (self.queue or self.queue_pattern):
            raise ValueError("the default exchange ('') needs -u or --queue-pattern")
        if not self.auto_ack and self.prefetch and self.multi_ack_every > self.prefetch:
            raise ValueError("-A larger than -q would stall: the broker stops at -q unacked")
        if self.exchanges > 1 and not (self.queue_pattern and self.exchange):
            raise ValueError("--exchanges needs --queue-pattern and a named exchange")
        if self.queue_pattern and "%d" not in self.queue_pattern:
            raise ValueError("--queue-pattern needs a %d placeholder")
        if self.queue_pattern and self.queue_pattern_to < self.queue_pattern_from:
            raise ValueError("--queue-pattern-to must be >= --queue-pattern-from")
        for flag in self.flags:
            if flag not in ("persistent", "mandatory"):
                raise ValueError(f"unknown -f flag {flag!r} (persistent, mandatory)")
        if self.confirm < 0 or self.prefetch < 0 or self.producers < 0 or self.consumers < 0:
            raise ValueError("counts must be >= 0")

    def replace(self, **changes: Any) -> Scenario:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """The exact scenario, JSON-ready (password redacted in the URI)."""
        from bench.amqp import URI

        d = dataclasses.asdict(self)
        d["uri"] = URI.parse(self.uri).redacted()
        d["flags"] = list(self.flags)
        d["queue_args"] = dict(self.queue_args)
        return d


def parse_queue_args(text: str) -> tuple[tuple[str, Any], ...]:
    """'x-max-length=10,x-queue-type=quorum' -> (('x-max-length', 10), ...); ints converted,
    and true/false to booleans (x-message-deduplication=true, x-single-active-consumer=true),
    as PerfTest's --queue-args does."""
    out: list[tuple[str, Any]] = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"--queue-args item {item!r} is not key=value")
        out.append((key, int(value) if value.lstrip("-").isdigit() else
                    {"true": True, "false": False}.get(value, value)))
    return tuple(out)


def add_run_options(p: argparse.ArgumentParser) -> None:
    """The PerfTest-style options shared by `run` and (as overrides) `compare`."""
    a = p.add_argument
    a("--uri", help="AMQP URI (default " + DEFAULT_URI.replace("%", "%%") + ")")
    a("-x", "--producers", type=int, help="producer connections (per queue with a pattern)")
    a("-y", "--consumers", type=int, help="consumer connections (per queue with a pattern)")
    a("-u", "--queue", help="queue name (default: one generated queue per consumer channel)")
    a("--queue-pattern", help="queue name pattern, e.g. 'perf-%%d'")
    a("--queue-pattern-from", type=int, help="first queue number")
    a("--queue-pattern-to", type=int, help="last queue number")
    a("-e", "--exchange", help="exchange name (default 'direct'; '' = default exchange)")
    a("-t", "--type", dest="exchange_type", help="exchange type (default direct)")
    a("--exchange-durable", action="store_true", default=None, help="(bench) durable exchange")
    a("--exchanges", type=int, help="(bench) with --queue-pattern: queue i bound to exchange "
      "<-e>-<i mod N> (the paper puts more than 15 queues on two)")
    a("-k", "--routing-key", help="routing key")
    a("-s", "--size", type=int, help="message body size in bytes (>= 16)")
    a("-f", "--flag", action="append", dest="flags", help="persistent | mandatory (repeatable)")
    a("-c", "--confirm", type=int, help="outstanding confirms per producer channel")
    a("-a", "--autoack", dest="auto_ack", action="store_true", default=None, help="auto-ack")
    a("-q", "--qos", dest="prefetch", type=int, help="consumer prefetch count")
    a("-A", "--multi-ack-every", type=int, help="ack with multiple=true every N messages")
    a("-r", "--rate", type=float, help="publishing rate limit per producer channel (msg/s)")
    a("--open-loop", action="store_true", default=None,
      help="(bench) with -r: time each message from its scheduled send time (no "
           "coordinated omission: a publisher that falls behind counts the wait)")
    a("-z", "--time", type=float, help="publishing duration in seconds")
    a("-C", "--pmessages", type=int, help="messages per producer channel")
    a("--producer-channel-count", type=int, help="channels per producer connection")
    a("--consumer-channel-count", type=int, help="channels per consumer connection")
    a("--queue-args", type=parse_queue_args, help="queue arguments, e.g. x-max-length=10")
    a("--message-priorities", type=int,
      help="(bench) producer channel k publishes with priority k mod (N+1); 0 = none")
    a("--message-id", action="store_true", default=None,
      help="(bench) a message_id property per message (16 hex digits): no two publishes alike")
    a("--properties", choices=["none", "celery"], default=None,
      help="(bench) property shape: celery = a Celery 5 task message's properties and headers, "
           "its task id distinct per message")
    a("--delay-ms", type=int,
      help="(bench) x-delay header in ms on every message (an x-delayed-message exchange, "
           "-t x-delayed-message, holds it that long); latencies count from the due time")
    a("--dedup-header", action="store_true", default=None,
      help="(bench) x-deduplication-header = the message's own id on every message")
    a("--json", help="write the result document to FILE")
    a("--resend", action="store_true", default=None, help="(bench) republish nacked/timed out")
    a("--confirm-timeout", type=float, help="seconds to wait for a confirm (default 30)")
    a("--consume-after-publish", action="store_true", default=None,
      help="(bench) start consumers only when producers are done (backlog drain)")
    a("--drain-timeout", type=float, help="(bench) stop draining after this long idle (s)")
    a("--processes", type=int, help="(bench) worker processes (default: per connection)")
    a("--keep-queues", action="store_true", default=None, help="(bench) keep generated queues")
    a("--quiet", action="store_true", default=None, help="(bench) no progress lines")


def scenario_from_args(ns: argparse.Namespace, base: Scenario) -> Scenario:
    """Overlay the options the user gave (non-None) on ``base``."""
    names = {f.name for f in dataclasses.fields(Scenario)}
    changes = {k: v for k, v in vars(ns).items() if k in names and v is not None}
    if "flags" in changes:
        changes["flags"] = tuple(changes["flags"])
    if "queue_pattern" in changes and "queue_pattern_to" not in changes:
        changes.setdefault("queue_pattern_to", base.queue_pattern_to)
    sc = dataclasses.replace(base, **changes)
    sc.validate()
    return sc
