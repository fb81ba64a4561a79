# issue 50: the steady state (publishing at 10 000 msg/s for 210 s with x-delay 110 s, so from 110 s
# 10 000 msg/s fall due while 1.1 M wait); usage: [CONS="-a"] [MODE=auto] [WORKERS=2] bash steady.sh OUTDIR
CONS=${CONS:-"-q 200 -A 50"}; MODE=${MODE:-manual}
out=$(realpath -m "${1:?OUTDIR}"); mkdir -p "$out"
cd "$(dirname "$0")/../../../.."
while awk '{exit !($1 > 1.5)}' /proc/loadavg; do sleep 2; done
root=$(mktemp -d)
python3 -m broker ${WORKERS:+--workers $WORKERS} --port 5804 --data-dir "$root/d" --set management.tcp.port=0 --set prometheus.tcp.port=15699 > $root/log 2>&1 &
B=$!; sleep 3
python3 -m bench --uri amqp://guest:guest@127.0.0.1:5804/%2F -t x-delayed-message -e dxl -u dlq --delay-ms 110000 -f persistent \
   -x 1 -y 1 -c 200 $CONS -r 10000 -z 210 --drain-timeout 30 --quiet --json $out/$MODE-1.json > /dev/null 2>&1
curl -s localhost:15699/metrics | grep -E "^pybroker_(exchange_delayed_lateness|event_loop_lag|gc_pause)" > $out/$MODE-1.prom
kill $B; wait $B; rm -rf $root
