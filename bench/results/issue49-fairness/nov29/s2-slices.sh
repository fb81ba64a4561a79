#!/usr/bin/env bash
# The s2 shape with the project's own client (python -m bench --scenario s2, 10 s),
# alternated over any brokers; prints msg/s, broker CPU µs per message and e2e p99 per run,
# then medians. Usage: bash s2-slices.sh OUT.jsonl ROUNDS NAME=DIR:PORT[:EXTRA-ARG] ...
# (29 Nov: base=<91ebd23>:5790 old=<this tree>:5791 hold=<a variant>:5792
#  noslice=<this tree>:5793:--set=reader_slice=100000)
out=$1; rounds=$2; shift 2
here=$(cd "$(dirname "$0")/../../../.." && pwd)
root=$(mktemp -d); pids=()
declare -A uri
for spec in "$@"; do
  name=${spec%%=*}; rest=${spec#*=}; dir=${rest%%:*}; rest=${rest#*:}; port=${rest%%:*}; extra=${rest#*:}
  [ "$extra" = "$port" ] && extra=""
  (cd "$dir" && exec python3 -m broker $extra --port "$port" --data-dir "$root/$name" \
    --set management.tcp.port=0 --set prometheus.tcp.port=0) > "$root/$name.log" 2>&1 &
  pids+=($!); uri[$name]=amqp://guest:guest@127.0.0.1:$port/%2F
done
trap 'kill ${pids[@]} 2>/dev/null' EXIT
sleep 4; cd "$here"
for r in $(seq "$rounds"); do for spec in "$@"; do name=${spec%%=*}
  while awk -v q="${QUIET:-1.5}" '{exit !($1 > q)}' /proc/loadavg; do sleep 2; done
  python3 -m bench --scenario s2 --uri "${uri[$name]}" -z 10 --quiet --json "$root/r.json" > /dev/null 2>&1
  python3 -c "
import json; d=json.load(open('$root/r.json')); b=d['broker']; l=d['latency_ms']
print(json.dumps({'name':'$name','round':$r,'publish':d['rates']['publish'],'cpu_us':b['cpu_us_per_message'],'p99':l['p99'],'load':d['environment']['loadavg'][0]}))" | tee -a "$out"
done; done
python3 - "$out" <<'PY'
import json, sys, statistics, collections
by = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line); by[r["name"]].append(r)
for n, rs in by.items():
    print(n, "publish median", statistics.median(r["publish"] for r in rs),
          "cpu/msg median", statistics.median(r["cpu_us"] for r in rs),
          "p99 median", statistics.median(r["p99"] for r in rs))
PY
