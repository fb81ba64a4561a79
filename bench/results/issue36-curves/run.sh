#!/usr/bin/env bash
# Issue 36's open-loop curves, this broker against RabbitMQ 3.10.8 on this machine, one
# alternated session (management plugin off, RabbitMQ on 5672). Rates are 10, 25, 50, 75 and
# 90 % of RabbitMQ's closed-loop maximum in each shape with this harness (measured in the
# same session: paper 15 100, celery 16 450, s2 35 871 msg/s), then this broker alone
# further; every rate also against a null server (--floor: the client's own latency).
# Percentiles from the hdrhistogram library (bench/histogram.py). Usage: [ROUNDS=5] run.sh OUTDIR [SHAPE ...]
set -euo pipefail
out=${1:-/tmp/issue36-curves}
shift || true
shapes=${*:-s2 celery paper}
here=$(cd "$(dirname "$0")/../../.." && pwd)
data=$(mktemp -d)
(cd "$here" && exec python3 -m broker --port 5797 --data-dir "$data" \
  --set management.tcp.port=0 --set prometheus.tcp.port=0) > "$data.log" 2>&1 &
B=$!
trap 'kill $B 2>/dev/null || true' EXIT
# a broker that has run for a while, as one in production has: its GC pacer's cheap full
# collections (15-25 ms each) have backed off from every 10 s to every 5 minutes, since
# they free nothing in these shapes (broker/gc_pacing.py)
sleep "${WARMUP:-320}"
mkdir -p "$out"
cd "$here"
R=amqp://guest:guest@127.0.0.1:5672/%2F
P=amqp://guest:guest@127.0.0.1:5797/%2F
for shape in $shapes; do
  case $shape in
    s2) rates=3600,9000,18000,27000,32300,50000; top=32300 ;;
    celery) rates=1640,4100,8200,12300,14800,20000,28000; top=14800 ;;
    paper) rates=1500,3750,7500,11250,13500,18000,22000; top=13500 ;;
  esac
  python3 -m bench.latency_curve --shape "$shape" --rates "$rates" --rounds "${ROUNDS:-3}" -z 20 \
    --target rabbitmq=$R --target pybroker=$P --up-to rabbitmq=$top --floor \
    --out "$out/$shape" | tee "$out/$shape.txt"
done
