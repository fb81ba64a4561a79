"""Sans-IO AMQP 0-9-1 protocol: framing, command assembly, connection handshake."""
