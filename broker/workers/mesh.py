"""The links of one worker process to its peers, with record dispatch and requests
(issue 47, docs/multicore.md "Links between workers").

Owns: `Mesh`: one `Link` per peer (the other workers, and the node process's control link
under index `NODE`), `send(peer, record)`, dispatch of received records to the handler
registered for their kind, and request/reply: `request(peer, kind, payload, on_reply)` sends
`("req", id, kind, payload)`; the receiving handler answers with `reply(value)` or
`fail(error)`, now or later; `on_reply(ok, value)` runs when the answer comes, in order with
every other record from that peer. AMQP errors cross as `(code, text, class_id, method_id)`
and are rebuilt (`error_from_wire`). Talks to: the worker's runtime, which registers
handlers. Must never: interpret a record's payload.

A record is a tuple whose first item is its kind (a short string). What one peer sends
another arrives in the order sent (one ordered link per pair).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Any

from broker import errors
from broker.workers.link import Link

log = logging.getLogger("broker.workers")

NODE = -1  # the node process's index in a worker's mesh
REQ, REP = "req", "rep"

Handler = Callable[[int, tuple], None]  # (peer, record)
RequestHandler = Callable[[int, Any, "Answer"], None]  # (peer, payload, answer)
OnReply = Callable[[bool, Any], None]  # (ok, value or AMQP error)

_ERRORS_BY_CODE: dict[int, type[errors.AMQPError]] = {cls.value: cls for cls in (  # type: ignore[attr-defined]
    errors.AccessRefused, errors.NotFound, errors.ResourceLocked, errors.PreconditionFailed,
    errors.ConnectionForced, errors.InvalidPath, errors.FrameError, errors.SyntaxError_,
    errors.CommandInvalid, errors.ChannelError, errors.UnexpectedFrame, errors.ResourceError,
    errors.NotAllowed, errors.NotImplemented_, errors.InternalError)}


def error_to_wire(exc: errors.AMQPError) -> tuple[int, str, int, int]:
    return errors.close_args(exc)


def error_from_wire(wire: tuple[int, str, int, int]) -> errors.AMQPError:
    """The AMQP error another worker raised, as `errors.amqp_error` makes them."""
    code, text, class_id, method_id = wire
    cls = _ERRORS_BY_CODE.get(code, errors.InternalError)
    exc = cls(text)
    exc.reply_code = code  # type: ignore[attr-defined]
    exc.reply_text = text  # type: ignore[attr-defined]
    exc.class_id, exc.method_id = class_id, method_id  # type: ignore[attr-defined]
    return exc


class Answer:
    """How a request handler answers: `reply(value)` or `fail(amqp_error)`, once."""

    __slots__ = ("_mesh", "_peer", "_id", "done")

    def __init__(self, mesh: Mesh, peer: int, req_id: int) -> None:
        self._mesh = mesh
        self._peer = peer
        self._id = req_id
        self.done = False

    def reply(self, value: Any = None) -> None:
        if not self.done:
            self.done = True
            self._mesh.send(self._peer, (REP, self._id, True, value))

    def fail(self, exc: errors.AMQPError) -> None:
        if not self.done:
            self.done = True
            self._mesh.send(self._peer, (REP, self._id, False, error_to_wire(exc)))


class Mesh:
    """Worker `index`'s links. `links` maps peer index (NODE for the node process) to its
    Link, once each link is open; `on_peer_lost(peer)` is told when one closes."""

    def __init__(self, index: int) -> None:
        self.index = index  # this worker
        self.links: dict[int, Link] = {}  # peer -> link
        self._handlers: dict[str, Handler] = {}  # record kind -> handler
        self._requests: dict[str, RequestHandler] = {}  # request kind -> handler
        self._waiting: dict[int, tuple[int, OnReply]] = {}  # request id -> (peer, callback)
        self._ids = itertools.count(1)
        self.on_peer_lost: Callable[[int], None] = lambda peer: None
        self.on_peer_back: Callable[[int], None] = lambda peer: None

    # -- wiring ----------------------------------------------------------------------------
    def link_for(self, peer: int) -> Link:
        """A Link (not yet opened) whose batches and loss come to this mesh as `peer`'s
        (the loss of a link that a newer one for the same peer replaced is ignored)."""
        holder: list[Link] = []
        link = Link(lambda items: self._received(peer, items),
                    lambda exc: self._lost(peer, holder[0]))
        holder.append(link)
        return link

    def opened(self, peer: int, link: Link) -> None:
        """`link` (from `link_for(peer)`, open) carries `peer`'s records from now on (a
        restarted worker's new link replaces the dead one's); `on_peer_back` is told."""
        replaced = peer in self.links
        self.links[peer] = link
        if replaced:
            self.on_peer_back(peer)

    def on(self, kind: str, handler: Handler) -> None:
        """Records of `kind` go to `handler(peer, record)`."""
        self._handlers[kind] = handler

    def on_request(self, kind: str, handler: RequestHandler) -> None:
        """Requests of `kind` go to `handler(peer, payload, answer)`."""
        self._requests[kind] = handler

    # -- sending -----------------------------------------------------------------------------
    def send(self, peer: int, record: tuple) -> None:
        """Send `record` to `peer` (dropped when its link is gone: the peer died, and the
        runtime handles that through `on_peer_lost`)."""
        link = self.links.get(peer)
        if link is not None and not link.closed:
            link.send(record)

    def send_grouped(self, peer: int, head: tuple, item: Any) -> None:
        """Send `item` to `peer` as part of the record `(*head, [items])`: added to the last
        record queued for `peer` this loop turn when that one has an equal head, else a new
        record. One record per run of items (a queue's deliveries to one channel in one
        turn) costs one dispatch at the other end instead of one per item, in order."""
        link = self.links.get(peer)
        if link is None or link.closed:
            return
        last = link.last_queued()
        if last is not None and len(last) == len(head) + 1 and last[:-1] == head:
            last[-1].append(item)
        else:
            link.send((*head, [item]))

    def request(self, peer: int, kind: str, payload: Any, on_reply: OnReply) -> None:
        """Ask `peer`; `on_reply(ok, value)` runs with the answer, or with (False,
        InternalError) if the peer dies first."""
        req_id = next(self._ids)
        self._waiting[req_id] = (peer, on_reply)
        if peer not in self.links or self.links[peer].closed:
            self._fail_waiting(peer)
            return
        self.send(peer, (REQ, req_id, kind, payload))

    # -- receiving -------------------------------------------------------------------------
    def _received(self, peer: int, items: list[Any]) -> None:
        for record in items:
            try:
                self._dispatch(peer, record)
            except Exception:  # noqa: BLE001 - the process boundary (STYLE §6)
                # a bug in one record's handler: logged; the link and the records after it
                # go on (a closed link would look like the peer's death)
                log.exception("worker %d: handling %r from %d failed", self.index,
                              record[0], peer)

    def _dispatch(self, peer: int, record: tuple) -> None:
        kind = record[0]
        if kind == REP:
            entry = self._waiting.pop(record[1], None)
            if entry is not None:
                ok, value = record[2], record[3]
                entry[1](ok, value if ok else error_from_wire(value))
        elif kind == REQ:
            handler = self._requests.get(record[2])
            answer = Answer(self, peer, record[1])
            if handler is None:
                answer.fail(errors.amqp_error(errors.InternalError,
                                              f"no handler for {record[2]!r}"))
                return
            try:
                handler(peer, record[3], answer)
            except errors.AMQPError as exc:
                answer.fail(exc)
        else:
            handler2 = self._handlers.get(kind)
            if handler2 is None:
                log.error("record %r from %d has no handler", kind, peer)
                return
            handler2(peer, record)

    def _lost(self, peer: int, link: Link) -> None:
        if self.links.get(peer) is not link:
            return  # an old link of a peer that has a new one
        self._fail_waiting(peer)
        self.on_peer_lost(peer)

    def _fail_waiting(self, peer: int) -> None:
        for req_id, (p, on_reply) in list(self._waiting.items()):
            if p == peer:
                del self._waiting[req_id]
                on_reply(False, errors.amqp_error(
                    errors.InternalError, f"worker {peer} is gone"))

    def close(self) -> None:
        for link in self.links.values():
            link.close()
