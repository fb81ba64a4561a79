"""A pure-Python AMQP 0-9-1 broker following RabbitMQ's classic-queue design."""

__version__ = "0.2.0"
