# Owns: the texts of AMQP frame errors as RabbitMQ 3.10 words them (rabbit_reader.erl,
# rabbit_binary_parser.erl): payload snippets, Erlang binary formatting.
# Talks to: framing.py (the decoder raises these); nothing else.
# Must never: decode frames or know connection state.
"""Frame error exceptions with RabbitMQ's reply texts (501 FRAME_ERROR, 505 UNEXPECTED_FRAME)."""

from __future__ import annotations

from broker.errors import FrameError, UnexpectedFrame, amqp_error


def erl_binary(data: bytes) -> str:
    """Format bytes as Erlang's ~p prints a binary (<<"abc">> or <<0,1,2>>), for reply texts."""
    if data and all(32 <= b < 127 for b in data):
        text = data.decode("ascii").replace("\\", "\\\\").replace('"', '\\"')
        return f'<<"{text}">>'
    return "<<" + ",".join(str(b) for b in data) + ">>"


def snippet(payload: bytes) -> str:
    """RabbitMQ's payload_snippet: all octets up to 16, else the first 16 (rabbit_reader)."""
    if len(payload) <= 16:
        return f"all octets = {erl_binary(payload)}"
    return f"first octets = {erl_binary(payload[:16])}"


def frame_error(ftype: int, payload: bytes, reason: str) -> Exception:
    """501 FRAME_ERROR "type T, all octets = <<...>>: reason" for a frame of type `ftype`."""
    return amqp_error(FrameError, f"type {ftype}, {snippet(payload)}: {reason}")


def unexpected(ftype: int, payload: bytes) -> Exception:
    """505 UNEXPECTED_FRAME "type T, all octets = <<...>>" for a frame not allowed there."""
    return amqp_error(UnexpectedFrame, f"type {ftype}, {snippet(payload)}")
