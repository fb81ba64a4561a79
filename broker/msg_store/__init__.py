"""Per-vhost message stores (RabbitMQ `rabbit_msg_store`): `.rdq` files, ref counts, GC.

See `store.MessageStore` (one store) and `vhost.VhostStores` (the persistent + transient pair).
"""
