#!/usr/bin/env bash
# Issue 35 item 9: a three-member cluster of this broker (one etcd) against a three-node
# RabbitMQ 3.10.8 cluster (rabbit_cluster.sh, already started), both on this machine, with a
# quorum queue, alternated in one session: the paper's shape (1.5 KB persistent, confirms,
# acks) and the confirms-and-acks shape (s2: 16 B, here durable), ROUNDS rounds of SECONDS s.
# Clients connect to the queue's leader (RabbitMQ: r1, where the client declares it; this
# broker: the member that leads). Usage: compare.sh OUTDIR [ROUNDS] [SECONDS]
set -euo pipefail
out=${1:-/tmp/issue35-compare}
rounds=${2:-3}
secs=${3:-15}
mkdir -p "$out"
root=$(mktemp -d)
cd "$(dirname "$0")/../../.."
. bench/results/issue35-cluster/cluster.sh
start_cluster "$root" 23793 23803 5700 5710 /cmp
trap 'kill "${pids[@]}" $ETCD 2>/dev/null || true' EXIT
for r in $(seq 1 "$rounds"); do
  for shape in paper s2; do
    extra=(); [ "$shape" = s2 ] && extra=(-f persistent)
    for t in rabbitmq pybroker; do
      port=5681; [ "$t" = pybroker ] && port=5701
      for _ in $(seq 1 40); do  # a quiet machine: 1-minute load below 1.5, up to 200 s
        awk '{exit !($1 < 1.5)}' /proc/loadavg && break; sleep 5
      done
      load=$(cut -d' ' -f1-3 /proc/loadavg)
      python3 -m bench --scenario "$shape" "${extra[@]}" -z "$secs" \
        --uri "amqp://guest:guest@127.0.0.1:$port/%2F" --queue-args x-queue-type=quorum \
        --quiet --json "$out/$shape-$t-$r.json" > /dev/null 2>&1 || true
      python3 -c "import json;d=json.load(open('$out/$shape-$t-$r.json'));l=d['confirm_latency_ms'];print('$r $shape $t load $load', d['ok'], round(d['rates']['confirm']), 'confirm p50', l.get('p50'), 'p99', l.get('p99'))"
    done
  done
done
