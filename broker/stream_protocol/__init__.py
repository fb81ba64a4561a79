"""The RabbitMQ Stream protocol listener (port 5552, issue 37)."""
