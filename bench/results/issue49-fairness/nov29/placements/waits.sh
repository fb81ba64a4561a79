# issue 49, 29 Nov: the greedy flood by placement (bench.fairness --placement), RabbitMQ on 5672
# (run.sh) or not (waits.sh); usage: bash SCRIPT OUTDIR
set -u
out=$(realpath -m "${1:?OUTDIR}"); mkdir -p "$out"
root=$(mktemp -d)
cd "$(dirname "$0")/../../../.."
python3 -m broker --workers 2 --port 5792 --data-dir $root/h2 --set management.tcp.port=0 --set prometheus.tcp.port=0 > $root/h2.log 2>&1 &
B=$!
python3 -m broker --port 5791 --data-dir $root/h --set management.tcp.port=0 --set prometheus.tcp.port=0 > $root/h.log 2>&1 &
A=$!
sleep 6
for r in 1 2; do
  for cfg in "head 5791 any" "head2 5792 together" "head2 5792 across"; do
    set -- $cfg
    python3 -m bench.fairness --shape greedy --placement $3 --seconds 25 --quiet-load 1.5 \
      --json $out/waits-$1-$3-$r.json amqp://guest:guest@127.0.0.1:$2/%2F 2>&1 | tail -1 | sed "s/^/$1 $3 $r: /"
  done
done
grep -h "took" $root/*.log | tail -5
kill $A $B; wait
