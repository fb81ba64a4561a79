#!/usr/bin/env bash
# Issue 50's lateness, as measured on 29 Nov (lateness-1M-{A,B}-*): two rounds, each a
# consumer with manual acks then a no-ack one, each run on a fresh broker (this checkout, port
# 5804, Prometheus on 15699 scraped at the end for the holder's own lateness histogram).
# Usage: bash lateness-ab.sh OUTDIR  (ROUNDS="1 2" and MODES="manual auto" by default)
out=$(realpath -m "${1:?OUTDIR}"); mkdir -p "$out"
cd "$(dirname "$0")/../../.."
for r in ${ROUNDS:-1 2}; do
 for mode in ${MODES:-manual auto}; do
  while awk '{exit !($1 > 1.5)}' /proc/loadavg; do sleep 2; done
  root=$(mktemp -d)
  python3 -m broker --port 5804 --data-dir "$root/d" --set management.tcp.port=0 --set prometheus.tcp.port=15699 > $root/log 2>&1 &
  B=$!; sleep 3
  if [ $mode = manual ]; then C="-q 200 -A 50"; else C="-a"; fi
  python3 -m bench --uri amqp://guest:guest@127.0.0.1:5804/%2F -t x-delayed-message -e dxl -u dlq --delay-ms 110000 -f persistent \
   -x 1 -y 1 -c 200 $C -r 10000 -z 100 --drain-timeout 30 --quiet --json $out/$mode-$r.json > /dev/null 2>&1
  curl -s localhost:15699/metrics | grep -E "^pybroker_(exchange_delayed_lateness|event_loop_lag|gc_pause)" > $out/$mode-$r.prom
  kill $B; wait $B; rm -rf $root
  python3 -c "
import json; d=json.load(open('$out/$mode-$r.json')); print('$mode', $r, d['latency_ms'], d['environment']['loadavg'])"
 done
done
