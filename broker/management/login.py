# broker/management/login.py — POST /api/login, the form login of RabbitMQ's management UI.
#
# Owns: the one route; checking the form's credentials goes through auth.authenticate.
# Talks to: broker.management.auth (the same check, failed-attempt count and tags as Basic).
# Must never: accept a login that Basic authentication with the same credentials would refuse.
"""POST /api/login (rabbit_mgmt_wm_login, RabbitMQ 3.10.8).

A form (`application/x-www-form-urlencoded`) with `username` and `password`. When they
would pass Basic authentication for the API (right password, a management tag), the answer
is 200 with the JSON string "ok" and the cookie `auth` = base64("username:password"), the
value RabbitMQ sets for its UI; otherwise RabbitMQ's 401 ("Login failed", or "Not management
user"). Only POST (and OPTIONS) are allowed. Checked against RabbitMQ 3.10.8 with curl.
"""

from __future__ import annotations

import base64

from aiohttp import web

from broker.management.auth import authenticate
from broker.management.context import broker
from broker.management.http import reply

routes = web.RouteTableDef()

PATH = "/api/login"


@routes.post(PATH)
async def login(request: web.Request) -> web.Response:
    form = await request.post()
    user = str(form.get("username", ""))
    password = str(form.get("password", ""))
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    authenticate(broker(request), f"Basic {token}")  # 401 as for the API's Basic auth
    resp = reply("ok")
    # as RabbitMQ writes it (cowboy): the base64 unquoted; http.cookies would quote the "="
    resp.headers.add("Set-Cookie", f"auth={token}; Version=1")
    return resp
