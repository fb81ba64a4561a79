"""Definitions as operations, for replication (issue 35): a follower replays the leader's
changes (`apply_op`) and, when it joins, rebuilds its database from the operations that
recreate the leader's (`snapshot_ops`). The records are broker/definitions.py's
`encode_op`: JSON naming a `Definitions` method and its arguments; only the methods marked
as changes there may be named, so a record cannot call anything else.

Owns: replaying and snapshotting. Must never: write SQLite pages or files (the follower's
own `Definitions` does).
"""

from __future__ import annotations

import json

from broker.definitions import REPLICATED_OPS, Definitions, decode_value, encode_op


def apply_op(defs: Definitions, data: bytes) -> None:
    """Replay one operation record on `defs`; ValueError for a record that names no
    change."""
    op = json.loads(data)
    name = op.get("op")
    if name not in REPLICATED_OPS:
        raise ValueError(f"not a definitions change: {name!r}")
    args = [decode_value(a) for a in op.get("args", [])]
    kwargs = {k: decode_value(v) for k, v in op.get("kwargs", {}).items()}
    getattr(defs, name)(*args, **kwargs)


def snapshot_ops(defs: Definitions) -> list[bytes]:
    """The operations that rebuild `defs` from an empty database, in an order that keeps
    its references valid (vhosts and users first)."""
    ops = [encode_op("add_vhost", (v.name, v.description, tuple(v.tags)), {})
           for v in defs.list_vhosts()]
    ops += [encode_op("put_user", (u.name, u.password_hash, tuple(u.tags),
                                   u.hashing_algorithm), {}) for u in defs.list_users()]
    ops += [encode_op("set_permissions", (p.user, p.vhost, p.configure, p.write, p.read), {})
            for p in defs.list_permissions()]
    ops += [encode_op("set_topic_permissions", (p.user, p.vhost, p.exchange, p.write,
                                                p.read), {})
            for p in defs.list_topic_permissions()]
    for scope in ("user", "vhost"):
        ops += [encode_op("set_limits", (scope, owner, limits), {})
                for owner, limits in defs.list_limits(scope).items()]
    ops += [encode_op("add_exchange", (x,), {}) for x in defs.list_exchanges()]
    ops += [encode_op("add_queue", (q,), {}) for q in defs.list_queues()]
    ops += [encode_op("add_binding", (b,), {}) for b in defs.list_bindings()]
    ops += [encode_op("set_policy", (p,), {}) for p in defs.list_policies()]
    ops += [encode_op("set_parameter", (p,), {}) for p in defs.list_parameters()]
    ops += [encode_op("set_global_parameter", (name, value), {})
            for name, value in defs.list_global_parameters().items()]
    return ops
