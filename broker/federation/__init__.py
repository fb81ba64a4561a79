"""Federation (rabbitmq_federation): federated exchanges and queues over AMQP 0-9-1."""
