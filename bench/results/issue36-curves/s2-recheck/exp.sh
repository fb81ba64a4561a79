#!/usr/bin/env bash
# s2 at 3600 msg/s open loop: RabbitMQ, this broker as is, with GC off, and spinning
cd /work/main
out=/tmp/exp-s2; mkdir -p $out
R=amqp://guest:guest@127.0.0.1:5672/%2F
P=amqp://guest:guest@127.0.0.1:5798/%2F
runp() {  # name flags
  d=$(mktemp -d)
  python3 /tmp/exp_broker.py $2 -- --port 5798 --data-dir $d --set management.tcp.port=0 --set prometheus.tcp.port=0 > $d.log 2>&1 &
  b=$!; sleep 4
  python3 -m bench --scenario s2 --uri $P -z 20 -r 3600 --open-loop --quiet --json $out/$1-$r.json >/dev/null 2>&1
  kill $b; wait $b 2>/dev/null
  python3 -c "import json;d=json.load(open('$out/$1-$r.json'));c=d['confirm_latency_ms'];print('$1',$r,c['p50'],c['p99'],c['p99.9'],c['max'])"
}
for r in 1 2 3; do
  python3 -m bench --scenario s2 --uri $R -z 20 -r 3600 --open-loop --quiet --json $out/rabbit-$r.json >/dev/null 2>&1
  python3 -c "import json;d=json.load(open('$out/rabbit-$r.json'));c=d['confirm_latency_ms'];print('rabbit',$r,c['p50'],c['p99'],c['p99.9'],c['max'])"
  runp plain ""
  runp gcoff "--gc-off"
  runp spin "--spin"
done
