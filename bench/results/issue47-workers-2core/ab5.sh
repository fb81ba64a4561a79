#!/bin/bash
# Issue 47 item 6 on 2 cores: the starting commit (BASE tree, one process) against this
# tree with workers = 1 (the default) and workers = 2, alternated, ROUNDS rounds (5).
# usage: BASE=/path/to/8da52eb-checkout bash ab5.sh [ROUNDS]   (results in /tmp/perf/ab5/)
# The broker's CPU is its whole process tree's, from /proc; the bench is the s2 shape on
# 4 queues (1 producer + 1 consumer each, 16 B, confirms 200, prefetch 200), 8 s.
set -u
HERE=$(git rev-parse --show-toplevel)
BASE=${BASE:?a checkout of the starting commit}
ROUNDS=${1:-5}
OUT=/tmp/perf/ab5; mkdir -p $OUT
run() {  # run LABEL TREE FLAGS
  local label=$1 tree=$2 flags=$3
  rm -rf /tmp/perf/ab5-data
  (cd $tree && exec python3 -m broker $flags --port 5696 --data-dir /tmp/perf/ab5-data \
     --set management.tcp.port=0 --set prometheus.tcp.port=0 > $OUT/$label.log 2>&1) &
  local node=$!
  for i in $(seq 100); do grep -q "ready to accept" $OUT/$label.log && break; sleep 0.1; done
  cpu() { local t=0; for p in $node $(cat /proc/$node/task/$node/children 2>/dev/null); do
    t=$((t + $(awk '{print $14+$15}' /proc/$p/stat))); done; echo $t; }
  local c0; c0=$(cpu)
  pids() { echo $node $(cat /proc/$node/task/$node/children 2>/dev/null); }
  local per0; per0=$(for p in $(pids); do echo "$p:$(awk '{print $14+$15}' /proc/$p/stat)"; done)
  (cd $HERE && python3 -m bench --uri amqp://guest:guest@127.0.0.1:5696/%2F --scenario s2 \
     --queue-pattern 'ab-%d' --queue-pattern-from 1 --queue-pattern-to 4 -x 1 -y 1 -z 8 \
     --json $OUT/$label.json --quiet > $OUT/$label.txt 2>&1)
  local c1; c1=$(cpu)
  local per=""  # CPU seconds of each process of the tree: node first, then the workers
  for entry in $per0; do p=${entry%%:*}; t0=${entry##*:}
    t1=$(awk '{print $14+$15}' /proc/$p/stat 2>/dev/null || echo $t0)
    per="$per $(python3 -c "import os;print(round(($t1-$t0)/os.sysconf('SC_CLK_TCK'),2))")"; done
  echo "$label per-process cpu s:$per" >> $OUT/per_process.txt
  kill $node; wait $node 2>/dev/null
  python3 - $OUT/$label.json $c0 $c1 $label <<'PY'
import json, os, sys
d = json.load(open(sys.argv[1]))
def find(d, k):
    if isinstance(d, dict):
        for kk, v in d.items():
            if kk == k:
                return v
            r = find(v, k)
            if r is not None:
                return r
    return None
cpu = (int(sys.argv[3]) - int(sys.argv[2])) / os.sysconf("SC_CLK_TCK")
recv = find(d, "consumed") or find(d, "received") or 0
print(f"{sys.argv[4]:10} consumed {recv:>9} msg/s {recv/8:>9.0f} broker_cpu_s {cpu:6.2f} "
      f"us/msg {cpu*1e6/max(1, recv):6.2f} p99_ms {find(d, 'p99')}")
PY
}
# the order rotates each round: on this VM the first run of a round tends to be the fastest
configs=("base|$BASE|" "w1|$HERE|--workers 1" "w2|$HERE|--workers 2")
for r in $(seq $ROUNDS); do
  echo "# round $r load $(cut -d' ' -f1 /proc/loadavg)"
  for k in 0 1 2; do
    IFS='|' read -r name tree flags <<< "${configs[$(( (r - 1 + k) % 3 ))]}"
    run $name-$r $tree "$flags"
  done
done
