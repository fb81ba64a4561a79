"""Quorum queues (x-queue-type: quorum) on one broker: rabbit_fifo's delivery counting,
delivery limits and at-least-once dead-lettering over a classic queue process's storage."""
