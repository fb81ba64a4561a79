# Owns: the connection handshake state machine (start → start-ok → tune → tune-ok → open →
# open-ok), SASL credential checks through callbacks, and tune negotiation.
# Talks to: the connection reader, which calls start() after a good protocol header, passes
# every channel-0 method to receive() until `is_open`, and sends back what they return.
# Must never: do I/O, sleep, know the peer address (the reader's callbacks do), or handle
# connection.close / heartbeats after OPEN (the reader does).
"""AMQP 0-9-1 connection handshake as a state table (AMQP 0-9-1 §2.2.4, rabbit_reader.erl)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

from pamqp import commands

from broker.errors import (
    AccessRefused,
    AMQPError,
    ChannelError,
    CommandInvalid,
    NotAllowed,
    amqp_error,
)
from broker.protocol.encoding import FRAME_MIN_SIZE
from broker.protocol.sasl import parse_response

C = commands.Connection

# RabbitMQ closes the socket without connection.close when the handshake fails before
# connection.open, after this delay (rabbit_reader ?SILENT_CLOSE_DELAY, seconds).
SILENT_CLOSE_DELAY = 3
CHANNEL_MIN = 1  # rabbit_reader ?CHANNEL_MIN


class State(enum.Enum):
    """Connection states, named as rabbit_reader's connection_state."""

    INIT = "init"  # protocol header not accepted yet; start() not called
    STARTING = "starting"  # connection.start sent, waiting for start-ok
    TUNING = "tuning"  # connection.tune sent, waiting for tune-ok
    OPENING = "opening"  # tune-ok received, waiting for connection.open
    OPEN = "running"  # open-ok sent; the reader takes over channel 0
    CLOSING = "closing"  # connection.close sent or received, waiting for close-ok
    CLOSED = "closed"  # socket to be / being closed


class ConnectionHandshake:
    """The handshake of one connection; methods in, methods to send out.

    `authenticate(mechanism, username, password) -> bool` and
    `vhost_allowed(username, vhost) -> bool` (which may raise an AMQP error of its own, e.g.
    a connection limit's 530, re-raised with connection.open's ids) come from the reader (it knows the peer address
    for the "guest only from loopback" rule); `vhost_exists(vhost) -> bool`, when given, lets
    an unknown vhost get RabbitMQ's "vhost X not found" text instead of "access refused".
    `external_identity` is the user name the client certificate gives (EXTERNAL); with
    EXTERNAL, `authenticate` is called with that name and an empty password.

    Errors raised by receive() are AMQP hard errors (plus AccessRefused 403 for a failed
    login, which here closes the connection, not a channel) carrying `silent_close: bool`. True means RabbitMQ would not send
    connection.close: wait SILENT_CLOSE_DELAY seconds and close the socket (failures while
    starting/tuning, and failed logins by clients without the `authentication_failure_close`
    capability). False means send connection.close with `broker.errors.close_args(exc)`.
    """

    def __init__(
        self,
        server_properties: dict[str, Any],
        authenticate: Callable[[str, str, str], bool],
        vhost_allowed: Callable[[str, str], bool],
        channel_max: int = 2047,
        frame_max: int = 131072,
        heartbeat: int = 60,
        mechanisms: tuple[str, ...] = ("AMQPLAIN", "PLAIN"),  # RabbitMQ 3.10 sends this order
        vhost_exists: Callable[[str], bool] | None = None,
        external_identity: str | None = None,
    ) -> None:
        self.server_properties = server_properties  # sent in connection.start
        self._authenticate = authenticate  # reader's credential check
        self._vhost_allowed = vhost_allowed  # reader's permission check
        self._vhost_exists = vhost_exists  # optional, for RabbitMQ's "not found" text
        self.mechanisms = mechanisms  # offered SASL mechanisms, in preference order
        self.external_identity = external_identity  # EXTERNAL's user name (client cert)
        self.state = State.INIT  # see State
        self.channel_max = channel_max  # server limit until tune-ok, then negotiated
        self.frame_max = frame_max  # server limit until tune-ok, then negotiated (bytes)
        self.heartbeat = heartbeat  # server proposal until tune-ok, then negotiated (s)
        self.client_properties: dict[str, Any] = {}  # from start-ok; capabilities live here
        self.mechanism = ""  # SASL mechanism the client chose
        self.username = ""  # authenticated user, once start-ok succeeded
        self.vhost = ""  # opened vhost, once OPEN

    # -- helpers for the reader --------------------------------------------------------

    @property
    def is_open(self) -> bool:
        """True once open-ok has been sent."""
        return self.state is State.OPEN

    def capability(self, name: str) -> bool:
        """Whether the client announced capability `name` (e.g. "connection.blocked",
        "consumer_cancel_notify", "authentication_failure_close") in start-ok."""
        caps = self.client_properties.get("capabilities")
        return isinstance(caps, dict) and caps.get(name) is True

    def closing(self) -> None:
        """Record that connection.close was sent or received."""
        self.state = State.CLOSING

    def closed(self) -> None:
        """Record that the connection is finished."""
        self.state = State.CLOSED

    # -- the state table ---------------------------------------------------------------

    def start(self) -> list[Any]:
        """Methods to send after an accepted protocol header: [connection.start]."""
        if self.state is not State.INIT:
            raise self._error(ChannelError, "connection.start already sent", None, silent=True)
        self.state = State.STARTING
        return [
            C.Start(
                version_major=0,
                version_minor=9,
                server_properties=self.server_properties,
                mechanisms=" ".join(self.mechanisms),
                locales="en_US",
            )
        ]

    def receive(self, method: Any) -> list[Any]:
        """Handle one channel-0 method during the handshake; return methods to send.

        Raises (see class docstring for `silent_close`): ChannelError 504 "unexpected method
        in connection state <state>" for a method out of order; CommandInvalid 503 for an
        unknown SASL mechanism; AccessRefused 403 for failed login; NotAllowed 530 for
        tune-ok values out of range or a vhost that is unknown or not permitted.
        """
        handler = _TRANSITIONS.get((self.state, type(method)))
        if handler is None:
            raise self._error(
                ChannelError,
                f"unexpected method in connection state {self.state.value}",
                method,
                silent=self.state in (State.INIT, State.STARTING, State.TUNING),
            )
        return handler(self, method)

    def _error(self, cls: type, text: str, method: Any, silent: bool) -> AMQPError:
        exc = amqp_error(cls, text, method)
        exc.silent_close = silent  # type: ignore[attr-defined]
        return exc

    def _on_start_ok(self, method: Any) -> list[Any]:
        self.client_properties = dict(method.client_properties or {})
        mechanism = method.mechanism
        self.mechanism = mechanism
        if mechanism not in self.mechanisms:
            raise self._error(
                CommandInvalid,
                f"unknown authentication mechanism '{mechanism}'",
                None,
                silent=True,
            )
        refused = (
            f"Login was refused using authentication mechanism {mechanism}. "
            "For details see the broker logfile."
        )
        silent = not self.capability("authentication_failure_close")
        try:
            username, password = parse_response(mechanism, method.response or b"")
        except AMQPError as err:
            raise self._error(AccessRefused, refused, None, silent=silent) from err
        if mechanism == "EXTERNAL":  # rabbit_auth_mechanism_ssl: the certificate names the user
            if not self.external_identity:
                raise self._error(AccessRefused, refused, None, silent=silent)
            username = self.external_identity
        if not self._authenticate(mechanism, username, password):
            raise self._error(AccessRefused, refused, None, silent=silent)
        self.username = username
        self.state = State.TUNING
        return [
            C.Tune(channel_max=self.channel_max, frame_max=self.frame_max, heartbeat=self.heartbeat)
        ]

    def _negotiate(self, field: str, minimum: int, server: int, client: int, method: Any) -> int:
        # rabbit_reader:validate_negotiated_integer_value/3 and fail_negotiation/4
        if client != 0 and client < minimum:
            raise self._error(
                NotAllowed,
                f"negotiated {field} = {client} is lower than the minimum allowed value "
                f"({minimum})",
                method,
                silent=True,
            )
        if server != 0 and (client == 0 or client > server):
            detail = " (no limit)" if client == 0 and field == "channel_max" else ""
            raise self._error(
                NotAllowed,
                f"negotiated {field} = {client}{detail} is higher than the maximum allowed "
                f"value ({server})",
                method,
                silent=True,
            )
        return client

    def _on_tune_ok(self, method: Any) -> list[Any]:
        self.frame_max = self._negotiate(
            "frame_max", FRAME_MIN_SIZE, self.frame_max, method.frame_max, method
        )
        self.channel_max = self._negotiate(
            "channel_max", CHANNEL_MIN, self.channel_max, method.channel_max, method
        )
        self.heartbeat = method.heartbeat  # RabbitMQ takes the client's value as is
        self.state = State.OPENING
        return []

    def _on_open(self, method: Any) -> list[Any]:
        vhost = method.virtual_host
        if self._vhost_exists is not None and not self._vhost_exists(vhost):
            raise self._error(NotAllowed, f"vhost {vhost} not found", method, silent=False)
        try:
            allowed = self._vhost_allowed(self.username, vhost)
        except AMQPError as err:  # a limit refused the connection (530 with its own text)
            raise self._error(type(err), str(err), method, silent=False) from err
        if not allowed:
            raise self._error(
                NotAllowed,
                f"access to vhost '{vhost}' refused for user '{self.username}'",
                method,
                silent=False,
            )
        self.vhost = vhost
        self.state = State.OPEN
        return [C.OpenOk()]


_TRANSITIONS: dict[tuple[State, type], Callable[[ConnectionHandshake, Any], list[Any]]] = {
    (State.STARTING, C.StartOk): ConnectionHandshake._on_start_ok,
    (State.TUNING, C.TuneOk): ConnectionHandshake._on_tune_ok,
    (State.OPENING, C.Open): ConnectionHandshake._on_open,
}
