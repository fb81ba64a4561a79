#!/usr/bin/env bash
# issue 36: s2 at 3 600 and 9 000 msg/s, 5 alternated rounds of 20 s, RabbitMQ fresh without
# plugins, this broker idled 320 s first (as run.sh does), null server as the floor
set -euo pipefail
cd /work/main
data=$(mktemp -d)
python3 -m broker --port 5797 --data-dir "$data" --set management.tcp.port=0 --set prometheus.tcp.port=0 > "$data.log" 2>&1 &
B=$!
trap 'kill $B 2>/dev/null || true' EXIT
sleep 320
python3 -m bench.latency_curve --shape s2 --rates 3600,9000 --rounds 5 -z 20 \
  --target rabbitmq=amqp://guest:guest@127.0.0.1:5672/%2F \
  --target pybroker=amqp://guest:guest@127.0.0.1:5797/%2F --floor --out "$1"
