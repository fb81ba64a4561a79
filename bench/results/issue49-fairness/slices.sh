cd /work/main
for s in 64 128 256; do
  port=$((5800 + s % 1000 / 64))
  rm -rf /tmp/f49/sl$s
  (python3 -m broker --port $port --data-dir /tmp/f49/sl$s --set management.tcp.port=0 --set prometheus.tcp.port=0 --set reader_slice=$s > /tmp/f49/sl$s.log 2>&1 &)
done
sleep 4
for r in 1 2 3; do for s in 64 128 256; do port=$((5800 + s % 1000 / 64))
  while awk '{exit !($1 > 1.5)}' /proc/loadavg; do sleep 2; done
  python3 /work/shared/device16/amqpperf.py --uri amqp://guest:guest@127.0.0.1:$port/%2F -x 1 -y 1 -s 16 -q 200 -A 50 -c 200 -z 8 --quiet 2>/dev/null | python3 -c "
import json,sys; d=json.loads(sys.stdin.read()); l=d['latency_ms']; print('slice $s', round(d['rates']['publish']), 'p99', l['p99'], 'max', l['max'], 'cores', d['broker']['cores_window'], 'us/msg', round(d['broker']['cores_window']*8e6/d['window']['published'],2), 'load', d['load']['start'][0])"
done; done
python3 -m bench.fairness --shape greedy --seconds 25 --rounds 2 --quiet-load 1.5 amqp://guest:guest@127.0.0.1:5801/%2F amqp://guest:guest@127.0.0.1:5802/%2F amqp://guest:guest@127.0.0.1:5804/%2F
