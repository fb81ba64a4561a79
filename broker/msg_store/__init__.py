"""Per-vhost message stores (RabbitMQ `rabbit_msg_store`): `.rdq` files, ref counts, GC.

See `store.MessageStore` (one store) and `store.VhostStores` (the persistent + transient pair).
"""
