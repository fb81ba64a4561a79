# bench/ — `python -m bench`: a PerfTest-style load generator for any AMQP 0-9-1 broker.
#
# Owns: the benchmark CLI (run, compare, plot, sink) and its own raw-asyncio client.
# Talks to: brokers over AMQP only; never imports the broker package.
# Must never: be the bottleneck it measures (see docs/benchmarks.md, "client vs sink").
"""PerfTest-style benchmark harness (https://rabbitmq.github.io/rabbitmq-perf-test/stable/htmlsingle/)."""
