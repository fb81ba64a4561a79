#!/usr/bin/env bash
# A three-node RabbitMQ cluster on this machine for issue 35's comparison: nodes r1..r3
# (AMQP 5681-5683, distribution 25681-25683), each with its own data and log directories
# under ROOT, r2 and r3 joined to r1 with `rabbitmqctl join_cluster`. No plugins (the
# management plugin costs CPU while timing).
# Usage: rabbit_cluster.sh start|stop [ROOT]
set -euo pipefail
cmd=${1:-start}
root=${2:-/tmp/rabbit-cluster}
env_for() {
  local i=$1
  export RABBITMQ_NODENAME=r$i@localhost RABBITMQ_NODE_PORT=568$i \
    RABBITMQ_DIST_PORT=2568$i RABBITMQ_MNESIA_BASE=$root/r$i/mnesia \
    RABBITMQ_LOG_BASE=$root/r$i/log RABBITMQ_ENABLED_PLUGINS_FILE=$root/r$i/enabled_plugins \
    RABBITMQ_CONFIG_FILE=$root/r$i/rabbitmq RABBITMQ_PID_FILE=$root/r$i/pid
}
case $cmd in
start)
  for i in 1 2 3; do
    mkdir -p "$root/r$i/log" "$root/r$i/mnesia"
    echo "[]." > "$root/r$i/enabled_plugins"
    printf 'loopback_users.guest = false\n' > "$root/r$i/rabbitmq.conf"
  done
  chown -R rabbitmq:rabbitmq "$root" 2>/dev/null || true  # the server runs as rabbitmq
  for i in 1 2 3; do
    (env_for "$i"; rabbitmq-server -detached)
  done
  for i in 1 2 3; do
    until rabbitmqctl -n "r$i@localhost" await_startup --timeout 120 >/dev/null 2>&1; do sleep 1; done
  done
  for i in 2 3; do
    rabbitmqctl -n "r$i@localhost" stop_app >/dev/null
    rabbitmqctl -n "r$i@localhost" join_cluster r1@localhost >/dev/null
    rabbitmqctl -n "r$i@localhost" start_app >/dev/null
  done
  rabbitmqctl -n r1@localhost cluster_status | sed -n '/Running Nodes/,/Versions/p'
  ;;
stop)
  for i in 1 2 3; do
    rabbitmqctl -n "r$i@localhost" stop >/dev/null 2>&1 || true
  done
  ;;
esac
