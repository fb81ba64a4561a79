#!/usr/bin/env bash
# Replication's cost on this machine (issue 35 item 9, first figures): the paper's shape
# against one broker with clustering off, then against the leader of a three-member cluster
# (three members and one etcd on the same 2 cores), alternated, 3 rounds of 10 s.
# Usage: bench/results/issue35-cluster/run.sh OUTDIR
set -euo pipefail
out=${1:-/tmp/issue35-bench}
mkdir -p "$out"
root=$(mktemp -d)
cd "$(dirname "$0")/../../.."
python3 -m broker --port 5699 --data-dir "$root/single" --set management.tcp.port=0 \
  --set prometheus.tcp.port=0 > "$root/single.log" 2>&1 &
SINGLE=$!
. bench/results/issue35-cluster/cluster.sh
start_cluster "$root" 23791 23801 5700 5710 /bench
for r in 1 2 3; do
  for t in single cluster; do
    port=5699; [ "$t" = cluster ] && port=5701
    echo "round $r $t load $(cut -d' ' -f1-3 /proc/loadavg)"
    python3 -m bench --scenario paper --uri "amqp://guest:guest@127.0.0.1:$port/%2F" -z 10 \
      --queue-args x-queue-type=quorum --quiet --json "$out/paper-$t-$r.json" > /dev/null 2>&1
    python3 -c "import json;d=json.load(open('$out/paper-$t-$r.json'));l=d['confirm_latency_ms'];print('$t', $r, d['ok'], round(d['rates']['confirm']), 'confirm p50', l.get('p50'), 'p99', l.get('p99'))"
  done
done
kill "${pids[@]}" $SINGLE $ETCD
