#!/bin/bash
# usage: run.sh LABEL  (broker from the current tree of /work/main or $TREE)
TREE=${TREE:-$(git rev-parse --show-toplevel)}
cd $TREE
pkill -f "broker --workers ${WORKERS:-2} --port 5695" ; sleep 1
rm -rf /tmp/perf/data
python3 -m broker --workers ${WORKERS:-2} --port 5695 --data-dir /tmp/perf/data --set management.tcp.port=0 --set prometheus.tcp.port=0 > /tmp/perf/broker.log 2>&1 &
NODE=$!
for i in $(seq 50); do grep -q "ready to accept" /tmp/perf/broker.log && break; sleep 0.2; done
cpu() { local t=0; for p in $NODE $(cat /proc/$NODE/task/$NODE/children); do s=$(awk '{print $14+$15}' /proc/$p/stat); t=$((t+s)); done; echo $t; }
c0=$(cpu)
cd "$TREE" && python3 -m bench --uri amqp://guest:guest@127.0.0.1:5695/%2F --scenario s2 --queue-pattern 'cross-%d' --queue-pattern-from 1 --queue-pattern-to 4 -x 1 -y 1 -z 8 --json /tmp/perf/$1.json --quiet > /tmp/perf/$1.txt 2>&1
c1=$(cpu)
python3 - "$1" $c0 $c1 <<'PY'
import json,sys,os
d=json.load(open(f"/tmp/perf/{sys.argv[1]}.json"))
ticks=(int(sys.argv[3])-int(sys.argv[2]))/os.sysconf("SC_CLK_TCK")
def find(d,k):
    if isinstance(d,dict):
        for kk,v in d.items():
            if kk==k: return v
            r=find(v,k)
            if r is not None: return r
    return None
sent=find(d,"published") or find(d,"sent"); recv=find(d,"consumed") or find(d,"received")
print(sys.argv[1], "broker cpu s", round(ticks,2), "pub", sent, "cons", recv, "us/msg", round(ticks*1e6/max(1,(recv or 0)),2), "p99", find(d,"p99") )
PY
kill $NODE; wait $NODE 2>/dev/null
