#!/bin/bash
# one alternated session against RabbitMQ 3.10.8 (management off); ours on 5691 (persist) and 5693 (ack-lite)
cd /work/main
pkill -f "broker --port 569" ; sleep 1
rm -rf /tmp/sess2/d1 /tmp/sess2/d3
(python -m broker --port 5691 --data-dir /tmp/sess2/d1 --set management.tcp.port=0 --set prometheus.tcp.port=0 > /tmp/sess2/b5691.log 2>&1 &)
(python -m broker --port 5693 --data-dir /tmp/sess2/d3 --set management.tcp.port=0 --set prometheus.tcp.port=0 --set confirm_on=ack-lite > /tmp/sess2/b5693.log 2>&1 &)
sleep 4
R=amqp://guest:guest@127.0.0.1:5672/%2F
O=amqp://guest:guest@127.0.0.1:5691/%2F
L=amqp://guest:guest@127.0.0.1:5693/%2F
C="python3 -m bench compare -z 10 --names rabbitmq ours"
uptime > /tmp/sess2/load-start.txt
step() { name=$1; shift; "$@" > /tmp/sess2/$name.txt 2>&1; echo "$name $(cat /proc/loadavg)" >> /tmp/sess2/load.txt; }
step paper10-mid $C $R $O --scenario paper --queue-pattern-to 10 --message-id --rounds 3 --json /tmp/sess2/compare-paper10-mid.json
step paper-mid $C $R $O --scenario paper --message-id --rounds 3 --json /tmp/sess2/compare-paper-mid.json
step s2-mid $C $R $O --scenario s2 --message-id --rounds 3 --json /tmp/sess2/compare-s2-mid.json
step s2-celery $C $R $O --scenario s2 --properties celery --rounds 3 --json /tmp/sess2/compare-s2-celery.json
step s2 $C $R $O --scenario s2 --rounds 3 --json /tmp/sess2/compare-s2.json
step s1-mid $C $R $O --scenario s1 --message-id --rounds 3 --json /tmp/sess2/compare-s1-mid.json
step acklite-q1 $C $R $L --scenario paper --rounds 3 --json /tmp/sess2/compare-acklite-q1.json
step acklite-q2 $C $R $L --scenario paper --queue-pattern-to 2 --rounds 3 --json /tmp/sess2/compare-acklite-q2.json
step celery-e2e python3 -m bench.celery_e2e --compare $R $O --names rabbitmq ours --rounds 3 --json /tmp/sess2/compare-celery-e2e.json
step fairness python3 -m bench.fairness $R $O $R $O
echo done > /tmp/sess2/done
