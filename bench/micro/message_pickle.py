"""How long a Message takes to cross to another worker process as pickle (issue 47):
`Message.__reduce__` (its wire form) against pickle's default for a slotted object.

python bench/micro/message_pickle.py  -> µs per message, both ways, for 16 B and 1.5 KB
bodies, decoded and wire-form properties, in batches of 256 (one loop turn's records)."""

from __future__ import annotations

import copyreg
import pickle
import time

from pamqp import commands

from broker.message import Message


def per_message_us(messages: list[Message], rounds: int = 200) -> float:
    t0 = time.perf_counter()
    for _ in range(rounds):
        pickle.loads(pickle.dumps(messages, protocol=5))
    return (time.perf_counter() - t0) / (rounds * len(messages)) * 1e6


def main() -> None:
    props = commands.Basic.Properties(delivery_mode=2, message_id="id-1",
                                      headers={"trace": "abc", "n": 1})
    for size in (16, 1500):
        batch = [Message("x", "k", props, b"x" * size) for _ in range(256)]
        for m in batch:
            m.wire_properties()
        reduced = per_message_us(batch)
        copyreg.dispatch_table[Message] = lambda m: (  # pickle's default: slot state
            Message.__new__, (Message,), (None, {k: getattr(m, k) for k in Message.__slots__}))
        default = per_message_us(batch)
        del copyreg.dispatch_table[Message]
        print(f"{size:>5} B: __reduce__ {reduced:.2f} µs/msg, slot state {default:.2f} µs/msg")


if __name__ == "__main__":
    main()
