#!/usr/bin/env bash
# run-queue wait (schedstat) of a process's threads during one s2 run: name uri pid
name=$1; uri=$2; pid=$3
snap() { for t in /proc/$pid/task/*; do echo "$(cat $t/comm) $(cat $t/schedstat)"; done | awk '{cpu[$1]+=$2; w[$1]+=$3; n[$1]+=$4} END {for (k in cpu) printf "%s %.0f %.0f %.0f\n", k, cpu[k], w[k], n[k]}' | sort; }
snap > /tmp/bw/s0
python3 -m bench --scenario s2 --uri $uri -z 20 -r ${RATE:-3600} --open-loop --quiet --json /tmp/bw/sched-$name.json >/dev/null 2>&1
snap > /tmp/bw/s1
python3 -c "import json;d=json.load(open('/tmp/bw/sched-$name.json'));c=d['confirm_latency_ms'];print('$name','p50',c['p50'],'p99',c['p99'],'p99.9',c['p99.9'])"
join /tmp/bw/s0 /tmp/bw/s1 | awk '{dc=($5-$2)/1e9; dw=($6-$3)/1e9; dn=$7-$4; if (dn>100) printf "  %-16s cpu %.2f s  runq wait %.3f s  slices %d  mean wait %.1f us\n", $1, dc, dw, dn, dw/dn*1e6}'
