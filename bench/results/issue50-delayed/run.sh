#!/usr/bin/env bash
# Issue 50's figures on one machine, alternated (python -m bench, this checkout's broker on
# 5804, management and Prometheus off). Usage: bash run.sh OUTDIR [ROUNDS]
#   1. publish with confirms (window 200), 16 B persistent, no consumer, 10 s: a plain
#      direct exchange against x-delayed-message with x-delay 1 h;
#   2. deduplication's cost per publish: a fanout exchange against x-message-deduplication
#      (every message its own x-deduplication-header), and a queue without and with
#      x-message-deduplication (the same messages);
#   3. lateness (LATENESS_ROUNDS rounds, 8 minutes each): 1 000 000 persistent messages
#      published at 10 000 msg/s with x-delay 110 s, so that from 110 s they fall due at
#      10 000 msg/s while up to a million wait; the consumer's latency is counted from each
#      message's due time; a consumer with manual acks, then a no-ack one.
#   4. memory of 10 million waiting messages (python -m bench.delayed_memory).
set -euo pipefail
out=${1:?OUTDIR}; rounds=${2:-3}
here=$(cd "$(dirname "$0")/../../.." && pwd)
mkdir -p "$out"; root=$(mktemp -d)
(cd "$here" && exec python3 -m broker --port 5804 --data-dir "$root/d" \
  --set management.tcp.port=0 --set prometheus.tcp.port=0) > "$root/broker.log" 2>&1 &
B=$!
trap 'kill $B 2>/dev/null || true' EXIT
sleep 4
cd "$here"
U=amqp://guest:guest@127.0.0.1:5804/%2F
quiet() { while awk '{exit !($1 > 1.5)}' /proc/loadavg; do sleep 2; done; }
one() {  # label, bench options...
  local label=$1; shift
  quiet
  python3 -m bench --uri $U "$@" -x 1 -y 0 -c 200 -z 10 --quiet --json "$root/r.json" \
    > /dev/null 2>&1
  python3 -c "
import json, sys
d = json.load(open('$root/r.json'))
print(json.dumps({'label': '$label', 'msg_s': d['rates']['publish'],
                  'confirm_p99_ms': d['confirm_latency_ms']['p99'],
                  'broker_us_per_msg': d['broker']['cpu_us_per_message'],
                  'load': d['environment']['loadavg'][0]}))" | tee -a "$out/publish.jsonl"
}
if [ "${SKIP_PUBLISH:-}" != 1 ]; then
for r in $(seq "$rounds"); do
  # a new exchange each round: an empty timer index, an empty cache (the messages' ids
  # repeat from one round to the next)
  one plain -t direct -e plainx$r -u plainq -f persistent
  one delayed -t x-delayed-message -e dx$r -u dq --delay-ms 3600000 -f persistent
  one fanout -t fanout -e fx$r -u fq --dedup-header
  one dedup-exchange -t x-message-deduplication -e ddx$r -u ddq --dedup-header
  one queue -e "" -u qq --dedup-header
  one dedup-queue -e "" -u dqq --dedup-header --queue-args x-message-deduplication=true
done
fi
if [ "${SKIP_LATENESS:-}" != 1 ]; then
# alternated: a consumer with manual acks (prefetch 200, multiple ack every 50) and a no-ack
# one; each on a new exchange and queue
for r in $(seq "${LATENESS_ROUNDS:-1}"); do
  for mode in manual auto; do
    if [ $mode = manual ]; then C="-q 200 -A 50"; else C="-a"; fi
    quiet
    python3 -m bench --uri $U -t x-delayed-message -e dxl$mode$r -u dlq$mode$r \
      --delay-ms 110000 -f persistent -x 1 -y 1 -c 200 $C -r 10000 -z 100 \
      --drain-timeout 30 --quiet --json "$out/lateness-1M-$mode-$r.json" > /dev/null 2>&1
  done
done
fi
if [ "${SKIP_MEMORY:-}" != 1 ]; then
python3 -m bench.delayed_memory 10000000 --json "$out/memory-10M.json" | tail -n 1
fi
