#!/usr/bin/env bash
# Issue 35 item 9's last target: a broker with clustering off is as fast as before the
# cluster was built. BASE (a checkout of the commit before issue 35's first, 5b7ad41^) and
# this checkout each run one broker (management and Prometheus off), then
# `python -m bench compare` alternates them, 5 A/B rounds of 10 s, in the paper's shape and
# in s2 (16 B, confirms and acks). Usage: ab.sh BASE_CHECKOUT OUTDIR
set -euo pipefail
base=$1
out=${2:-/tmp/issue35-ab}
mkdir -p "$out"
root=$(mktemp -d)
here=$(cd "$(dirname "$0")/../../.." && pwd)
(cd "$base" && exec python3 -m broker --port 5790 --data-dir "$root/base" \
  --set management.tcp.port=0 --set prometheus.tcp.port=0) > "$root/base.log" 2>&1 &
A=$!
(cd "$here" && exec python3 -m broker --port 5791 --data-dir "$root/head" \
  --set management.tcp.port=0 --set prometheus.tcp.port=0) > "$root/head.log" 2>&1 &
B=$!
trap 'kill $A $B 2>/dev/null || true' EXIT
sleep 4
cd "$here"
for shape in paper s2; do
  echo "$shape: load $(cut -d' ' -f1-3 /proc/loadavg)"
  python3 -m bench compare --scenario "$shape" --rounds 5 -z 10 --names base head \
    --out "$out/ab-$shape.json" amqp://guest:guest@127.0.0.1:5790/%2F \
    amqp://guest:guest@127.0.0.1:5791/%2F 2>&1 | tail -n 12
  echo "$shape done: load $(cut -d' ' -f1-3 /proc/loadavg)"
done
