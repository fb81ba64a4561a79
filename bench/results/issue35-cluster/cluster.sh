# Sourced by run.sh, compare.sh and saturate.sh (issue 35's benchmarks): one etcd and three
# members of this broker on this machine, m1 started first so it leads.
# start_cluster ROOT ETCD_CLIENT_PORT ETCD_PEER_PORT AMQP_BASE REPL_BASE PREFIX: member i
# (1-3) serves AMQP on AMQP_BASE+i and replicates on REPL_BASE+i; sets ETCD (its pid) and
# pids (the members'); returns once the members have had time to sync.
start_cluster() {
  local root=$1 client=$2 peer=$3 amqp=$4 repl=$5 prefix=$6 i
  etcd --name e1 --data-dir "$root/etcd" --listen-client-urls "http://127.0.0.1:$client" \
    --advertise-client-urls "http://127.0.0.1:$client" \
    --listen-peer-urls "http://127.0.0.1:$peer" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "e1=http://127.0.0.1:$peer" > "$root/etcd.log" 2>&1 &
  ETCD=$!
  pids=()
  for i in 1 2 3; do
    python3 -m broker --port $((amqp + i)) --data-dir "$root/m$i" \
      --set management.tcp.port=0 --set prometheus.tcp.port=0 --set node_name="rabbit@m$i" \
      --set clustering.enabled=true --set clustering.etcd_endpoints="127.0.0.1:$client" \
      --set clustering.port=$((repl + i)) --set clustering.etcd_prefix="$prefix" \
      > "$root/m$i.log" 2>&1 &
    pids+=($!)
    [ "$i" = 1 ] && sleep 3
  done
  sleep 8
}
