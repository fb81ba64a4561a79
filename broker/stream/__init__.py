"""Streams (issue 22): x-queue-type=stream, an append-only replayable log."""
