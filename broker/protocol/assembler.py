# Owns: turning one channel's frames (method, content header, body frames) into commands,
# the state machine of RabbitMQ's rabbit_command_assembler.erl.
# Talks to: the connection reader, which keeps one CommandAssembler per open channel and feeds
# it that channel's frames from FrameDecoder; the commands go on to the channel process.
# Must never: do I/O, interpret method semantics, or know about other channels.
"""Frames → commands for one channel (AMQP 0-9-1 §2.3.5.2, rabbit_command_assembler.erl)."""

from __future__ import annotations

from typing import Any

from pamqp import commands

from broker.errors import PreconditionFailed, UnexpectedFrame, amqp_error
from broker.protocol.framing import Command, ContentHeader

__all__ = ["CONTENT_METHODS", "Command", "CommandAssembler"]

# Methods followed by a content header and body frames (the spec's content="1" methods).
CONTENT_METHODS: frozenset[type] = frozenset(
    {commands.Basic.Publish, commands.Basic.Return, commands.Basic.Deliver, commands.Basic.GetOk}
)


_EXPECT_METHOD, _EXPECT_HEADER, _EXPECT_BODY = 0, 1, 2


class CommandAssembler:
    """One channel's method → content header → body state machine.

    `feed(frame)` takes a pamqp method instance, a ContentHeader or bytes (body frame) and
    returns a Command when one is complete, else None. Errors (texts as RabbitMQ 3.10 sends):
    UnexpectedFrame 505 for a frame of the wrong kind, a header of another class, or body
    bytes beyond body_size; PreconditionFailed 406 (soft) when body_size > max_message_size,
    "message size N is larger than configured max size M". After any error the assembler is
    back in its initial state (as `reset()`), so a channel being closed can keep discarding.
    """

    __slots__ = ("max_message_size", "_state", "_method", "_header", "_parts", "_remaining")

    def __init__(self, max_message_size: int = 134217728) -> None:
        self.max_message_size = max_message_size  # RabbitMQ max_message_size (bytes)
        self._state = _EXPECT_METHOD  # what the next frame must be
        self._method: Any = None  # content method waiting for its header/body
        self._header: ContentHeader | None = None  # its header, once received
        self._parts: list[bytes] = []  # body frames so far
        self._remaining = 0  # body bytes still expected

    def reset(self) -> None:
        """Drop any partial command; expect a method next."""
        self._state = _EXPECT_METHOD
        self._method = None
        self._header = None
        self._parts = []
        self._remaining = 0

    @property
    def idle(self) -> bool:
        """True when no command is partially assembled."""
        return self._state == _EXPECT_METHOD

    def _fail(self, cls: type, text: str) -> Exception:
        exc = amqp_error(cls, text, self._method)
        self.reset()
        return exc

    def feed(self, frame: Any) -> Command | None:
        """Feed one frame of this channel; return the completed Command or None."""
        state = self._state
        if state == _EXPECT_BODY:
            if type(frame) is not bytes:
                raise self._fail(
                    UnexpectedFrame, "expected content body, got non content body frame instead"
                )
            remaining = self._remaining - len(frame)
            if remaining < 0:
                # RabbitMQ 3.10 keeps waiting forever here; we fail the connection instead.
                raise self._fail(
                    UnexpectedFrame,
                    f"expected content body of {self._remaining} more bytes, "
                    f"got {len(frame)} bytes instead",
                )
            self._parts.append(frame)
            if remaining:
                self._remaining = remaining
                return None
            parts = self._parts
            body = parts[0] if len(parts) == 1 else b"".join(parts)
            command = Command(self._method, self._header, body)
            self.reset()
            return command
        if state == _EXPECT_HEADER:
            if type(frame) is not ContentHeader:
                raise self._fail(
                    UnexpectedFrame,
                    f"expected content header for class {self._method.index >> 16}, "
                    "got non content header frame instead",
                )
            if frame.class_id != self._method.index >> 16:
                raise self._fail(
                    UnexpectedFrame,
                    f"expected content header for class {self._method.index >> 16}, "
                    f"got one for class {frame.class_id} instead",
                )
            if frame.body_size > self.max_message_size:
                raise self._fail(
                    PreconditionFailed,
                    f"message size {frame.body_size} is larger than configured max size "
                    f"{self.max_message_size}",
                )
            if frame.body_size == 0:
                command = Command(self._method, frame, b"")
                self.reset()
                return command
            self._header = frame
            self._remaining = frame.body_size
            self._state = _EXPECT_BODY
            return None
        if type(frame) is bytes or type(frame) is ContentHeader:
            raise self._fail(UnexpectedFrame, "expected method frame, got non method frame instead")
        if type(frame) in CONTENT_METHODS:
            self._method = frame
            self._state = _EXPECT_HEADER
            return None
        return Command(frame, None, None)
