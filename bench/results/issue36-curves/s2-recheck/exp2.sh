#!/usr/bin/env bash
# s2 at 3600 msg/s: a broker that idled 320 s first (as the curves' did), against RabbitMQ
cd /work/main
out=/tmp/exp-s2b; mkdir -p $out
R=amqp://guest:guest@127.0.0.1:5672/%2F
P=amqp://guest:guest@127.0.0.1:5799/%2F
d=$(mktemp -d)
python3 -m broker --port 5799 --data-dir $d --set management.tcp.port=0 --set prometheus.tcp.port=15799 > $d.log 2>&1 &
b=$!
sleep 320
for r in 1 2 3; do
  for t in rabbit ours; do
    U=$R; [ $t = ours ] && U=$P
    python3 -m bench --scenario s2 --uri $U -z 20 -r 3600 --open-loop --quiet --json $out/$t-$r.json >/dev/null 2>&1
    python3 -c "import json;d=json.load(open('$out/$t-$r.json'));c=d['confirm_latency_ms'];print('$t',$r,c['p50'],c['p99'],c['p99.9'],c['max'])"
  done
done
curl -s http://127.0.0.1:15799/metrics | grep -E "^pybroker_(gc_pause|event_loop_lag)_seconds_(count|sum)" 
kill $b
