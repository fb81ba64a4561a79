#!/bin/bash
# usage: pair.sh NAME [extra bench args]: s2 A/B both orders
set -u
NAME=$1; shift
BASE=/tmp/ab/base NEW=/tmp/ab/new OUT=/tmp/ab/out
rm -rf /tmp/ab/dA /tmp/ab/dB
(cd $BASE && exec python3 -m broker --port 5693 --data-dir /tmp/ab/dA --set management.tcp.port=0 --set prometheus.tcp.port=0 > $OUT/base3.log 2>&1) &
(cd $NEW && exec python3 -m broker --port 5694 --data-dir /tmp/ab/dB --set management.tcp.port=0 --set prometheus.tcp.port=0 > $OUT/new3.log 2>&1) &
sleep 5
A=amqp://guest:guest@127.0.0.1:5693/%2F
B=amqp://guest:guest@127.0.0.1:5694/%2F
echo "$NAME start $(cat /proc/loadavg)" >> $OUT/load.txt
(cd /work/main && python3 -m bench compare $A $B --names base new --rounds 5 -z 10 --out $OUT/$NAME.json "$@") > $OUT/$NAME.txt 2>&1
(cd /work/main && python3 -m bench compare $B $A --names new base --rounds 5 -z 10 --out $OUT/$NAME-swapped.json "$@") > $OUT/$NAME-swapped.txt 2>&1
echo "$NAME end $(cat /proc/loadavg)" >> $OUT/load.txt
pkill -f "broker --port 5693"; pkill -f "broker --port 5694"
echo done > $OUT/done-$NAME
