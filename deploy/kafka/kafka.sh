#!/usr/bin/env bash
# A real single-node Apache Kafka broker (KRaft, broker+controller) on loopback, without Docker.
#
#   deploy/kafka/kafka.sh fetch            fetch the broker jars from Maven Central (cached)
#   deploy/kafka/kafka.sh start [--fresh]  start on 127.0.0.1:$KAFKA_PORT, wait until it answers
#   deploy/kafka/kafka.sh stop             stop it by PID
#   deploy/kafka/kafka.sh status           say whether it runs
#
# Environment: KAFKA_PORT (9092), KAFKA_CONTROLLER_PORT (KAFKA_PORT+1), KAFKA_HOME (.cache/kafka
# in the repo; jars, data and logs live below it), KAFKA_HEAP (512m), KAFKA_START_TIMEOUT (90 s).
# If KAFKA_BOOTSTRAP is set, start and stop do nothing: an existing cluster is used.
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

start() {
  if [ -n "${KAFKA_BOOTSTRAP:-}" ]; then say "KAFKA_BOOTSTRAP=$KAFKA_BOOTSTRAP: using that cluster"; return 0; fi
  local fresh=0
  [ "${1:-}" = "--fresh" ] && fresh=1
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

stop() {
  if [ -n "${KAFKA_BOOTSTRAP:-}" ]; then return 0; fi
  if ! running; then rm -f "$pidfile"; say "not running"; return 0; fi
  local pid; pid="$(cat "$pidfile")"
  kill -TERM "$pid"
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -0 "$pid" 2>/dev/null && { say "broker did not stop in 30s; killing"; kill -KILL "$pid"; }
  rm -f "$pidfile"
  say "stopped (pid $pid)"
}

case "${1:-}" in
  fetch) fetch ;;
  start) shift; start "$@" ;;
  stop) stop ;;
  status) if running; then echo "running pid $(cat "$pidfile") 127.0.0.1:$port"; else echo "stopped"; exit 1; fi ;;
  bootstrap) echo "${KAFKA_BOOTSTRAP:-127.0.0.1:$port}" ;;
  *) echo "usage: $0 fetch|start [--fresh]|stop|status|bootstrap" >&2; exit 2 ;;
esac
