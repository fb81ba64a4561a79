"""Dynamic shovels (rabbitmq_shovel): move messages from a queue or exchange on one broker to
an exchange or queue on another (or this) broker. `supervisor.Shovels` is the façade."""
