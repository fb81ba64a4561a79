"""One fuzzing session against an embedded broker: run mutated streams, judge each.

Owns: `FuzzHarness` (an EmbeddedBroker, a capture of the broker's ERROR log records, a
bystander pika connection). A case is a *crash* if the broker answered 541 INTERNAL_ERROR or
logged an ERROR (an unexpected exception: a bug, never a client's fault), a *hang* if the
broker did not close the socket within `timeout` seconds of the client's end-of-file, and a
*stall* if the bystander connection's round trip failed afterwards.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pika

from broker.embedded import EmbeddedBroker
from tests.fuzz.streams import Outcome, run_case


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclass
class Verdict:
    """One case's result: the broker's `outcome`, and what went wrong (empty when fine)."""

    outcome: Outcome
    problems: list[str] = field(default_factory=list)


class FuzzHarness:
    """Start with `with FuzzHarness() as h:`; `h.check(data)` runs one stream."""

    def __init__(self, timeout: float = 5.0) -> None:
        self.timeout = timeout
        self.broker = EmbeddedBroker(handshake_timeout=2.0)
        self._errors = _Errors()
        self.bystander: pika.BlockingConnection | None = None
        self._channel = None

    def __enter__(self) -> FuzzHarness:
        logging.getLogger("broker").addHandler(self._errors)
        self.broker.start()
        self.bystander = pika.BlockingConnection(pika.URLParameters(self.broker.url))
        self._channel = self.bystander.channel()
        self._channel.queue_declare("fuzz-bystander", exclusive=True)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.bystander is not None and self.bystander.is_open:
                self.bystander.close()
        finally:
            self.broker.stop()
            logging.getLogger("broker").removeHandler(self._errors)

    def check(self, data: bytes) -> Verdict:
        before = len(self._errors.records)
        outcome = run_case(self.broker.host, self.broker.port, data, self.timeout)
        v = Verdict(outcome)
        if outcome.reply_code == 541:
            v.problems.append("crash: connection.close 541")
        for rec in self._errors.records[before:]:
            v.problems.append(f"crash: logged {rec.getMessage()} {rec.exc_text or ''}")
        if not outcome.closed:
            v.problems.append(f"hang: socket still open {outcome.seconds:.1f}s after EOF")
        try:
            self._channel.basic_publish("", "fuzz-bystander", b"ping")
            method, _p, body = self._channel.basic_get("fuzz-bystander", auto_ack=True)
            if body != b"ping":
                v.problems.append("stall: bystander lost its message")
        except Exception as exc:  # noqa: BLE001 - any failure of the bystander is a finding
            v.problems.append(f"stall: bystander failed: {exc!r}")
        return v
