# Owns: the headers exchange's bindings grouped by argument table, the x-match rules and the
# AMQP field-value comparison RabbitMQ applies to them.
# Talked to by: the vhost (validate_binding, bindings) and broker/exchange/router.py (route).
# Must never: do I/O, await, or treat AMQP bool as integer (RabbitMQ keeps true != 1).
"""Headers exchange: a message goes to a binding whose argument table matches its headers.

Rules (rabbit_exchange_type_headers.erl in RabbitMQ 3.10, each verified against a live
RabbitMQ 3.10 with pika):
- `x-match` is "all" (default when absent), "any", "all-with-x" or "any-with-x"; anything
  else is refused with 406 PRECONDITION_FAILED "Invalid x-match field value <<"foo">>; ..."
  or, for a non-string, "Invalid x-match field type signedint (value 1); expected longstr".
- "all"/"any" ignore binding arguments whose key starts with "x-"; the -with-x variants
  compare them too. The `x-match` argument itself is never compared.
- "all" with nothing left to compare matches every message (even one without headers);
  "any" with nothing left matches none.
- A binding argument whose value is void (None) matches on the header's presence alone.
- Values compare as Erlang's `==` on the decoded fields: numbers by value whatever their
  width (1 as short == 1 as long), longstr == byte array with the same bytes ("1" == b"1"),
  bool never equals a number (true != 1), decimals by (scale, digits), a void header equals
  no valued argument.
Source: https://www.rabbitmq.com/tutorials/amqp-concepts.html#exchange-headers.
"""

from __future__ import annotations

import calendar
import datetime
import decimal
from collections.abc import Hashable
from typing import Any

from broker.errors import PreconditionFailed, amqp_error
from broker.exchange.base import BindingTable, count_down, count_up

X_MATCH_MODES = ("all", "any", "all-with-x", "any-with-x")
_VOID = object()  # pattern value meaning "header present, any value"


def _erlang_type(value: Any) -> str:
    """Name RabbitMQ gives the wire type pika would use for `value` (error texts only)."""
    if value is None:
        return "void"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint" if -(2**31) <= value < 2**31 else "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, bytes | bytearray):
        return "binary"
    if isinstance(value, decimal.Decimal):
        return "decimal"
    if isinstance(value, datetime.datetime):
        return "timestamp"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list | tuple):
        return "array"
    return "longstr"


def _erlang_repr(value: Any) -> str:
    """Erlang `~p` rendering of a decoded field value, close enough for error texts."""
    if value is None:
        return "undefined"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | bytes | bytearray):
        raw = value.encode() if isinstance(value, str) else bytes(value)
        if not raw:
            return "<<>>"
        if any(b < 32 or 127 <= b < 160 for b in raw):  # not printable: a byte list
            return "<<" + ",".join(map(str, raw)) + ">>"
        text = raw.decode("latin-1").replace("\\", "\\\\").replace('"', '\\"')
        return f'<<"{text}">>'
    return repr(value)


def norm_value(value: Any) -> Hashable:
    """Image of a decoded AMQP field value under which Python `==` is Erlang's `==`.

    str and bytes both become bytes (RabbitMQ keeps both as binaries), bool is tagged so it
    never equals 1, Decimal becomes its (sign, digits, exponent) tuple, a datetime its
    integer seconds (the timestamp type), tables and arrays are normalised recursively.
    """
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float) or value is None:
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, decimal.Decimal):
        return ("decimal", value.as_tuple())
    if isinstance(value, datetime.datetime):
        return calendar.timegm(value.utctimetuple())
    if isinstance(value, dict):
        return ("table", tuple(sorted((k, norm_value(v)) for k, v in value.items())))
    if isinstance(value, list | tuple):
        return ("array", tuple(norm_value(v) for v in value))
    return value


class _Matcher:
    """Compiled argument table of one or more bindings: mode and (key, value) pairs."""

    __slots__ = ("match_all", "pattern", "dests")

    def __init__(self, arguments: dict) -> None:
        mode = arguments.get("x-match", "all")
        if mode not in X_MATCH_MODES:  # legacy unvalidated binding: RabbitMQ falls back
            mode = "all"
        with_x = mode.endswith("-with-x")
        self.match_all = mode.startswith("all")  # True: every pair must match
        # (header key, normalised value or _VOID) to compare, x-match itself excluded.
        self.pattern = tuple(
            (k, _VOID if v is None else norm_value(v))
            for k, v in sorted(arguments.items())
            if k != "x-match" and (with_x or not k.startswith("x-"))
        )
        # destinations bound with exactly this argument table -> binding count.
        self.dests: dict[Hashable, int] = {}

    def matches(self, headers: dict) -> bool:
        """True if the message headers, as `{key: norm_value(value)}`, satisfy this table
        under its x-match mode."""
        if self.match_all:
            for key, want in self.pattern:
                if key not in headers:
                    return False
                if want is not _VOID and headers[key] != want:
                    return False
            return True
        for key, want in self.pattern:
            if key in headers and (want is _VOID or headers[key] == want):
                return True
        return False


class HeadersRouting(BindingTable):
    """Routing table of a headers exchange.

    `route(routing_key, headers)` returns a set of destinations (routing key ignored); cost is
    one match per distinct binding argument table.
    """

    __slots__ = ("_matchers",)
    reads_headers = True  # Routing protocol attribute

    def __init__(self) -> None:
        super().__init__()
        # frozen argument table -> its compiled matcher and the destinations bound with it.
        self._matchers: dict[Hashable, _Matcher] = {}

    def validate_binding(self, routing_key: str, arguments: dict) -> None:
        """Check `x-match`. Raises 406 PRECONDITION_FAILED with RabbitMQ's text for a value
        that is not one of the four modes, or not a string (rabbit_exchange_type_headers
        `validate_binding`)."""
        if not arguments or "x-match" not in arguments:
            return
        value = arguments["x-match"]
        if isinstance(value, str):
            if value in X_MATCH_MODES:
                return
            raise amqp_error(
                PreconditionFailed,
                f"Invalid x-match field value {_erlang_repr(value)}; "
                "expected all, any, all-with-x, or any-with-x",
            )
        raise amqp_error(
            PreconditionFailed,
            f"Invalid x-match field type {_erlang_type(value)} "
            f"(value {_erlang_repr(value)}); expected longstr",
        )

    def route(self, routing_key: str, headers: dict | None = None,
              message: object = None) -> set[Hashable]:
        """Destinations of every binding whose arguments match `headers` (None = {})."""
        # normalised once per message, not once per binding (bench/micro/routing.py: 4x)
        data = {k: norm_value(v) for k, v in headers.items()} if headers else {}
        out: set[Hashable] = set()
        for matcher in self._matchers.values():
            if matcher.matches(data):
                out.update(matcher.dests)
        return out

    def _index_add(
        self, destination: Hashable, routing_key: str, frozen: Hashable, arguments: dict
    ) -> None:
        matcher = self._matchers.get(frozen)
        if matcher is None:
            matcher = self._matchers[frozen] = _Matcher(arguments)
        count_up(matcher.dests, destination)

    def _index_remove(self, destination: Hashable, routing_key: str, frozen: Hashable) -> None:
        matcher = self._matchers[frozen]
        count_down(matcher.dests, destination)
        if not matcher.dests:
            del self._matchers[frozen]
