#!/bin/bash
# A/B: this session's final code against its starting commit 8e9ad7c, 5 alternated rounds per
# scenario, management and Prometheus off, one broker process each on its own port
set -u
BASE=/tmp/ab/base NEW=/tmp/ab/new OUT=/tmp/ab/out
mkdir -p $OUT; rm -rf /tmp/ab/dA /tmp/ab/dB
(cd $BASE && exec python3 -m broker --port 5693 --data-dir /tmp/ab/dA --set management.tcp.port=0 --set prometheus.tcp.port=0 > $OUT/base.log 2>&1) &
(cd $NEW && exec python3 -m broker --port 5694 --data-dir /tmp/ab/dB --set management.tcp.port=0 --set prometheus.tcp.port=0 > $OUT/new.log 2>&1) &
sleep 5
A=amqp://guest:guest@127.0.0.1:5693/%2F
B=amqp://guest:guest@127.0.0.1:5694/%2F
step() { name=$1; shift; echo "$name start $(cat /proc/loadavg)" >> $OUT/load.txt; (cd /work/main && python3 -m bench compare $A $B --names base new --rounds 5 -z 10 --out $OUT/$name.json "$@") > $OUT/$name.txt 2>&1; echo "$name end $(cat /proc/loadavg)" >> $OUT/load.txt; }
uptime > $OUT/load-start.txt
step s1 --scenario s1
step s2_messageid --scenario s2 --message-id
step s2_celery --scenario s2 --message-id --properties celery
step paper --scenario paper
pkill -f "broker --port 5693"; pkill -f "broker --port 5694"
echo done > $OUT/done
