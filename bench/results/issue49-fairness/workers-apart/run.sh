#!/usr/bin/env bash
# issue 49: is a greedy flood on worker 0 visible to a bystander on worker 1? One --workers 2
# broker; per round: bystander alone (apart), flood apart, flood placed as connections come.
# Usage: bash run.sh OUTDIR (29 Nov: summary.txt and the JSON files here)
out=$(realpath -m "${1:?OUTDIR}"); mkdir -p "$out"
cd "$(dirname "$0")/../../../.."
root=$(mktemp -d)
python3 -m broker --port 5805 --workers 2 --data-dir "$root/d" --set management.tcp.port=0 \
  --set prometheus.tcp.port=0 > $out/broker.log 2>&1 &
B=$!; sleep 6
U=amqp://guest:guest@127.0.0.1:5805/%2F
for r in 1 2 3; do
  for cfg in "none apart" "greedy apart" "greedy any"; do
    set -- $cfg
    python3 -m bench.fairness --shape $1 --placement $2 --seconds 25 --quiet-load 1.5 \
      --json $out/$1-$2-$r.json $U 2>&1 | tail -1 | sed "s/^/$1 $2 $r: /"
  done
done
kill $B; wait $B
