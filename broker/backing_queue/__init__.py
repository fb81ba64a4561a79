"""Backing queues: where a queue process keeps its messages (see base.BackingQueue)."""
