#!/usr/bin/env bash
# Issue 49's closed loop at saturation (the independent client amqpperf: 1 producer, 1
# consumer, 16 B, confirms 200, prefetch 200, acks every 50, 8 s), alternated over any
# brokers, each run after the 1-minute load fell below QUIET (default 1.5; run4 used 1.0).
# Usage: bash closed-loop.sh OUT.jsonl ROUNDS NAME=DIR:PORT[:EXTRA-ARG] ...
#   DIR "rabbit" means a broker already listening on PORT (RabbitMQ on 5672); any other DIR
#   is a checkout started with `python3 -m broker EXTRA-ARG --port PORT` (e.g. --workers=2).
# AMQPPERF= points at amqpperf.py (default ../shared/device16/amqpperf.py beside the repo).
out=$1; rounds=$2; shift 2
here=$(cd "$(dirname "$0")/../../../.." && pwd)
perf=${AMQPPERF:-$here/../shared/device16/amqpperf.py}
root=$(mktemp -d); pids=()
declare -A uri
for spec in "$@"; do
  name=${spec%%=*}; rest=${spec#*=}; dir=${rest%%:*}; rest=${rest#*:}; port=${rest%%:*}; extra=${rest#*:}
  [ "$extra" = "$port" ] && extra=""
  if [ "$dir" != rabbit ]; then
    (cd "$dir" && exec python3 -m broker $extra --port "$port" --data-dir "$root/$name" \
      --set management.tcp.port=0 --set prometheus.tcp.port=0) > "$root/$name.log" 2>&1 &
    pids+=($!)
  fi
  uri[$name]=amqp://guest:guest@127.0.0.1:$port/%2F
done
trap 'kill ${pids[@]} 2>/dev/null' EXIT
sleep 4
for r in $(seq "$rounds"); do for spec in "$@"; do name=${spec%%=*}
  while awk -v q="${QUIET:-1.5}" '{exit !($1 > q)}' /proc/loadavg; do sleep 2; done
  python3 "$perf" --uri "${uri[$name]}" -x 1 -y 1 -s 16 -q 200 -A 50 -c 200 -z 8 --quiet \
    --label "$name round $r" 2>/dev/null >> "$out"
  tail -n 1 "$out" | python3 -c '
import json, sys
d = json.loads(sys.stdin.read()); l, r = d["latency_ms"], d["rates"]
print("{}: {:.0f} msg/s, e2e p50 {} p99 {} p99.9 {} max {} ms, load {}".format(
    d["label"], r["publish"], l["p50"], l["p99"], l["p999"], l["max"], d["load"]["start"][0]))'
done; done
