#!/usr/bin/env bash
# Issue 49's two cases and its no-regression check, on one machine, alternated.
# Usage: BASE=/path/to/checkout-of-the-starting-commit bash run.sh OUTDIR [ROUNDS]
# Needs RabbitMQ 3.10.8 on 5672 (no plugins) and ../../../shared/device16/amqpperf.py (the
# independent client; AMQPPERF= to point elsewhere). Starts BASE's broker on 5790, this
# checkout's on 5791 and, as head2, on 5792 with two workers (management and Prometheus
# off), then:
#   1. closed loop at saturation (amqpperf: 1 producer, 1 consumer, 16 B, confirms 200,
#      prefetch 200, acks every 50, 8 s), RabbitMQ / base / head / head2 per round;
#   2. the greedy flood (python -m bench.fairness --shape greedy, 25 s) on the four;
#   3. bench compare base vs head, paper and s2 shapes, 5 rounds of 10 s;
#   4. open-loop points base vs head (bench.latency_curve, 3 rounds of 10 s): s2 at 10 000
#      and 30 000 msg/s, the paper's shape at 10 000 msg/s.
set -euo pipefail
out=${1:?OUTDIR}; rounds=${2:-3}
base=${BASE:?a checkout of the starting commit}
here=$(cd "$(dirname "$0")/../../.." && pwd)
perf=${AMQPPERF:-$here/../shared/device16/amqpperf.py}
mkdir -p "$out"; root=$(mktemp -d)
(cd "$base" && exec python3 -m broker --port 5790 --data-dir "$root/base" \
  --set management.tcp.port=0 --set prometheus.tcp.port=0) > "$root/base.log" 2>&1 &
A=$!
(cd "$here" && exec python3 -m broker --port 5791 --data-dir "$root/head" \
  --set management.tcp.port=0 --set prometheus.tcp.port=0) > "$root/head.log" 2>&1 &
B=$!
(cd "$here" && exec python3 -m broker --workers 2 --port 5792 --data-dir "$root/head2" \
  --set management.tcp.port=0 --set prometheus.tcp.port=0) > "$root/head2.log" 2>&1 &
C=$!
trap 'kill $A $B $C 2>/dev/null || true' EXIT
sleep 4
cd "$here"
declare -A uri=([rabbitmq]=amqp://guest:guest@127.0.0.1:5672/%2F
                [base]=amqp://guest:guest@127.0.0.1:5790/%2F
                [head]=amqp://guest:guest@127.0.0.1:5791/%2F
                [head2]=amqp://guest:guest@127.0.0.1:5792/%2F)
quiet() { while awk '{exit !($1 > 1.5)}' /proc/loadavg; do sleep 2; done; }
if [ "${SKIP_CLOSED:-}" != 1 ]; then
for r in $(seq "$rounds"); do
  for b in rabbitmq base head head2; do
    quiet
    python3 "$perf" --uri "${uri[$b]}" -x 1 -y 1 -s 16 -q 200 -A 50 -c 200 -z 8 --quiet \
      --label "$b round $r" 2>/dev/null >> "$out/closed-loop.jsonl"
    tail -n 1 "$out/closed-loop.jsonl" | python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
l, r = d["latency_ms"], d["rates"]
print("{}: {:.0f} msg/s, e2e p50 {} p99 {} p99.9 {} max {} ms, broker {} cores, load {}".format(
    d["label"], r["publish"], l["p50"], l["p99"], l["p999"], l["max"],
    d["broker"]["cores_window"], d["load"]["start"][0]))'
  done
done
fi
if [ "${SKIP_GREEDY:-}" != 1 ]; then
python3 -m bench.fairness --shape greedy --seconds 25 --rounds "$rounds" --quiet-load 1.5 \
  --json "$out/greedy.json" "${uri[rabbitmq]}" "${uri[base]}" "${uri[head]}" "${uri[head2]}" \
  | tee "$out/greedy.txt"
fi
if [ "${SKIP_AB:-}" != 1 ]; then
for shape in paper s2; do
  echo "$shape: load $(cut -d' ' -f1-3 /proc/loadavg)"
  python3 -m bench compare --scenario "$shape" --rounds 5 -z 10 --names base head \
    --out "$out/ab-$shape.json" "${uri[base]}" "${uri[head]}" 2>&1 | tail -n 12
done
fi
if [ "${SKIP_CURVES:-}" != 1 ]; then
python3 -m bench.latency_curve --shape s2 --rates 10000,30000 --rounds 3 -z 10 \
  --quiet-load 1.5 --target "base=${uri[base]}" --target "head=${uri[head]}" \
  --out "$out/curve-s2" 2>&1 | tail -n 8
python3 -m bench.latency_curve --shape paper --rates 10000 --rounds 3 -z 10 \
  --quiet-load 1.5 --target "base=${uri[base]}" --target "head=${uri[head]}" \
  --out "$out/curve-paper" 2>&1 | tail -n 8
fi
