#!/usr/bin/env bash
# s2 open loop at RATES: RabbitMQ (fresh), this broker with busy_wait_us=0 and =W values; CPU per run
cd /work/main
out=${OUT:-/tmp/bw/out}; mkdir -p $out
R=amqp://guest:guest@127.0.0.1:5672/%2F
declare -A PORT
i=0
for w in $WINDOWS; do
  d=$(mktemp -d); port=$((5810+i)); i=$((i+1)); PORT[$w]=$port
  python3 -m broker --port $port --data-dir $d --set management.tcp.port=0 --set prometheus.tcp.port=0 --set busy_wait_us=$w > $d.log 2>&1 &
  echo "w=$w port=$port pid=$!"
done
sleep ${WARMUP:-60}
cpu() { awk "{printf \"%.2f\", (\$14+\$15)/100}" /proc/$1/stat; }
rpid=$(pgrep -f "beam.smp" | head -1)
quiet() { while awk '{exit !($1>=1.5)}' /proc/loadavg; do sleep 5; done; }
for rate in $RATES; do
for r in 1 2 3; do
  quiet; l=$(cut -d' ' -f1 /proc/loadavg); c0=$(cpu $rpid)
  python3 -m bench --scenario s2 --uri $R -z 20 -r $rate --open-loop --quiet --json $out/rabbit-$rate-$r.json >/dev/null 2>&1
  c1=$(cpu $rpid)
  python3 -c "import json;d=json.load(open('$out/rabbit-$rate-$r.json'));c=d['confirm_latency_ms'];print('rabbit',$rate,$r,'load',$l,'p50',c['p50'],'p99',c['p99'],'p99.9',c['p99.9'],'max',c['max'],'cpu_s',$c1-$c0)"
  for w in $WINDOWS; do
    quiet; l=$(cut -d' ' -f1 /proc/loadavg)
    p=${PORT[$w]}; bpid=$(pgrep -f "port $p " | head -1); c0=$(cpu $bpid)
    python3 -m bench --scenario s2 --uri amqp://guest:guest@127.0.0.1:$p/%2F -z 20 -r $rate --open-loop --quiet --json $out/w$w-$rate-$r.json >/dev/null 2>&1
    c1=$(cpu $bpid)
    python3 -c "import json;d=json.load(open('$out/w$w-$rate-$r.json'));c=d['confirm_latency_ms'];print('w$w',$rate,$r,'load',$l,'p50',c['p50'],'p99',c['p99'],'p99.9',c['p99.9'],'max',c['max'],'cpu_s',$c1-$c0)"
  done
done
done
pkill -f "busy_wait_us=" 
