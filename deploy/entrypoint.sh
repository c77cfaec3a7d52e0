#!/bin/sh
# Roles of the one ragline image:
#   worker <ingest|query|control>   worker pool + its metrics endpoint (multiprocess mode)
#   beat                            the single scheduler (run exactly one)
#   flower                          monitoring UI (basic auth from FLOWER_BASIC_AUTH)
#   migrate                         apply schema migrations and exit
#   <anything else>                 executed as given (e.g. `ragline status`)
set -eu
APP=ragline.shared.celery_app:app
role="${1:-worker}"
case "$role" in
  worker)
    pool="${2:-ingest}"
    case "$pool" in
      ingest) queues=ingest; conc="${RAGLINE_INGEST_CONCURRENCY:-2}"; kind=prefork ;;
      # RAGLINE_QUERY_POOL=auto (default): threads with an in-process model, else solo (see
      # shared/settings.py); a solo pod runs one question at a time: scale query pods by replicas
      query) queues=query; conc="${RAGLINE_QUERY_CONCURRENCY:-2}"
             kind="$(python -c 'from ragline.shared.settings import get_settings; print(get_settings().effective_query_pool)')" ;;
      control) queues=acl,maintenance; conc="${RAGLINE_ACL_CONCURRENCY:-1}"; kind=prefork ;;
      *) echo "unknown pool $pool" >&2; exit 2 ;;
    esac
    export PROMETHEUS_MULTIPROC_DIR="$RAGLINE_HOME/metrics/$pool"
    rm -rf "$PROMETHEUS_MULTIPROC_DIR" && mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
    python -m ragline.shared.metrics_server "$pool" &
    case "$kind" in threads|solo) export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}" ;; esac
    if [ "$kind" = solo ]; then set --; else set -- -c "$conc"; fi
    exec celery -A "$APP" worker -Q "$queues" -n "$pool@%h" "$@" --pool "$kind" -E \
      --without-gossip --without-mingle --loglevel "${RAGLINE_LOG_LEVEL:-INFO}"
    ;;
  beat)
    exec celery -A "$APP" beat --loglevel "${RAGLINE_LOG_LEVEL:-INFO}" -s "$RAGLINE_HOME/celerybeat-schedule"
    ;;
  flower)
    : "${FLOWER_BASIC_AUTH:?set FLOWER_BASIC_AUTH=user:password}"
    exec celery -A "$APP" flower --address="${FLOWER_ADDRESS:-0.0.0.0}" --port=5555 --persistent=False
    ;;
  migrate)
    exec ragline migrate
    ;;
  *)
    exec "$@"
    ;;
esac
