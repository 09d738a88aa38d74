#!/usr/bin/env bash
# `make demo`: the local broker (unless KAFKA_BOOTSTRAP is set), the topics, two workers, the
# shipped sample replayed through them, a verdict summary; then it stops what it started.
# DEMO_KEEP=1 keeps the broker and the workers running (their status pages open) until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
PORT="${DEMO_PORT:-9092}"
WEB_PORT="${DEMO_WEB_PORT:-6066}"  # the workers' status pages: this port and the next (0: none)
started_broker=0
pids=()
states=()  # the workers' state folders
prefix="demo$(date +%s)"

cleanup() {
  for p in "${pids[@]:-}"; do [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
  # the workers' state is of this run's topics only: gone with them (their logs and the verdicts stay)
  for d in "${states[@]:-}"; do [ -n "$d" ] && rm -rf "$d"; done
  # without KAFKA_BOOTSTRAP, which this script sets for its clients: kafka.sh leaves a named cluster alone
  if [ $started_broker = 1 ]; then env -u KAFKA_BOOTSTRAP KAFKA_PORT="$PORT" deploy/kafka/kafka.sh stop; fi
}
trap cleanup EXIT

if [ -z "${KAFKA_BOOTSTRAP:-}" ]; then
  KAFKA_PORT=$PORT deploy/kafka/kafka.sh start
  started_broker=1
  export KAFKA_BOOTSTRAP="127.0.0.1:$PORT"
fi
# topic names private to this demo run, so that it can be repeated against the same cluster
export STREAM_DEDUP_TOPICS__PAGES="$prefix.pages" STREAM_DEDUP_TOPICS__DLQ="$prefix.pages.dlq" \
       STREAM_DEDUP_TOPICS__VERDICTS="$prefix.verdicts" STREAM_DEDUP_TOPICS__UNIQUE="$prefix.unique" \
       STREAM_DEDUP_TOPICS__DUPLICATE="$prefix.duplicate" STREAM_DEDUP_TOPICS__CLUSTERS="$prefix.clusters" \
       STREAM_DEDUP_TOPICS__INTERNAL_PREFIX="$prefix" \
       STREAM_DEDUP_WORKER__APP_ID="$prefix" STREAM_DEDUP_TOPICS__PARTITIONS=4

echo "== topics apply"
$BIN/stream-dedup topics apply

echo "== two workers"
mkdir -p .cache/demo
for i in 1 2; do
  states+=(".cache/demo/$prefix-w$i")
  port=$(( WEB_PORT ? WEB_PORT + i - 1 : 0 ))
  STREAM_DEDUP_WORKER__STATE_DIR="${states[-1]}" STREAM_DEDUP_WORKER__WEB_PORT=$port \
    STREAM_DEDUP_WORKER__NAME="demo-w$i" $BIN/stream-dedup worker >".cache/demo/$prefix-w$i.log" 2>&1 &
  pids+=($!)
  if [ "$port" != 0 ]; then
    echo "worker demo-w$i: status page http://127.0.0.1:$port/status, metrics http://127.0.0.1:$port/metrics"
  fi
done

echo "== produce examples/sample.jsonl"
n=$(grep -c . examples/sample.jsonl)
$BIN/stream-dedup produce examples/sample.jsonl --no-progress

echo "== verdicts (waiting for all $n)"
# first until the workers have processed every event and everything the events caused: a copy
# judged before its original (two workers, each at its own pace) is revised when the original
# arrives, so the events can take more verdict records than there are events, and the last
# revision can come after every event has a verdict; then the verdicts topic as it is then
$BIN/stream-dedup status --wait-drained --timeout 180 >/dev/null
$BIN/stream-dedup tail --to-end >".cache/demo/$prefix.verdicts.jsonl"
echo "(every verdict record, revisions included: .cache/demo/$prefix.verdicts.jsonl)"
$BIN/python - ".cache/demo/$prefix.verdicts.jsonl" "$n" <<'PY'
import json, sys
latest = {}
for line in open(sys.argv[1], encoding="utf-8"):
    v = json.loads(line)
    if v["id"] not in latest or v["revision"] >= latest[v["id"]]["revision"]:
        latest[v["id"]] = v
for v in sorted(latest.values(), key=lambda v: v["ts"]):
    what = "unique" if v["verdict"] == "unique" else f"{v['match']} duplicate of {v['duplicate_of']} ({v['detector']})"
    print(f"  {v['id']:18} {what}")
kinds = {}
for v in latest.values():
    k = v["verdict"] if v["verdict"] == "unique" else f"duplicate/{v['match']}"
    kinds[k] = kinds.get(k, 0) + 1
print(f"summary: {len(latest)} of {sys.argv[2]} events have verdicts: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
sys.exit(0 if len(latest) == int(sys.argv[2]) else 1)
PY
if [ "${DEMO_KEEP:-0}" = 1 ]; then
  echo "== DEMO_KEEP=1: the broker on $KAFKA_BOOTSTRAP and both workers keep running; Ctrl-C stops them"
  [ "$WEB_PORT" != 0 ] && echo "   status pages: http://127.0.0.1:$WEB_PORT/status and http://127.0.0.1:$(( WEB_PORT + 1 ))/status"
  trap 'exit 0' INT TERM
  while true; do sleep 1; done
fi
