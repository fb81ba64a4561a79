"""Delayed messages (issue 50): the `x-delayed-message` exchange's holder process
(`holder.py`) and its timer index on disk (`store.py`). The routing table of the exchange
type is broker/exchange/delayed.py."""
