"""HTTP helpers shared by the API modules: JSON replies and RabbitMQ's error bodies, path
parameters, request bodies, and the list endpoints' query parameters (`sort`,
`sort_reverse`, `columns`, `page`, `page_size`, `name`, `use_regex`).

Errors (RabbitMQ's shapes): 400 `{"error": "bad_request", "reason": ...}`, 401
`{"error": "not_authorised", "reason": ...}`, 404 `{"error": "Object Not Found",
"reason": "Not Found"}`; raised as aiohttp HTTP exceptions with those JSON bodies.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from aiohttp import web

from broker import errors

JSON = "application/json"


def reply(data: Any, status: int = 200) -> web.Response:
    """`data` as a JSON response (RabbitMQ answers every API call with JSON)."""
    return web.Response(text=json.dumps(data, default=_default), status=status,
                        content_type=JSON)


def _default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def _error(cls: type[web.HTTPException], error: str, reason: str,
           headers: dict | None = None) -> web.HTTPException:
    return cls(text=json.dumps({"error": error, "reason": reason}), content_type=JSON,
               headers=headers)


def not_found() -> web.HTTPException:
    """404 as RabbitMQ: {"error": "Object Not Found", "reason": "Not Found"}."""
    return _error(web.HTTPNotFound, "Object Not Found", "Not Found")


def bad_request(reason: str, error: str = "bad_request") -> web.HTTPException:
    """400 {"error": error, "reason": reason} (`error` is "bad_request" but for a bad sample
    range on /api/queues, /api/exchanges, /api/vhosts lists: "invalid_range_parameters")."""
    return _error(web.HTTPBadRequest, error, reason)


def not_authorised(reason: str, challenge: bool = False) -> web.HTTPException:
    """401 {"error": "not_authorized", "reason": reason} (RabbitMQ 3.10 spells it with a
    z); with `challenge` the WWW-Authenticate header that makes a browser ask for a
    login."""
    headers = {"WWW-Authenticate": 'Basic realm="RabbitMQ Management"'} if challenge else None
    return _error(web.HTTPUnauthorized, "not_authorized", reason, headers)


def conflict(reason: str) -> web.HTTPException:
    """409 with RabbitMQ's error body shape."""
    return _error(web.HTTPConflict, "conflict", reason)


def no_content() -> web.Response:
    """204, the answer to a successful PUT of an existing object or a DELETE."""
    return web.Response(status=204)


def created() -> web.Response:
    """201, the answer to a PUT that created an object."""
    return web.Response(status=201)


def param(request: web.Request, name: str) -> str:
    """Path parameter `name`, percent-decoded once, as RabbitMQ's router decodes a segment
    (vhost "/" arrives as %2F; a queue named "q%7C1" as q%257C1). aiohttp 3.14 already
    decodes each matched segment once; decoding again turned "q%7C1" into "q|1" (found by
    rabbit-hole's binding spec)."""
    return request.match_info[name]


async def body(request: web.Request) -> dict[str, Any]:
    """The JSON object in the request body ({} when empty). 400 "not_json" if it is not
    JSON or not an object (RabbitMQ 3.10.8's reason for both, checked)."""
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        raise bad_request("not_json") from None
    if not isinstance(data, dict):
        raise bad_request("not_json")
    return data


def get_path(item: dict, dotted: str) -> Any:
    """item["a"]["b"] for "a.b" (None where missing)."""
    value: Any = item
    for part in dotted.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _sort_key(value: Any) -> tuple:
    if value is None:
        return (0, 0)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (1, value)
    return (2, str(value))


def _pick_columns(item: dict, columns: list[str]) -> dict:
    out: dict[str, Any] = {}
    for col in columns:
        parts = col.split(".")
        value = get_path(item, col)
        if value is None and not _has_path(item, parts):
            continue
        target = out
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        target[parts[-1]] = value
    return out


def _has_path(item: dict, parts: list[str]) -> bool:
    value: Any = item
    for part in parts:
        if not isinstance(value, dict) or part not in value:
            return False
        value = value[part]
    return True


def list_reply(request: web.Request, items: Iterable[dict],
               name_of: Callable[[dict], str] = lambda i: str(i.get("name", ""))) -> web.Response:
    """A list endpoint's answer with RabbitMQ's query parameters: `name` (+ `use_regex`)
    filters, `sort` (a dotted field) and `sort_reverse` order, `columns` keeps only the
    given dotted fields, and `page` / `page_size` (default 100, max 500) wrap the items in
    {filtered_count, item_count, items, page, page_count, page_size, total_count}.
    400 for a bad page, page size or regex."""
    q = request.query
    rows = list(items)
    total = len(rows)
    name = q.get("name")
    if name:
        if q.get("use_regex", "false").lower() == "true":
            try:
                pattern = re.compile(name)
            except re.error as exc:
                raise bad_request(f"invalid regex: {exc}") from None
            rows = [r for r in rows if pattern.search(name_of(r))]
        else:
            rows = [r for r in rows if name.lower() in name_of(r).lower()]
    sort = q.get("sort")
    if sort:
        rows.sort(key=lambda r: _sort_key(get_path(r, sort)))
    if q.get("sort_reverse", "false").lower() == "true":
        rows.reverse()
    columns = [c for c in q.get("columns", "").split(",") if c]
    if "page" not in q:
        if columns:
            rows = [_pick_columns(r, columns) for r in rows]
        return reply(rows)
    try:
        page = int(q["page"])
        size = int(q.get("page_size", "100"))
    except ValueError:
        raise bad_request("page and page_size must be integers") from None
    if page < 1 or not 1 <= size <= 500:
        raise bad_request("page must be >= 1 and page_size 1..500")
    filtered = len(rows)
    pages = max(1, math.ceil(filtered / size))
    if page > pages and filtered:
        raise bad_request("page out of range")
    chunk = rows[(page - 1) * size: page * size]
    if columns:
        chunk = [_pick_columns(r, columns) for r in chunk]
    return reply({"filtered_count": filtered, "item_count": len(chunk), "items": chunk,
                  "page": page, "page_count": pages, "page_size": size,
                  "total_count": total})


@contextmanager
def amqp_errors() -> Iterator[None]:
    """Turn an AMQP error raised by a vhost call into RabbitMQ's HTTP answer: 404 for
    NOT_FOUND, 401 for ACCESS_REFUSED, 400 (reason = the AMQP text) for the rest."""
    try:
        yield
    except errors.AMQPError as exc:
        code = getattr(exc, "reply_code", 541)
        if code == 404:
            raise not_found() from None
        if code == 403:
            raise not_authorised(str(exc)) from None
        raise bad_request(str(exc)) from None
