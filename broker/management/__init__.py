"""The management plugin's equivalent: RabbitMQ's HTTP API (port 15672) and web UI, and the
Prometheus endpoint (port 15692), served by aiohttp inside the broker's own event loop.

Owns: `app.ManagementServer` (start/stop, auth middleware, routes) and one module per API
resource; `shapes.py` builds the JSON objects with RabbitMQ's field names; `rates.py` turns
the processes' integer counters into rates every 5 s; `metrics.py` is the Prometheus text.
Reads the broker's state (vhosts, queues, connections) and changes it only through the same
calls AMQP methods use (VHost.declare_queue, Users.add_user, ...).
Source: rabbitmq.com/management.html, the HTTP API reference a RabbitMQ 3.10 serves at
/api/index.html, rabbitmq.com/prometheus.html.
"""
