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
etcd --name e1 --data-dir "$root/etcd" --listen-client-urls http://127.0.0.1:23791 \
  --advertise-client-urls http://127.0.0.1:23791 --listen-peer-urls http://127.0.0.1:23801 \
  --initial-advertise-peer-urls http://127.0.0.1:23801 \
  --initial-cluster e1=http://127.0.0.1:23801 > "$root/etcd.log" 2>&1 &
ETCD=$!
python3 -m broker --port 5699 --data-dir "$root/single" --set management.tcp.port=0 \
  --set prometheus.tcp.port=0 > "$root/single.log" 2>&1 &
SINGLE=$!
pids=()
for i in 1 2 3; do
  python3 -m broker --port 570$i --data-dir "$root/m$i" --set management.tcp.port=0 \
    --set prometheus.tcp.port=0 --set node_name=rabbit@m$i --set clustering.enabled=true \
    --set clustering.etcd_endpoints=127.0.0.1:23791 --set clustering.port=571$i \
    --set clustering.etcd_prefix=/bench > "$root/m$i.log" 2>&1 &
  pids+=($!)
  [ "$i" = 1 ] && sleep 3
done
sleep 8
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
