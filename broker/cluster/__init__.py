"""High availability (issue 35): a cluster of brokers whose leader and in-sync replica set
are kept in etcd, the leader streaming its durable writes to followers (LavinMQ 2's design;
docs/high-availability.md)."""
