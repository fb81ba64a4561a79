#!/usr/bin/env bash
# Issue 48 item 5: steady-state throughput and confirm latency of a three-member cluster,
# the starting commit (BASE checkout) against this tree, alternated: `python -m bench
# compare` publishes to the leader of each (s2: 16 B, confirms 200, acks; 3 rounds of 10 s).
# Usage: ab-cluster.sh BASE_CHECKOUT OUTDIR
set -euo pipefail
base=$1
out=${2:-/tmp/issue48-ab}
mkdir -p "$out"
here=$(cd "$(dirname "$0")/../../.." && pwd)
root=$(mktemp -d)
pids=()
trap 'kill ${pids[@]} 2>/dev/null || true' EXIT
start() {  # start TREE NAME CLIENT_PORT PEER_PORT AMQP_BASE REPL_BASE
  local tree=$1 name=$2 client=$3 peer=$4 amqp=$5 repl=$6 i
  mkdir -p "$root/$name"
  etcd --name e1 --data-dir "$root/$name/etcd" --listen-client-urls "http://127.0.0.1:$client" \
    --advertise-client-urls "http://127.0.0.1:$client" --listen-peer-urls "http://127.0.0.1:$peer" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "e1=http://127.0.0.1:$peer" > "$root/$name/etcd.log" 2>&1 &
  pids+=($!)
  sleep 1
  for i in 1 2 3; do
    (cd "$tree" && exec python3 -m broker --port $((amqp + i)) --data-dir "$root/$name/m$i" \
      --set management.tcp.port=0 --set prometheus.tcp.port=0 \
      --set clustering.enabled=true --set clustering.etcd_endpoints="127.0.0.1:$client" \
      --set clustering.port=$((repl + i)) --set clustering.etcd_prefix="/$name") \
      > "$root/$name/m$i.log" 2>&1 &
    pids+=($!)
    if [ "$i" = 1 ]; then sleep 3; fi
  done
}
start "$base" base 2391 2392 5810 5820
start "$here" head 2393 2394 5830 5840
sleep 10
cd "$here"
echo "s2: load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 -m bench compare --scenario s2 --rounds 3 -z 10 --names base head \
  --out "$out/ab-cluster-s2.json" amqp://guest:guest@127.0.0.1:5811/%2F \
  amqp://guest:guest@127.0.0.1:5831/%2F 2>&1 | tail -n 14
echo "done: load $(cut -d' ' -f1-3 /proc/loadavg)"
