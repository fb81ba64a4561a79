"""The channel's dispatch table: AMQP method class → handler, and the publish paths.

Owns: joining the handler modules into one `Handlers` value (dispatch by dict, STYLE "Files
and names"): `channel_basic.py` (basic.*, confirm.*, tx.*, channel.*) and
`channel_entities.py` (exchange.*, queue.*). The reader hands `HANDLERS` to every channel it
opens (`ChannelProcess(conn, number, HANDLERS)`), so the channel loop never imports its
handlers, which import it (no import circle, STYLE §9). Tests that inject a failing handler
patch `HANDLERS.methods`. Must never: hold a handler of its own.
"""

from __future__ import annotations

from broker.channel import Handlers
from broker.channel_basic import BASIC_HANDLERS, publish, publish_alike
from broker.channel_entities import ENTITY_HANDLERS

HANDLERS = Handlers(methods={**BASIC_HANDLERS, **ENTITY_HANDLERS}, publish=publish,
                    publish_alike=publish_alike)
