#!/bin/bash
# one alternated session against RabbitMQ 3.10.8 (management off); ours on 5691
cd /work/main
rm -rf /tmp/sess3/d1
(python -m broker --port 5691 --data-dir /tmp/sess3/d1 --set management.tcp.port=0 --set prometheus.tcp.port=0 > /tmp/sess3/b5691.log 2>&1 &)
sleep 4
R=amqp://guest:guest@127.0.0.1:5672/%2F
O=amqp://guest:guest@127.0.0.1:5691/%2F
uptime > /tmp/sess3/load-start.txt
step() { name=$1; shift; echo "$name start $(cat /proc/loadavg)" >> /tmp/sess3/load.txt; "$@" > /tmp/sess3/$name.txt 2>&1; echo "$name end $(cat /proc/loadavg)" >> /tmp/sess3/load.txt; }
step celery-e2e python3 -m bench.celery_e2e --compare $R $O --names rabbitmq ours --rounds 5 --json /tmp/sess3/compare-celery-e2e.json
step sweep python3 -m bench sweep - --queues 1,2,5,15,30 -z 10 --rounds 3 --target rabbitmq-persist=default@$R --target ack=ack@$O --target ack-lite=ack-lite@$O --out /tmp/sess3/sweep-vs-rabbitmq.json --png /tmp/sess3/sweep-vs-rabbitmq.png
step fairness python3 -m bench.fairness $R $O $R $O
echo done > /tmp/sess3/done
