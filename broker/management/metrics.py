"""Prometheus metrics at /metrics (aggregated) and /metrics/per-object (one series per
queue), on their own port (`prometheus.tcp.port`, 15692), with rabbitmq_prometheus's metric
names and labels for what exists here, so the public "RabbitMQ-Overview" Grafana dashboard
shows data (rabbitmq.com/prometheus.html). Rendered with prometheus_client's text
exposition format from a custom collector: nothing is counted per message here, the values
are read from the processes' counters when Prometheus scrapes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from broker import __version__, replication_hook
from broker.loop_lag import Histogram
from broker.management import overview, shapes
from broker.memory_monitor import tree_cpu_seconds
from broker.stats import MessageStats

if TYPE_CHECKING:
    from broker.started import StartedBroker

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# rabbitmq_prometheus name -> our MessageStats field (channel-level totals)
CHANNEL_COUNTERS = {
    "channel_messages_published": ("publish", "Total number of messages published into an exchange on a channel"),
    "channel_messages_confirmed": ("confirm", "Total number of messages published into an exchange and confirmed on the channel"),
    "channel_messages_unroutable_dropped": ("drop_unroutable", "Total number of messages published as non-mandatory into an exchange and dropped as unroutable"),
    "channel_messages_unroutable_returned": ("return_unroutable", "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable"),
    "channel_messages_delivered_ack": ("deliver", "Total number of messages delivered to consumers in manual acknowledgement mode"),
    "channel_messages_delivered": ("deliver_no_ack", "Total number of messages delivered to consumers in automatic acknowledgement mode"),
    "channel_messages_redelivered": ("redeliver", "Total number of messages redelivered to consumers"),
    "channel_messages_acked": ("ack", "Total number of messages acknowledged by consumers"),
    "channel_get_ack": ("get", "Total number of messages fetched with basic.get in manual acknowledgement mode"),
    "channel_get": ("get_no_ack", "Total number of messages fetched with basic.get in automatic acknowledgement mode"),
}
GLOBAL_COUNTERS = {
    "global_messages_received": "publish",
    "global_messages_confirmed": "confirm",
    "global_messages_unroutable_dropped": "drop_unroutable",
    "global_messages_unroutable_returned": "return_unroutable",
    "global_messages_delivered_consume_manual_ack": "deliver",
    "global_messages_delivered_consume_auto_ack": "deliver_no_ack",
    "global_messages_delivered_get_manual_ack": "get",
    "global_messages_delivered_get_auto_ack": "get_no_ack",
    "global_messages_redelivered": "redeliver",
    "global_messages_acknowledged": "ack",
}


class BrokerCollector:
    """prometheus_client collector over the live broker; `per_object` adds one series per
    queue (labels vhost, queue) instead of totals."""

    def __init__(self, broker: StartedBroker, per_object: bool = False) -> None:
        self.broker = broker
        self.per_object = per_object

    def collect(self) -> Iterator[Metric]:
        b = self.broker
        node = shapes.node_name(b)
        info = GaugeMetricFamily("rabbitmq_identity_info", "RabbitMQ node & cluster identity info",
                                 labels=["rabbitmq_node", "rabbitmq_cluster",
                                         "rabbitmq_cluster_permanent_id"])
        info.add_metric([node, node, f"rabbitmq-cluster-id-{node}"], 1)
        yield info
        build = GaugeMetricFamily("rabbitmq_build_info", "RabbitMQ & Erlang/OTP version info",
                                  labels=["rabbitmq_version", "prometheus_plugin_version",
                                          "product_version"])
        build.add_metric(["3.10.8", __version__, __version__], 1)
        yield build
        names = sorted(b.vhosts)
        lengths, objects, stats = overview.totals(b, names, every_vhost=True)
        for key in ("connections", "channels", "consumers", "queues"):
            yield GaugeMetricFamily(f"rabbitmq_{key}", f"{key.capitalize()} currently open"
                                    if key != "queues" else "Queues available",
                                    value=objects[key])
        yield from self._churn()
        yield from self._queue_lengths(lengths)
        yield from self._counters(stats)
        yield from self._process()
        yield from self._links()
        yield from self._delayed()
        yield from self._cluster()
        yield from self._loop_lag()
        yield from self._stream_protocol()

    def _stream_protocol(self) -> Iterator[Metric]:
        """The stream protocol's global counters with RabbitMQ 3.13's names and the label
        protocol="stream" (rabbit_global_counters): publishers, consumers, messages
        received, confirmed and delivered. Per stream, the queue series above count what
        each stream moved."""
        listener = self.broker.stream
        if listener is None:
            return
        conns = list(listener.connections)
        for name, help_, value in (
                ("rabbitmq_global_publishers", "Current number of publishers",
                 sum(len(c.publishers) for c in conns)),
                ("rabbitmq_global_consumers", "Current number of consumers",
                 sum(len(c.subscriptions) for c in conns))):
            g = GaugeMetricFamily(name, help_, labels=["protocol"])
            g.add_metric(["stream"], value)
            yield g
        for name, help_, value in (
                ("rabbitmq_global_messages_received", "Total number of messages received "
                 "from publishers", listener.received),
                ("rabbitmq_global_messages_confirmed", "Total number of messages confirmed "
                 "to publishers", listener.confirmed),
                ("rabbitmq_global_messages_delivered", "Total number of messages delivered "
                 "to consumers", listener.delivered)):
            c = CounterMetricFamily(name, help_, labels=["protocol"])
            c.add_metric(["stream"], value)
            yield c

    def _loop_lag(self) -> Iterator[Metric]:
        """How late the event loop ran its 10 ms timer, and GC pauses by generation
        (broker/loop_lag.py): where tail latency comes from. Not in RabbitMQ (whose
        schedulers differ); this broker's prefix."""
        probe = self.broker.loop_lag
        lag = HistogramMetricFamily("pybroker_event_loop_lag_seconds", "How late the event "
                                    "loop ran a timer due every 10 ms")
        lag.add_metric([], probe.lag.cumulative(), probe.lag.sum)
        yield lag
        pauses = HistogramMetricFamily("pybroker_gc_pause_seconds", "Garbage collector "
                                       "pauses, by generation", labels=["generation"])
        for generation, hist in enumerate(probe.gc_pauses):
            pauses.add_metric([str(generation)], hist.cumulative(), hist.sum)
        yield pauses

    def _cluster(self) -> Iterator[Metric]:
        """High availability (docs/high-availability.md), on a cluster's leader only:
        the term, the in-sync replica set's size, and per follower its lag (stream positions
        not acked) and the seconds since its last ack. RabbitMQ has no such series; they
        carry this broker's prefix."""
        state = replication_hook.cluster_state
        if state is None:
            return
        members = state["members"]
        yield GaugeMetricFamily("pybroker_cluster_term", "The leader's term (its key's etcd "
                                "create revision)", value=state["term"])
        yield GaugeMetricFamily("pybroker_cluster_in_sync_replicas", "Members in the in-sync "
                                "replica set, the leader included",
                                value=sum(1 for m in members if m["insync"]))
        yield GaugeMetricFamily("pybroker_cluster_members", "Members running (etcd lease "
                                "alive)", value=sum(1 for m in members if m["running"]))
        lag = GaugeMetricFamily("pybroker_cluster_follower_lag", "Replication stream "
                                "positions a follower has not acked", labels=["follower"])
        ack = GaugeMetricFamily("pybroker_cluster_follower_last_ack_seconds", "Seconds since "
                                "a follower's last ack", labels=["follower"])
        for m in members:
            if m["role"] == "follower" and m["lag"] is not None:
                lag.add_metric([m["node"]], m["lag"])
                ack.add_metric([m["node"]], m["last_ack_s"] or 0)
        yield lag
        yield ack

    def _links(self) -> Iterator[Metric]:
        """Federation links and shovels: how many are in each state (RabbitMQ 3.13's
        `rabbitmq_federation_links` and `rabbitmq_shovels` gauges; 3.10 has none), and
        what each moved (counters of this broker's own; RabbitMQ exports none)."""
        b = self.broker
        links = b.federation.links.values() if b.federation is not None else []
        shovels = b.shovels.links.values() if b.shovels is not None else []
        by_status: dict[str, int] = {}
        forwarded = CounterMetricFamily(
            "rabbitmq_federation_link_messages_forwarded",
            "Messages a federation link republished here (confirmed, under on-confirm)",
            labels=["vhost", "type", "name", "upstream"])
        for link in links:
            by_status[link.status] = by_status.get(link.status, 0) + 1
            forwarded.add_metric([link.vhost, link.kind, link.name, link.upstream.name],
                                 link.forwarded)
        states = GaugeMetricFamily("rabbitmq_federation_links",
                                   "Number of federation links in each status",
                                   labels=["status"])
        for status, n in sorted(by_status.items()):
            states.add_metric([status], n)
        yield states
        yield forwarded
        shovel_states: dict[str, int] = {}
        moved = CounterMetricFamily("rabbitmq_shovel_messages_moved",
                                    "Messages a dynamic shovel moved (acked at the source)",
                                    labels=["vhost", "name"])
        for shovel in shovels:
            shovel_states[shovel.state] = shovel_states.get(shovel.state, 0) + 1
            moved.add_metric([shovel.d.vhost, shovel.d.name], shovel.moved)
        gauge = GaugeMetricFamily("rabbitmq_shovels", "Number of shovels in each state",
                                  labels=["type", "state"])
        for state, n in sorted(shovel_states.items()):
            gauge.add_metric(["dynamic", state], n)
        yield gauge
        yield moved

    def _delayed(self) -> Iterator[Metric]:
        """x-delayed-message exchanges (issue 50; RabbitMQ exports none): messages waiting,
        and those taken, routed when due and routed nowhere when due; per exchange on
        /metrics/per-object, summed on /metrics."""
        rows = [(vname, holder.name, holder.stats()) for vname in sorted(self.broker.vhosts)
                for holder in self.broker.vhosts[vname].delayed_holders()]
        labels = ["vhost", "exchange"] if self.per_object else []
        waiting = GaugeMetricFamily("pybroker_exchange_messages_delayed",
                                    "Messages an x-delayed-message exchange holds until due",
                                    labels=labels)
        counters = [(CounterMetricFamily(f"pybroker_exchange_{name}", doc, labels=labels), key)
                    for name, key, doc in (
                        ("messages_delayed_published", "delayed_published",
                         "Messages an x-delayed-message exchange took to hold"),
                        ("messages_delayed_routed", "delayed_routed",
                         "Held messages routed to a queue when due"),
                        ("messages_delayed_unroutable", "delayed_unroutable",
                         "Held messages no binding routed when due (dropped)"))]
        if self.per_object:
            for vname, name, stats in rows:
                waiting.add_metric([vname, name], stats["messages_delayed"])
                for fam, key in counters:
                    fam.add_metric([vname, name], stats[key])
        else:
            waiting.add_metric([], sum(r[2]["messages_delayed"] for r in rows))
            for fam, key in counters:
                fam.add_metric([], sum(r[2][key] for r in rows))
        yield waiting
        for fam, _key in counters:
            yield fam
        lateness = HistogramMetricFamily(
            "pybroker_exchange_delayed_lateness_seconds",
            "How late x-delayed-message exchanges sent due messages (handed out minus due "
            "time, 1 ms resolution)", labels=labels)
        if self.per_object:
            for vname, name, stats in rows:
                hist = stats["lateness"]
                lateness.add_metric([vname, name], hist.cumulative(), hist.sum)
        else:
            total = Histogram()
            for _v, _n, stats in rows:
                total.merge(stats["lateness"])
            lateness.add_metric([], total.cumulative(), total.sum)
        yield lateness
        yield from self._deduplicated(labels)

    def _deduplicated(self, labels: list[str]) -> Iterator[Metric]:
        """x-message-deduplication exchanges and queues (issue 50; RabbitMQ exports none):
        publishes dropped as duplicates."""
        b = self.broker
        xs = CounterMetricFamily("pybroker_exchange_messages_deduplicated",
                                 "Publishes a deduplicating exchange routed nowhere as "
                                 "duplicates", labels=labels)
        qs = CounterMetricFamily("pybroker_queue_messages_deduplicated",
                                 "Publishes a deduplicating queue refused as duplicates",
                                 labels=["vhost", "queue"] if self.per_object else [])
        x_total = q_total = 0
        for vname in sorted(b.vhosts):
            v = b.vhosts[vname]
            for x in v.dedup_exchanges():
                routing: Any = x.routing  # a DedupRouting: every worker's duplicates
                n = routing.duplicates()
                x_total += n
                if self.per_object:
                    xs.add_metric([vname, x.name], n)
            for q in v.queues.values():
                if q.arguments.get("x-message-deduplication") is not True:
                    continue
                # another worker's queue reports its backing queue's counters
                n = getattr(q.bq, "duplicates", None)
                if n is None:
                    n = q.bq.stats().get("dedup_duplicates", 0)
                q_total += n
                if self.per_object:
                    qs.add_metric([vname, q.name], n)
        if not self.per_object:
            xs.add_metric([], x_total)
            qs.add_metric([], q_total)
        yield xs
        yield qs

    def _churn(self) -> Iterator[Metric]:
        b = self.broker
        c = b.churn
        for name, value, doc in (
                ("connections_opened", c.connections_opened, "Total number of connections opened"),
                ("connections_closed", c.connections_closed, "Total number of connections closed or terminated"),
                ("channels_opened", c.channels_opened, "Total number of channels opened"),
                ("channels_closed", c.channels_closed, "Total number of channels closed")):
            yield CounterMetricFamily(f"rabbitmq_{name}", doc, value=value)
        for name, doc in (("queues_declared", "Total number of queues declared"),
                          ("queues_created", "Total number of queues created"),
                          ("queues_deleted", "Total number of queues deleted")):
            yield CounterMetricFamily(f"rabbitmq_{name}", doc, value=sum(
                getattr(v.churn, name) for v in b.vhosts.values()))

    def _queue_lengths(self, lengths: dict[str, int]) -> Iterator[Metric]:
        pairs = (("queue_messages_ready", "messages_ready", "Messages ready to be delivered to consumers"),
                 ("queue_messages_unacked", "messages_unacknowledged", "Messages delivered to consumers but not yet acknowledged"),
                 ("queue_messages", "messages", "Sum of ready and unacknowledged messages - total queue depth"))
        if not self.per_object:
            for name, key, doc in pairs:
                yield GaugeMetricFamily(f"rabbitmq_{name}", doc, value=lengths[key])
            ages = [a for v in self.broker.vhosts.values() for q in v.queues.values()
                    if (a := shapes.head_message_age(q)) is not None]
            yield GaugeMetricFamily("rabbitmq_queue_oldest_message_age_seconds",
                                    "The longest any queue's next message has waited (s)",
                                    value=max(ages, default=0.0))
            return
        b = self.broker
        fams = {name: GaugeMetricFamily(f"rabbitmq_{name}", doc, labels=["vhost", "queue"])
                for name, _k, doc in pairs}
        consumers = GaugeMetricFamily("rabbitmq_queue_consumers",
                                      "Consumers on a queue", labels=["vhost", "queue"])
        published = CounterMetricFamily("rabbitmq_queue_messages_published",
                                        "Total number of messages published to queues",
                                        labels=["vhost", "queue"])
        age = GaugeMetricFamily("rabbitmq_queue_oldest_message_age_seconds",
                                "Seconds the next message to deliver has waited (consumer lag)",
                                labels=["vhost", "queue"])
        for vname in sorted(b.vhosts):
            for q in sorted(b.vhosts[vname].queues.values(), key=lambda q: q.name):
                ql = shapes.queue_lengths(q)
                for name, key, _doc in pairs:
                    fams[name].add_metric([vname, q.name], ql[key])
                consumers.add_metric([vname, q.name], len(q.consumers))
                published.add_metric([vname, q.name], q.message_stats.publish)
                lag = shapes.head_message_age(q)
                if lag is not None:
                    age.add_metric([vname, q.name], lag)
        yield from fams.values()
        yield consumers
        yield published
        yield age

    def _counters(self, stats: MessageStats) -> Iterator[Metric]:
        for name, (field, doc) in CHANNEL_COUNTERS.items():
            yield CounterMetricFamily(f"rabbitmq_{name}", doc, value=getattr(stats, field))
        for name, field in GLOBAL_COUNTERS.items():
            yield CounterMetricFamily(f"rabbitmq_{name}", name.replace("_", " "),
                                      value=getattr(stats, field))
        if not self.per_object:  # per object, each queue has its own series
            queued = sum(q.message_stats.publish for v in self.broker.vhosts.values()
                         for q in v.queues.values())
            yield CounterMetricFamily("rabbitmq_queue_messages_published",
                                      "Total number of messages published to queues",
                                      value=queued)

    def _process(self) -> Iterator[Metric]:
        b = self.broker
        node = overview.node_json(b)
        active = {a["resource"] for a in overview.alarms(b)}
        yield GaugeMetricFamily("rabbitmq_process_resident_memory_bytes",
                                "Memory used in bytes", value=node["mem_used"])
        yield GaugeMetricFamily("rabbitmq_resident_memory_limit_bytes",
                                "Memory high watermark in bytes", value=node["mem_limit"])
        yield GaugeMetricFamily("rabbitmq_disk_space_available_bytes",
                                "Disk space available in bytes", value=node["disk_free"])
        yield GaugeMetricFamily("rabbitmq_disk_space_available_limit_bytes",
                                "Free disk space low watermark in bytes",
                                value=node["disk_free_limit"])
        yield GaugeMetricFamily("rabbitmq_alarms_memory_used_watermark",
                                "is 1 if VM memory watermark alarm is in effect",
                                value=int("memory" in active))
        yield GaugeMetricFamily("rabbitmq_alarms_free_disk_space_watermark",
                                "is 1 if free disk space watermark alarm is in effect",
                                value=int("disk" in active))
        yield GaugeMetricFamily("rabbitmq_alarms_file_descriptor_limit",
                                "is 1 if file descriptor limit alarm is in effect", value=0)
        yield GaugeMetricFamily("rabbitmq_process_open_fds", "Open file descriptors",
                                value=node["fd_used"])
        yield GaugeMetricFamily("rabbitmq_process_max_fds",
                                "Open file descriptors limit", value=node["fd_total"])
        tree = b.process_tree  # several worker processes: the node's whole tree
        sockets = (len(b.connections) if b.remote_connections is None
                   else len(b.connections) + len(b.remote_connections()))
        yield GaugeMetricFamily("rabbitmq_process_open_tcp_sockets", "Open TCP sockets",
                                value=sockets)
        yield CounterMetricFamily("rabbitmq_process_cpu_seconds",
                                  "CPU time (user + system) of the broker process in seconds",
                                  value=tree_cpu_seconds(tree) if tree is not None
                                  else sum(os.times()[:2]))


def render(broker: StartedBroker, per_object: bool) -> bytes:
    """The text exposition of every metric."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(broker, per_object))
    return generate_latest(registry)


def make_app(broker: StartedBroker) -> web.Application:
    """The Prometheus endpoint's aiohttp app (no auth, as rabbitmq_prometheus)."""
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=render(broker, False), headers={"Content-Type": CONTENT_TYPE})

    async def per_object(request: web.Request) -> web.Response:
        return web.Response(body=render(broker, True), headers={"Content-Type": CONTENT_TYPE})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/metrics/per-object", per_object)
    return app
