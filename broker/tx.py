"""A tx channel's uncommitted work (AMQP 0-9-1 §1.9 tx).

Owns: the `TxState` record a channel keeps between tx.select and tx.commit/rollback. Used by the
channel process (`broker/channel.py`) and the tx handlers (`broker/channel_basic.py`); it holds
data only and never touches queues or sockets.
"""

from __future__ import annotations

from typing import Any

from broker.message import Message


class TxState:
    """Uncommitted work of a tx channel (AMQP 0-9-1 §1.9 tx): publishes and settlements."""

    __slots__ = ("publishes", "settles")

    def __init__(self) -> None:
        self.publishes: list[tuple[Any, Message]] = []  # (basic.publish method, message)
        self.settles: list[tuple[int, dict[int, tuple]]] = []  # (kind, {delivery_tag: entry})
