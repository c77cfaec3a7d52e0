#!/usr/bin/env bash
# Create (or update) ragline's Secrets, one per component, from environment variables:
#   RAGLINE_SERVICES_DATABASE_URL=postgresql://ragline:...@db:5432/ragline \
#   RAGLINE_SERVICES_QUERY_DATABASE_URL=postgresql://ragline_query_login:...@db:5432/ragline \
#   REDIS_WORKER_PASSWORD=... REDIS_FLOWER_PASSWORD=... REDIS_METRICS_PASSWORD=... \
#   RAGLINE_OPS_METRICS_PASSWORD=... RAGLINE_FLOWER_PASSWORD=... \
#   [RAGLINE_PROVIDERS_VOYAGE_API_KEY=...] [RAGLINE_PROVIDERS_ANTHROPIC_API_KEY=...] [RAGLINE_PROVIDERS_OPENAI_API_KEY=...] \
#   deploy/k8s/create-secrets.sh
# The roles behind the two database URLs: deploy/postgres/10-ragline-roles.sql. Values reach kubectl
# as files in a private temporary folder, never on a command line. The Redis passwords are those of
# the Redis's per-component users (`ragline redis-acl` prints the ACL SETUSER lines to create them):
# workers and beat log in as `worker`, Flower as `flower`, KEDA as `metrics`.
set -euo pipefail
NS=${NAMESPACE:-ragline}
REDIS_HOST=${REDIS_HOST:-redis.ragline.svc.cluster.local}
: "${RAGLINE_SERVICES_DATABASE_URL:?set RAGLINE_SERVICES_DATABASE_URL (owner role ragline)}"
: "${RAGLINE_SERVICES_QUERY_DATABASE_URL:?set RAGLINE_SERVICES_QUERY_DATABASE_URL (ragline_query_login)}"
: "${REDIS_WORKER_PASSWORD:?set REDIS_WORKER_PASSWORD (Redis user worker)}"
: "${REDIS_FLOWER_PASSWORD:?set REDIS_FLOWER_PASSWORD (Redis user flower)}"
: "${REDIS_METRICS_PASSWORD:?set REDIS_METRICS_PASSWORD (Redis user metrics)}"
: "${RAGLINE_OPS_METRICS_PASSWORD:?set RAGLINE_OPS_METRICS_PASSWORD}"
: "${RAGLINE_FLOWER_PASSWORD:?set RAGLINE_FLOWER_PASSWORD}"

umask 077
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT

# secret NAME KEY=VALUE...: create or replace the Secret NAME with the non-empty values given
secret() {
  local name=$1 kv
  shift
  mkdir "$DIR/$name"
  for kv in "$@"; do
    if [ -n "${kv#*=}" ]; then
      printf '%s' "${kv#*=}" >"$DIR/$name/${kv%%=*}"
    fi
  done
  kubectl -n "$NS" create secret generic "$name" --from-file="$DIR/$name" --dry-run=client -o yaml \
    | kubectl apply -f -
}

secret ragline-db-owner "DATABASE_URL=$RAGLINE_SERVICES_DATABASE_URL"
secret ragline-db-query "RAGLINE_SERVICES_QUERY_DATABASE_URL=$RAGLINE_SERVICES_QUERY_DATABASE_URL"
# a password in a URL: percent-encode what is not URL-safe (openssl rand -hex needs none)
secret ragline-redis-worker "REDIS_URL=redis://worker:$REDIS_WORKER_PASSWORD@$REDIS_HOST:6379/0"
secret ragline-redis-flower "REDIS_URL=redis://flower:$REDIS_FLOWER_PASSWORD@$REDIS_HOST:6379/0"
secret ragline-redis-metrics "REDIS_USERNAME=metrics" "REDIS_PASSWORD=$REDIS_METRICS_PASSWORD"
secret ragline-metrics "RAGLINE_OPS_METRICS_PASSWORD=$RAGLINE_OPS_METRICS_PASSWORD"
secret ragline-flower "RAGLINE_FLOWER_PASSWORD=$RAGLINE_FLOWER_PASSWORD"
secret ragline-providers \
  "RAGLINE_PROVIDERS_VOYAGE_API_KEY=${RAGLINE_PROVIDERS_VOYAGE_API_KEY:-}" \
  "RAGLINE_PROVIDERS_ANTHROPIC_API_KEY=${RAGLINE_PROVIDERS_ANTHROPIC_API_KEY:-}" \
  "RAGLINE_PROVIDERS_OPENAI_API_KEY=${RAGLINE_PROVIDERS_OPENAI_API_KEY:-}"
