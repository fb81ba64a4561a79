#!/usr/bin/env bash
# Issue 35 item 7's last point: with the default lease TTL (2 s), a saturating run of
# DURATION seconds (600) against a three-member cluster on this machine has no leader change.
# Prints the leader's term before and after, every "leads" line of the members' logs, and the
# bench's figures. Usage: bench/results/issue35-cluster/saturate.sh [DURATION] [OUTDIR]
set -euo pipefail
duration=${1:-600}
out=${2:-/tmp/issue35-saturate}
mkdir -p "$out"
root=$(mktemp -d)
cd "$(dirname "$0")/../../.."
. bench/results/issue35-cluster/cluster.sh
start_cluster "$root" 23792 23802 5720 5730 /sat
term() { ETCDCTL_API=3 etcdctl --endpoints 127.0.0.1:23792 get /sat/leader -w json \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["kvs"][0]["create_revision"])'; }
echo "term before: $(term)  load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 -m bench --scenario paper --uri "amqp://guest:guest@127.0.0.1:5721/%2F" -z "$duration" \
  --queue-args x-queue-type=quorum --quiet --json "$out/saturate.json" > /dev/null 2>&1 || true
echo "term after:  $(term)  load $(cut -d' ' -f1-3 /proc/loadavg)"
grep -h "leads, term\|stops leading\|stalled\|dropped" "$root"/m*.log | cut -c1-160 || true
python3 -c "import json;d=json.load(open('$out/saturate.json'));l=d['confirm_latency_ms'];print('ok', d['ok'], 'confirm msg/s', round(d['rates']['confirm']), 'p50', l.get('p50'), 'p99', l.get('p99'), 'max', l.get('max'))"
kill "${pids[@]}" $ETCD
