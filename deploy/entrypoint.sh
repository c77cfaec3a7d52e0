#!/bin/sh
# Roles of the one ragline image:
#   worker <ingest|query|control>   `ragline worker POOL` + its metrics endpoint (multiprocess mode)
#   beat                            the single scheduler (run exactly one)
#   flower                          monitoring UI (basic auth: RAGLINE_FLOWER_USER / RAGLINE_FLOWER_PASSWORD)
#   migrate                         apply schema migrations and exit
#   <anything else>                 executed as given (e.g. `ragline status`)
# In a container the endpoints listen beyond 127.0.0.1: a role that serves one refuses to start without
# its password in the environment, and `ragline secrets check` refuses a well-known or weak one.
set -eu
APP=ragline.shared.worker.celery_app:app
role="${1:-worker}"
case "$role" in
  worker)
    # one worker process per container (scale with replicas); `ragline worker` builds the worker
    # command line, concurrency and OpenMP threads exactly as under `ragline up`
    pool="${2:-ingest}"
    : "${RAGLINE_OPS_METRICS_PASSWORD:?set RAGLINE_OPS_METRICS_PASSWORD}"
    export PROMETHEUS_MULTIPROC_DIR="$RAGLINE_SERVICES_HOME/metrics/$pool"
    rm -rf "$PROMETHEUS_MULTIPROC_DIR" && mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
    # the pool's metrics endpoint runs beside the worker: restarted when it dies, after 1 s doubling
    # to 60 s (back to 1 s once it ran a minute), for as long as the worker runs. The worker itself
    # is the container's process: the orchestrator restarts it (compose `restart: unless-stopped`,
    # Kubernetes' restartPolicy Always with its crash-loop backoff; docs/operations.md)
    (
      delay=1
      while kill -0 $$ 2>/dev/null; do
        started=$(date +%s)
        python -m ragline.shared.worker.metrics_server "$pool" && code=0 || code=$?
        [ $(( $(date +%s) - started )) -ge 60 ] && delay=1
        echo "ragline: the $pool metrics server exited with status $code; restarting in ${delay}s" >&2
        sleep "$delay"
        delay=$(( delay * 2 > 60 ? 60 : delay * 2 ))
      done
    ) &
    exec ragline worker "$pool"
    ;;
  beat)
    exec celery -A "$APP" beat --loglevel "${RAGLINE_OPS_LOG_LEVEL:-INFO}" -s "$RAGLINE_SERVICES_HOME/celerybeat-schedule"
    ;;
  flower)
    : "${RAGLINE_FLOWER_PASSWORD:?set RAGLINE_FLOWER_PASSWORD}"
    # Flower reads its basic auth from the environment, so the password never shows in `ps`
    RAGLINE_FLOWER_HOST="${FLOWER_ADDRESS:-0.0.0.0}" ragline secrets check
    export FLOWER_BASIC_AUTH="${RAGLINE_FLOWER_USER:-admin}:${RAGLINE_FLOWER_PASSWORD}"
    exec celery -A "$APP" flower --address="${FLOWER_ADDRESS:-0.0.0.0}" --port=5555 --persistent=False
    ;;
  migrate)
    exec ragline migrate
    ;;
  *)
    exec "$@"
    ;;
esac
