"""Per-queue index (RabbitMQ rabbit_queue_index v1): journal.jif + <N>.idx segments."""
