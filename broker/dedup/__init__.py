"""Message deduplication (issue 50): the cache of recently seen keys (`cache.py`) and the
backing queue of a queue declared with `x-message-deduplication` (`queue.py`). The routing
table of the x-message-deduplication exchange type is broker/exchange/dedup.py."""
