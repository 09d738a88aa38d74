#!/usr/bin/env bash
# Real Apache Kafka brokers (KRaft, broker+controller) on loopback, without Docker: one, or a
# cluster of three as production runs (KAFKA_NODES=3).
#
#   deploy/kafka/kafka.sh fetch            fetch the broker jars from Maven Central (cached)
#   deploy/kafka/kafka.sh start [--fresh]  start on 127.0.0.1:$KAFKA_PORT, wait until it answers
#   deploy/kafka/kafka.sh stop             stop it (every node) by PID
#   deploy/kafka/kafka.sh status           say whether it runs
#   deploy/kafka/kafka.sh bootstrap        the bootstrap servers to give clients
#   deploy/kafka/kafka.sh kill             SIGKILL the broker (a crash: no clean shutdown)
#   deploy/kafka/kafka.sh stop-node N      (KAFKA_NODES=3) stop node N only, a broker failure
#   deploy/kafka/kafka.sh kill-node N      (KAFKA_NODES=3) SIGKILL node N only, a broker crash
#   deploy/kafka/kafka.sh start-node N     (KAFKA_NODES=3) start node N again
#
# KAFKA_NODES=3: three nodes on KAFKA_PORT, KAFKA_PORT+10 and KAFKA_PORT+20 (controllers one port
# above each), internal topics replicated 3 times with min.insync.replicas 2, so that losing one
# node stops nothing; create the project's topics with kafka.replication_factor = 3 and
# kafka.min_insync_replicas = 2.
# Environment: KAFKA_PORT (9092), KAFKA_CONTROLLER_PORT (KAFKA_PORT+1), KAFKA_HOME (.cache/kafka
# in the repo; jars, data and logs live below it), KAFKA_HEAP (512m), KAFKA_START_TIMEOUT (90 s).
# If KAFKA_BOOTSTRAP is set, start does nothing (an existing cluster is used), and stop stops only a
# local broker of KAFKA_PORT that runs, saying so.
# KAFKA_SASL_SCRAM=user:password (with --fresh) adds a SASL_PLAINTEXT listener on KAFKA_SASL_PORT
# (KAFKA_PORT+2) with that SCRAM-SHA-512 user, for the security tests.
# KAFKA_SSL_KEYSTORE=file.pem (the broker's private key, unencrypted PKCS#8, and its certificate chain)
# adds a TLS listener on KAFKA_SSL_PORT (KAFKA_PORT+3), for the security tests.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml")"
home="${KAFKA_HOME:-$repo/.cache/kafka}"
libs="$home/libs-$version"
port="${KAFKA_PORT:-9092}"
cport="${KAFKA_CONTROLLER_PORT:-$((port + 1))}"
run="$home/run-$port"
pidfile="$run/kafka.pid"
timeout="${KAFKA_START_TIMEOUT:-90}"
nodes="${KAFKA_NODES:-1}"
case "$nodes" in 1|3) ;; *) echo "kafka.sh: KAFKA_NODES must be 1 or 3, not $nodes" >&2; exit 2 ;; esac

say() { echo "kafka.sh: $*" >&2; }

fetch() {
  if [ -f "$libs/.complete" ]; then return 0; fi
  command -v mvn >/dev/null || { say "Maven (mvn) is not installed: apt-get install maven"; exit 3; }
  command -v java >/dev/null || { say "Java is not installed: apt-get install openjdk-17-jre-headless"; exit 3; }
  say "fetching Apache Kafka $version jars from Maven Central into $libs"
  mkdir -p "$libs"
  if ! mvn -q -B -f "$here/pom.xml" dependency:copy-dependencies \
        -DoutputDirectory="$libs" -DincludeScope=runtime >"$home/mvn-fetch.log" 2>&1; then
    tail -20 "$home/mvn-fetch.log" >&2
    say "could not fetch the Kafka jars from Maven Central (log: $home/mvn-fetch.log)."
    say "Fix: give Maven access to Maven Central (proxy settings in ~/.m2/settings.xml), or set"
    say "KAFKA_BOOTSTRAP=host:port to use an existing Kafka cluster instead of the local broker."
    exit 3
  fi
  touch "$libs/.complete"
}

running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

node_port() { echo $((port + 10 * ($1 - 1))); }
node_run() { echo "$run/node-$1"; }
node_running() { local f; f="$(node_run "$1")/kafka.pid"; [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null; }
servers() {
  if [ "$nodes" = 1 ]; then echo "127.0.0.1:$port"; return; fi
  local out="" i; for i in 1 2 3; do out="$out${out:+,}127.0.0.1:$(node_port "$i")"; done; echo "$out"
}

start() {
  if [ -n "${KAFKA_BOOTSTRAP:-}" ]; then say "KAFKA_BOOTSTRAP=$KAFKA_BOOTSTRAP: using that cluster"; return 0; fi
  local fresh=0
  [ "${1:-}" = "--fresh" ] && fresh=1
  if [ "$nodes" = 3 ]; then start_cluster "$fresh"; return; fi
  if running; then say "already running (pid $(cat "$pidfile")) on 127.0.0.1:$port"; return 0; fi
  fetch
  [ $fresh = 1 ] && rm -rf "$run"
  mkdir -p "$run/logs"
  sed -e "s:@PORT@:$port:g" -e "s:@CONTROLLER_PORT@:$cport:g" -e "s:@DATA_DIR@:$run:g" \
    "$here/server.properties.in" >"$run/server.properties"
  local scram=()
  if [ -n "${KAFKA_SASL_SCRAM:-}" ]; then  # user:password -> a SASL_PLAINTEXT listener with SCRAM-SHA-512
    local sport="${KAFKA_SASL_PORT:-$((port + 2))}" user="${KAFKA_SASL_SCRAM%%:*}" pass="${KAFKA_SASL_SCRAM#*:}"
    sed -i -e "s|^listeners=\(.*\)|listeners=\1,SASL_PLAINTEXT://127.0.0.1:$sport|" \
           -e "s|^advertised.listeners=\(.*\)|advertised.listeners=\1,SASL_PLAINTEXT://127.0.0.1:$sport|" \
           -e "s|^listener.security.protocol.map=\(.*\)|listener.security.protocol.map=\1,SASL_PLAINTEXT:SASL_PLAINTEXT|" \
           "$run/server.properties"
    cat >>"$run/server.properties" <<EOT
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
EOT
    scram=(--add-scram "SCRAM-SHA-512=[name=$user,password=$pass]")
  fi
  if [ -n "${KAFKA_SSL_KEYSTORE:-}" ]; then  # a PEM file (private key + certificate chain) -> an SSL listener
    [ -r "$KAFKA_SSL_KEYSTORE" ] || { say "KAFKA_SSL_KEYSTORE=$KAFKA_SSL_KEYSTORE is not a readable file"; exit 2; }
    local tport="${KAFKA_SSL_PORT:-$((port + 3))}"
    sed -i -e "s|^listeners=\(.*\)|listeners=\1,SSL://127.0.0.1:$tport|" \
           -e "s|^advertised.listeners=\(.*\)|advertised.listeners=\1,SSL://127.0.0.1:$tport|" \
           -e "s|^listener.security.protocol.map=\(.*\)|listener.security.protocol.map=\1,SSL:SSL|" \
           "$run/server.properties"
    cat >>"$run/server.properties" <<EOT
listener.name.ssl.ssl.keystore.type=PEM
listener.name.ssl.ssl.keystore.location=$KAFKA_SSL_KEYSTORE
EOT
  fi
  local cp="$libs/*"
  local jvm=(java "-Xmx${KAFKA_HEAP:-512m}" "-Xms128m" -XX:+UseG1GC -Djava.awt.headless=true
             "-Dlog4j.configuration=file:$here/log4j.properties" "-Dkafka.logs.dir=$run/logs" -cp "$cp")
  if [ ! -f "$run/log/meta.properties" ]; then
    local cluster_id
    cluster_id="$("${jvm[@]}" kafka.tools.StorageTool random-uuid)"
    "${jvm[@]}" kafka.tools.StorageTool format -t "$cluster_id" -c "$run/server.properties" "${scram[@]}" \
      >"$run/logs/format.log" 2>&1 \
      || { cat "$run/logs/format.log" >&2; exit 1; }
  fi
  local t0=$SECONDS
  # gc.log (the broker only, not the storage tool): its pauses, to tell a GC stall from the JIT
  # warm-up of a fresh broker (bench/TARGETS.md)
  nohup "${jvm[@]}" "-Xlog:gc:file=$run/logs/gc.log:uptime" kafka.Kafka "$run/server.properties" \
    >"$run/logs/stdout.log" 2>&1 &
  echo $! >"$pidfile"
  until grep -q "Kafka Server started" "$run/logs/server.log" 2>/dev/null \
        && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    if ! running; then tail -n 30 "$run/logs/stdout.log" "$run/logs/server.log" >&2 || true; say "broker exited"; exit 1; fi
    if (( SECONDS - t0 > timeout )); then say "broker did not answer within ${timeout}s"; stop; exit 1; fi
    sleep 0.5
  done
  say "Apache Kafka $version (KRaft) up on 127.0.0.1:$port, pid $(cat "$pidfile"), in $((SECONDS - t0))s; data $run"
}

jvm_for() {  # the java command line in JVM, logs under $1
  JVM=(java "-Xmx${KAFKA_HEAP:-512m}" "-Xms128m" -XX:+UseG1GC -Djava.awt.headless=true
       "-Dlog4j.configuration=file:$here/log4j.properties" "-Dkafka.logs.dir=$1/logs" -cp "$libs/*")
}

start_cluster() {  # three KRaft nodes, each broker and controller
  fetch
  [ "$1" = 1 ] && rm -rf "$run"
  local voters="" i
  for i in 1 2 3; do voters="$voters${voters:+,}$i@127.0.0.1:$(( $(node_port "$i") + 1 ))"; done
  local cluster_id=""
  [ -f "$run/cluster.id" ] && cluster_id="$(cat "$run/cluster.id")"
  for i in 1 2 3; do
    local d p; d="$(node_run "$i")"; p="$(node_port "$i")"
    mkdir -p "$d/logs"
    sed -e "s:@PORT@:$p:g" -e "s:@CONTROLLER_PORT@:$((p + 1)):g" -e "s:@DATA_DIR@:$d:g" \
        -e "s|^node.id=.*|node.id=$i|" -e "s|^controller.quorum.voters=.*|controller.quorum.voters=$voters|" \
        -e "s|^offsets.topic.replication.factor=.*|offsets.topic.replication.factor=3|" \
        -e "s|^transaction.state.log.replication.factor=.*|transaction.state.log.replication.factor=3|" \
        -e "s|^transaction.state.log.min.isr=.*|transaction.state.log.min.isr=2|" \
        -e "s|^default.replication.factor=.*|default.replication.factor=3|" \
        -e "s|^min.insync.replicas=.*|min.insync.replicas=2|" \
        "$here/server.properties.in" >"$d/server.properties"
    if [ ! -f "$d/log/meta.properties" ]; then
      jvm_for "$d"
      [ -n "$cluster_id" ] || cluster_id="$("${JVM[@]}" kafka.tools.StorageTool random-uuid)"
      echo "$cluster_id" >"$run/cluster.id"
      "${JVM[@]}" kafka.tools.StorageTool format -t "$cluster_id" -c "$d/server.properties" \
        >"$d/logs/format.log" 2>&1 || { cat "$d/logs/format.log" >&2; exit 1; }
    fi
  done
  for i in 1 2 3; do start_node "$i" nowait; done
  for i in 1 2 3; do wait_node "$i"; done
  say "Apache Kafka $version (KRaft) cluster of 3 up on $(servers); data $run"
}

start_node() {  # start node $1 of the cluster; wait until it answers unless $2 = nowait
  local d p; d="$(node_run "$1")"; p="$(node_port "$1")"
  if node_running "$1"; then say "node $1 already running"; return 0; fi
  jvm_for "$d"
  nohup "${JVM[@]}" kafka.Kafka "$d/server.properties" >"$d/logs/stdout.log" 2>&1 &
  echo $! >"$d/kafka.pid"
  [ "${2:-}" = nowait ] || wait_node "$1"
}

wait_node() {
  local d p t0=$SECONDS; d="$(node_run "$1")"; p="$(node_port "$1")"
  until grep -q "Kafka Server started" "$d/logs/server.log" 2>/dev/null && (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; do
    node_running "$1" || { tail -n 30 "$d/logs/stdout.log" "$d/logs/server.log" >&2 || true; say "node $1 exited"; exit 1; }
    (( SECONDS - t0 > timeout )) && { say "node $1 did not answer within ${timeout}s"; exit 1; }
    sleep 0.5
  done
  say "node $1 up on 127.0.0.1:$p, pid $(cat "$d/kafka.pid")"
}

stop_pid() {  # stop the process of pidfile $1
  local pid; pid="$(cat "$1")"
  kill -TERM "$pid"
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -0 "$pid" 2>/dev/null && { say "pid $pid did not stop in 30s; killing"; kill -KILL "$pid"; }
  rm -f "$1"
  say "stopped (pid $pid)"
}

kill_pid() {  # SIGKILL the process of pidfile $1 and wait until it is gone
  local pid; pid="$(cat "$1")"
  kill -KILL "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  rm -f "$1"
  say "killed (pid $pid)"
}

stop_node() { if node_running "$1"; then stop_pid "$(node_run "$1")/kafka.pid"; else say "node $1 not running"; fi; }

stop_cluster() {  # every node at once: the last one alone would wait for a controller quorum
  local i f pids=()
  for i in 1 2 3; do f="$(node_run "$i")/kafka.pid"; node_running "$i" && { pids+=("$(cat "$f")"); kill -TERM "$(cat "$f")"; }; done
  for _ in $(seq 1 60); do
    local alive=0; for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break; sleep 0.5
  done
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && { say "pid $pid did not stop in 30s; killing"; kill -KILL "$pid"; }; done
  for i in 1 2 3; do rm -f "$(node_run "$i")/kafka.pid"; done
  say "cluster stopped (${#pids[@]} nodes)"
}

stop() {
  if [ "$nodes" = 3 ]; then stop_cluster; return 0; fi
  if ! running; then
    rm -f "$pidfile"
    if [ -n "${KAFKA_BOOTSTRAP:-}" ]; then say "no local broker on port $port; KAFKA_BOOTSTRAP=$KAFKA_BOOTSTRAP names a cluster this script does not stop"
    else say "not running"; fi
    return 0
  fi
  stop_pid "$pidfile"
}

case "${1:-}" in
  fetch) fetch ;;
  start) shift; start "$@" ;;
  stop) stop ;;
  status)
    if [ "$nodes" = 3 ]; then
      up=0; for i in 1 2 3; do if node_running "$i"; then up=$((up + 1)); echo "node $i running 127.0.0.1:$(node_port "$i")"; else echo "node $i stopped"; fi; done
      [ "$up" -gt 0 ] || exit 1
    elif running; then echo "running pid $(cat "$pidfile") 127.0.0.1:$port"; else echo "stopped"; exit 1; fi ;;
  bootstrap) echo "${KAFKA_BOOTSTRAP:-$(servers)}" ;;
  kill)
    [ "$nodes" = 1 ] || { say "kill: with KAFKA_NODES=3, kill-node N"; exit 2; }
    if running; then kill_pid "$pidfile"; else say "no broker running on port $port"; exit 1; fi ;;
  stop-node|start-node|kill-node)
    [ "$nodes" = 3 ] || { say "$1 needs KAFKA_NODES=3"; exit 2; }
    case "${2:-}" in 1|2|3) ;; *) say "$1 N: N is 1, 2 or 3"; exit 2 ;; esac
    case "$1" in
      stop-node) stop_node "$2" ;;
      start-node) start_node "$2" ;;
      kill-node) if node_running "$2"; then kill_pid "$(node_run "$2")/kafka.pid"; else say "node $2 not running"; fi ;;
    esac ;;
  *) echo "usage: $0 fetch|start [--fresh]|stop|kill|status|bootstrap|stop-node N|kill-node N|start-node N" >&2; exit 2 ;;
esac
