#!/usr/bin/env bash
# Reproduce docs/img/flower-tasks.png: a throwaway stack (own home and ports), a few ingest and query
# tasks, then headless Chromium on Flower's task list. Needs `apt-get install -y chromium`.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
export RAGLINE_SERVICES_HOME=$(mktemp -d /tmp/rl-flower-XXXX)
export RAGLINE_FLOWER_PORT=${RAGLINE_FLOWER_PORT:-5599}
export RAGLINE_OPS_METRICS_PORT=${RAGLINE_OPS_METRICS_PORT:-9590}
export RAGLINE_FLOWER_PASSWORD=${RAGLINE_FLOWER_PASSWORD:-screenshot-only}
# the columns Flower hides by default: what a task shows of its arguments and result
export FLOWER_TASKS_COLUMNS=name,uuid,state,args,kwargs,result,received,runtime,worker
export RAGLINE_WORKERS_INGEST_CONCURRENCY=1 RAGLINE_WORKERS_QUERY_CONCURRENCY=1
trap '$BIN/ragline down >/dev/null 2>&1 || true; rm -rf "$RAGLINE_SERVICES_HOME"' EXIT
$BIN/ragline up
$BIN/ragline ingest docs --tenant demo --acl staff --wait
for q in "Как масштабировать пул запросов?" "What is the degraded mode?" "Где лежат метрики?"; do
  $BIN/ragline ask "$q" --tenant demo --groups staff >/dev/null || true
done
sleep 3
PROFILE=$(mktemp -d /tmp/rl-chrome-XXXX)
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --user-data-dir="$PROFILE" --window-size=1400,900 \
  --virtual-time-budget=8000 --screenshot="$PWD/docs/img/flower-tasks.png" \
  "http://admin:${RAGLINE_FLOWER_PASSWORD}@127.0.0.1:${RAGLINE_FLOWER_PORT}/tasks"
rm -rf "$PROFILE"
echo "saved docs/img/flower-tasks.png"
