# bench/ha — the high-availability study's prototype (issue 25; docs/high-availability.md).
#
# Owns: starting three local members of an existing consensus engine (etcd, PySyncObj), driving
# 1 KB entries through it one commit at a time and in batches, killing the leader with SIGKILL
# mid-run, reading everything back, and writing the figures as JSON.
# Talks to: the engine binaries and Python clients of the `ha` extra; bench's own harness for
# RabbitMQ's quorum queue beside it.
# Must never: import broker/, or implement any part of a consensus protocol itself.
"""Measure what a quorum queue on an existing Raft engine would cost (``python -m bench.ha -h``)."""
