"""Request-body fields parsed as RabbitMQ's management plugin parses them.

rabbitmqadmin and other tools send booleans as strings (`"durable": "true"`,
`"auto_delete": "false"`) and counts as strings (`"count": "5"`). RabbitMQ 3.10.8 reads
them with `rabbit_misc:parse_bool/1` and `parse_int/1` (rabbit_mgmt_format
`format_accept_content`, rabbit_mgmt_wm_queue_get) and turns `arguments` into an AMQP table
with `rabbit_misc:to_amqp_table/1`; anything else is a 400 whose reason is the Erlang
error term as JSON (`["not_boolean", "yes"]`, `["not_integer", "x"]`,
`"null_not_allowed"`). Taking Python's truthiness instead once made every queue declared
with rabbitmqadmin's defaults auto-delete (issue 24): these functions are the one place
the API reads such fields.

Pure: no I/O; errors are raised as the aiohttp 400 of broker/management/http.py.
"""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web

from broker.management.http import JSON

_INTEGER = re.compile(r"[+-]?[0-9]+")  # what erlang:list_to_integer/1 takes


def _bad(reason: Any) -> web.HTTPException:
    """400 {"error": "bad_request", "reason": reason} with a JSON (not only string)
    reason, as rabbit_mgmt_util:halt_response formats a tuple."""
    return web.HTTPBadRequest(text=json.dumps({"error": "bad_request", "reason": reason}),
                              content_type=JSON)


def to_bool(value: Any, default: bool) -> bool:
    """`value` as RabbitMQ's parse_bool reads it: true, false, "true", "false"; `default`
    for None. ValueError for anything else (1, "yes", "True" included: RabbitMQ 3.10.8
    refuses them, checked)."""
    if value is None:
        return default
    if value is True or value == "true":
        return True
    if value is False or value == "false":
        return False
    raise ValueError(f"not_boolean: {value!r}")


def parse_bool(data: dict[str, Any], key: str, default: bool) -> bool:
    """`data[key]` read by `to_bool`, `default` when the key is absent; 400
    `["not_boolean", value]` when it is not a boolean (an explicit null included, as
    RabbitMQ 3.10.8)."""
    if key not in data:
        return default
    value = data[key]
    if value is None:
        raise _bad(["not_boolean", None])
    try:
        return to_bool(value, default)
    except ValueError:
        raise _bad(["not_boolean", value]) from None


def parse_int(value: Any) -> int:
    """A count as RabbitMQ's parse_int reads it: an integer, a number (truncated) or a
    string of decimal digits. 400 `["not_integer", value]` otherwise."""
    if isinstance(value, bool):
        raise _bad(["not_integer", value])
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        return int(value)
    raise _bad(["not_integer", value])


def amqp_arguments(value: Any) -> dict[str, Any]:
    """`arguments` as an AMQP table (rabbit_misc:to_amqp_table): an object, or an empty
    list / absent / null for none. Values keep their JSON types (string → longstr,
    integer → long, number → double, boolean → bool, array → array, object → table);
    a null anywhere inside is 400 "null_not_allowed", anything but an object 400."""
    if value is None or value == []:
        return {}
    if not isinstance(value, dict):
        raise _bad("arguments must be an object")
    _no_null(value)
    return value


def _no_null(value: Any) -> None:
    if value is None:
        raise _bad("null_not_allowed")
    if isinstance(value, dict):
        for item in value.values():
            _no_null(item)
    elif isinstance(value, list):
        for item in value:
            _no_null(item)
