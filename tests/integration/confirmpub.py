"""A raw-client publisher in confirm mode that records every basic.ack/basic.nack it gets.

Used by the confirm-mode tests (test_confirm_modes*.py), which must see exactly which publishes
are still unconfirmed at a given moment, and how each `multiple` confirm was batched; pika's
BlockingChannel blocks in basic_publish until the confirm and hides both.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pamqp import commands, heartbeat
from rawamqp import RawClient

CH = 1  # the publisher's one channel
QUIET = 0.3  # s: how long a confirm that must stay pending is watched for


class ConfirmPublisher:
    """One connection, channel 1 in confirm mode. Publish, then pump/wait for confirms.

    `outcome[seq]` is "ack" or "nack" once confirmed; `outstanding` maps the seq numbers not
    yet confirmed to their msg_id. A `multiple` confirm covers every outstanding seq <= its tag.
    `on_confirm(kind, [(seq, msg_id), ...])` (optional) runs for each confirm frame, before the
    next frame is read. Every confirm is checked: it must cover something, and nothing twice.
    """

    def __init__(self, host: str, port: int, *, confirm: bool = True) -> None:
        self.c = RawClient(host, port)
        self.c.handshake()
        self.c.open_channel(CH)
        if confirm:
            self.c.send(commands.Confirm.Select(), CH)
            self.c.expect(commands.Confirm.SelectOk, CH)
        self.next_seq = 1
        self.outstanding: dict[int, str] = {}
        self.outcome: dict[int, str] = {}
        self.frames: list[tuple[str, int, bool]] = []
        self.returned: list[bytes] = []
        # in arrival order: ("return", body) and ("ack"|"nack", (seq numbers covered, ...))
        self.events: list[tuple[str, object]] = []
        self.on_confirm: Callable[[str, list[tuple[int, str]]], None] | None = None

    # --- synchronous methods ------------------------------------------------------------------
    def call(self, method: Any, reply: type) -> Any:
        """Send `method` on channel 1 and read frames (recording confirms) until `reply`."""
        self.c.send(method, CH)
        while True:
            value = self._read(self.c.timeout)
            if isinstance(value, reply):
                return value

    def declare(self, queue: str = "", mode: str | None = None, **kw: Any) -> str:
        """queue.declare (exclusive unless told otherwise), with x-confirm-on=mode if given."""
        args = dict(kw.pop("arguments", {}) or {})
        if mode is not None:
            args["x-confirm-on"] = mode
        kw.setdefault("exclusive", not queue)
        ok = self.call(commands.Queue.Declare(queue=queue, arguments=args, **kw),
                       commands.Queue.DeclareOk)
        return ok.queue

    # --- publishing and confirms --------------------------------------------------------------
    def publish(self, routing_key: str, body: bytes = b"x", exchange: str = "",
                mandatory: bool = False, msg_id: str | None = None,
                delivery_mode: int | None = None) -> int:
        """basic.publish; returns its confirm seq number (msg_id defaults to str(seq))."""
        seq = self.next_seq
        self.next_seq += 1
        msg_id = msg_id or str(seq)
        self.outstanding[seq] = msg_id
        props = commands.Basic.Properties(message_id=msg_id, delivery_mode=delivery_mode)
        self.c.publish(CH, body, exchange=exchange, routing_key=routing_key,
                       mandatory=mandatory, properties=props)
        return seq

    def pump(self, duration: float) -> None:
        """Read and record whatever the broker sends for `duration` seconds."""
        deadline = time.monotonic() + duration
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                self._read(remaining)
            except TimeoutError:
                return

    def wait(self, *seqs: int, timeout: float = 5.0) -> list[str]:
        """Read until every seq in `seqs` is confirmed; their outcomes ("ack"/"nack")."""
        deadline = time.monotonic() + timeout
        while any(s not in self.outcome for s in seqs):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                missing = [s for s in seqs if s not in self.outcome]
                raise AssertionError(f"no confirm for {missing} within {timeout}s")
            try:
                self._read(remaining)
            except TimeoutError:
                continue
        return [self.outcome[s] for s in seqs]

    def wait_all(self, timeout: float = 5.0) -> list[str]:
        return self.wait(*range(1, self.next_seq), timeout=timeout)

    def assert_pending(self, *seqs: int, within: float = QUIET) -> None:
        """No confirm for any of `seqs` arrives within `within` seconds."""
        self.pump(within)
        early = {s: self.outcome[s] for s in seqs if s in self.outcome}
        assert not early, f"confirmed too early: {early}"

    def close(self) -> None:
        """connection.close, recording any confirm that comes before the close-ok."""
        self.c.send(commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0,
                                              method_id=0))
        while not isinstance(self._read(self.c.timeout), commands.Connection.CloseOk):
            pass
        self.c.close_socket()

    # --- frames -------------------------------------------------------------------------------
    def _read(self, timeout: float) -> Any:
        """Read one frame; confirms and returns are recorded; a close fails the test."""
        ch, value = self.c.read_frame(timeout)
        if isinstance(value, commands.Basic.Ack | commands.Basic.Nack):
            self._confirm(value)
        elif isinstance(value, commands.Basic.Return):
            body = self.c.read_content(ch)[1]
            self.returned.append(body)
            self.events.append(("return", body))
        elif isinstance(value, commands.Channel.Close | commands.Connection.Close):
            raise AssertionError(f"publisher closed by broker: {value!r}")
        elif isinstance(value, heartbeat.Heartbeat):
            pass
        return value

    def _confirm(self, f: commands.Basic.Ack | commands.Basic.Nack) -> None:
        kind = "ack" if isinstance(f, commands.Basic.Ack) else "nack"
        self.frames.append((kind, f.delivery_tag, f.multiple))
        assert f.delivery_tag not in self.outcome, f"seq {f.delivery_tag} confirmed twice"
        if f.multiple:
            covered = sorted(s for s in self.outstanding if s <= f.delivery_tag)
        else:
            covered = [f.delivery_tag] if f.delivery_tag in self.outstanding else []
        assert covered, f"{kind} {f.delivery_tag} (multiple={f.multiple}) confirms nothing"
        items = [(s, self.outstanding.pop(s)) for s in covered]
        for s in covered:
            self.outcome[s] = kind
        self.events.append((kind, tuple(covered)))
        if self.on_confirm is not None:
            self.on_confirm(kind, items)
