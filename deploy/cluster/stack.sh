#!/usr/bin/env bash
# Local Temporal cluster for crewlet: the Temporal server from its Go module
# (go.temporal.io/server), run as four processes (frontend, history, matching, worker) on
# loopback, with Postgres persistence and visibility in the dev stack's Postgres.
# For running the e2e suite and the benchmarks on something shaped like production; CI
# and `task test` keep the dev server (deploy/dev/stack.sh).
# Everything (config, logs, pids) lives under <repo>/.dev/cluster/; the binaries under
# <repo>/.dev/bin/; the cluster's state in the Postgres databases temporal and
# temporal_visibility, so it survives `down` (`reset` drops it).
#
#   deploy/cluster/stack.sh up       build what is missing, apply the schema, start what is not running
#   deploy/cluster/stack.sh down     stop the four services
#   deploy/cluster/stack.sh status   print each service up/down
#   deploy/cluster/stack.sh reset    stop the services and drop both databases
#   deploy/cluster/stack.sh env      print the CREWLET_* exports: eval "$(deploy/cluster/stack.sh env)"
#
# Needs the dev stack's Postgres and Redis up (deploy/dev/stack.sh up; `task stack:up:cluster`
# runs both). Ports (loopback only): frontend gRPC 7433 (HTTP 7443), history 7434,
# matching 7435, worker 7439; membership 6433, 6434, 6435, 6439. The dev server's 7233/8233
# are untouched, so both can run at once.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEV="$ROOT/.dev"
CL="$DEV/cluster"

HOST=127.0.0.1
# The server's version is the one deploy/temporal/go.mod requires, as the dev server's.
T_SRC="$ROOT/deploy/temporal"
SERVER_VERSION="$(sed -n 's/^[[:space:]]*go\.temporal\.io\/server \(v[^ ]*\).*/\1/p' "$T_SRC/go.mod" | head -n 1)"
# The temporal CLI this script drives the cluster with (namespace, search attributes).
CLI_VERSION=v1.5.1
BIN_DIR="$DEV/bin/temporal-server-$SERVER_VERSION"
SERVER="$BIN_DIR/temporal-server"
SQL_TOOL="$BIN_DIR/temporal-sql-tool"
# Four shards, as the issue asks (>= 4): enough that a namespace's workflows spread over
# several shards and their queues, few enough that 2 cores are not spent polling idle
# queues. The count is fixed when the database is created: change it with `reset`.
SHARDS=4
PG_PORT=55432
DB=temporal
VIS_DB=temporal_visibility
FRONTEND_PORT=7433
FRONTEND_HTTP_PORT=7443
ADDRESS="$HOST:$FRONTEND_PORT"
# Start order: history owns the shards and matching the queues; the frontend answers
# once both have joined, and the worker service (namespace deletion, schedules) last.
SERVICES=(history matching frontend worker)

log() { printf '%s\n' "$*"; }
die() { printf 'cluster: %s\n' "$*" >&2; exit 1; }

# shellcheck source=../stack-lib.sh
. "$ROOT/deploy/stack-lib.sh"

grpc_port() {
  case "$1" in frontend) echo 7433 ;; history) echo 7434 ;; matching) echo 7435 ;; worker) echo 7439 ;; esac
}
membership_port() {
  case "$1" in frontend) echo 6433 ;; history) echo 6434 ;; matching) echo 6435 ;; worker) echo 6439 ;; esac
}

pid_file() { printf '%s/%s.pid\n' "$CL" "$1"; }
log_file() { printf '%s/%s.log\n' "$CL" "$1"; }

# service_pid SVC: the pid of SVC if the pid file names a live process of this cluster.
service_pid() {
  local f pid
  f="$(pid_file "$1")"
  [[ -f "$f" ]] || return 1
  pid="$(cat "$f")"
  alive "$pid" || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "--service $1" || return 1
  printf '%s\n' "$pid"
}

# ---------------------------------------------------------------- tools

temporal_cli() {
  local b gobin
  if b="$(command -v temporal 2>/dev/null)"; then printf '%s\n' "$b"; return 0; fi
  gobin="$(go env GOBIN 2>/dev/null || true)"
  [[ -n "$gobin" ]] || gobin="$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin"
  if [[ ! -x "$gobin/temporal" ]]; then
    log "cluster: installing the temporal CLI $CLI_VERSION with go install (a few minutes, once)" >&2
    go install "github.com/temporalio/cli/cmd/temporal@$CLI_VERSION" >&2 \
      || die "go install github.com/temporalio/cli/cmd/temporal@$CLI_VERSION failed"
  fi
  printf '%s\n' "$gobin/temporal"
}

# ensure_server: build the server and its SQL tool from deploy/temporal's module (its
# go.mod names them as tools) once, into .dev/bin/temporal-server-VERSION/.
ensure_server() {
  [[ -x "$SERVER" && -x "$SQL_TOOL" ]] && return 0
  command -v go >/dev/null || die "no go toolchain to build go.temporal.io/server@$SERVER_VERSION"
  log "cluster: building go.temporal.io/server@$SERVER_VERSION (server and SQL tool) into $BIN_DIR (several minutes, once)"
  local started=$SECONDS
  mkdir -p "$BIN_DIR"
  (cd "$T_SRC" && go build -trimpath -ldflags="-s -w" -o "$SERVER" go.temporal.io/server/cmd/server \
    && go build -trimpath -ldflags="-s -w" -o "$SQL_TOOL" go.temporal.io/server/cmd/tools/sql) \
    || die "go build of go.temporal.io/server@$SERVER_VERSION in $T_SRC failed"
  log "cluster: built in $((SECONDS - started)) s"
}

psql_q() {
  local psql
  psql="$(command -v psql 2>/dev/null || ls -d /usr/lib/postgresql/*/bin/psql 2>/dev/null | sort -V | tail -n 1)"
  [[ -n "$psql" ]] || die "psql not found (install postgresql-client)"
  "$psql" -X -q -h "$HOST" -p "$PG_PORT" -U postgres -tA -v ON_ERROR_STOP=1 "$@"
}

# sql_tool ARGS...: Temporal's SQL tool on the dev Postgres; its output (every statement
# it runs) goes to .dev/cluster/schema.log, and the end of it to stderr when it fails.
sql_tool() {
  if ! "$SQL_TOOL" --plugin postgres12 --ep "$HOST" -p "$PG_PORT" -u postgres "$@" >>"$CL/schema.log" 2>&1; then
    tail -n 20 "$CL/schema.log" >&2
    return 1
  fi
}

# ---------------------------------------------------------------- schema

# schema_up DB NAME: create DB if missing, put the version tables in once, then apply
# every versioned step of Temporal's schema NAME (embedded in the tool from the module's
# schema/postgresql/v12/NAME) that is not applied yet; update-schema is a no-op when none is.
schema_up() {
  local db="$1" name="$2"
  if [[ "$(psql_q -d postgres -c "select 1 from pg_database where datname = '$db'")" != 1 ]]; then
    sql_tool --db "$db" create-database || die "schema: create database $db failed"
    log "schema: created database $db"
  fi
  if [[ "$(psql_q -d "$db" -c "select to_regclass('schema_version') is not null")" != t ]]; then
    sql_tool --db "$db" setup-schema -v 0.0 || die "schema: setup-schema on $db failed"
  fi
  sql_tool --db "$db" update-schema --schema-name "postgresql/v12/$name" \
    || die "schema: update-schema postgresql/v12/$name on $db failed (log: $CL/schema.log)"
  log "schema: $db at version $(psql_q -d "$db" -c "select curr_version from schema_version")"
}

# ---------------------------------------------------------------- config

# Lines of a KEY=VALUE file, without comments and blank lines.
config_lines() {
  [[ -f "$1" ]] || return 0
  sed -e 's/#.*//' -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' "$1" | grep -v '^$' || true
}

# render_config: the server config from deploy/cluster/temporal.yaml, and the dynamic
# config from the project's temporal-config/dynamic-config.txt (what the dev server gets)
# plus deploy/cluster/dynamic-config.txt (what start-dev sets by itself), as YAML.
render_config() {
  mkdir -p "$CL/config"
  local svc subst=()
  for svc in history matching frontend worker; do
    local up="${svc^^}"
    subst+=(-e "s|@${up}_PORT@|$(grpc_port "$svc")|g" -e "s|@${up}_MEMBERSHIP_PORT@|$(membership_port "$svc")|g")
  done
  sed -e "s|@SHARDS@|$SHARDS|g" -e "s|@DB@|$DB|g" -e "s|@VIS_DB@|$VIS_DB|g" \
      -e "s|@HOST@|$HOST|g" -e "s|@PG_PORT@|$PG_PORT|g" \
      -e "s|@FRONTEND_HTTP_PORT@|$FRONTEND_HTTP_PORT|g" \
      -e "s|@DYNAMIC_CONFIG@|$CL/config/dynamicconfig.yaml|g" "${subst[@]}" \
      "$ROOT/deploy/cluster/temporal.yaml" >"$CL/config/development.yaml"
  local left
  left="$(grep -v '^[[:space:]]*#' "$CL/config/development.yaml" | grep -o '@[A-Z_]*@' | head -n 1 || true)"
  [[ -z "$left" ]] || die "config: $left has no value in $CL/config/development.yaml (deploy/cluster/temporal.yaml names it, stack.sh does not set it)"
  local line
  {
    printf '# Rendered by deploy/cluster/stack.sh from temporal-config/dynamic-config.txt\n'
    printf '# and deploy/cluster/dynamic-config.txt; edit those, then run up again.\n'
    while IFS= read -r line; do
      printf '%s:\n  - value: %s\n' "${line%%=*}" "${line#*=}"
    done < <(config_lines "$ROOT/temporal-config/dynamic-config.txt"; config_lines "$ROOT/deploy/cluster/dynamic-config.txt")
  } >"$CL/config/dynamicconfig.yaml"
  # The server only warns about an unknown key or a wrong type at run time.
  "$SERVER" validate-dynamic-config "$CL/config/dynamicconfig.yaml" >"$CL/config/dynamicconfig.check" 2>&1 \
    || { cat "$CL/config/dynamicconfig.check" >&2; die "config: temporal-config/dynamic-config.txt or deploy/cluster/dynamic-config.txt has a key or value this server does not take"; }
  ! grep -q warning "$CL/config/dynamicconfig.check" \
    || { cat "$CL/config/dynamicconfig.check" >&2; die "config: the dynamic config has a key or value this server does not take"; }
}

# ---------------------------------------------------------------- services

service_launch() {
  local svc="$1" pid
  if pid="$(service_pid "$svc")"; then
    log "temporal $svc: already up (pid $pid)"
    return 0
  fi
  local port; port="$(grpc_port "$svc")"
  if port_open "$port"; then die "temporal $svc: port $port is taken by something else"; fi
  printf '%s\n' "$(date -Is) $SERVER --root $CL --config config --env development --allow-no-auth start --service $svc" >>"$(log_file "$svc")"
  # setsid: own session, so a Ctrl-C in the terminal that ran `up` does not reach it.
  setsid nohup "$SERVER" --root "$CL" --config config --env development --allow-no-auth \
    start --service "$svc" >>"$(log_file "$svc")" 2>&1 </dev/null 9>&- &
  echo $! >"$(pid_file "$svc")"
  log "temporal $svc: started (pid $!, log $(log_file "$svc"))"
}

cluster_healthy() {
  "$TEMPORAL" operator cluster health --address "$ADDRESS" --command-timeout 2s 2>/dev/null | grep -q SERVING
}

# wait_for WHAT SECONDS CMD...: retry CMD until it succeeds; on timeout, show the logs.
wait_for() {
  local what="$1" limit="$2"; shift 2
  local deadline=$((SECONDS + limit)) svc
  until "$@" >/dev/null 2>&1; do
    for svc in "${SERVICES[@]}"; do
      if ! service_pid "$svc" >/dev/null; then
        tail -n 20 "$(log_file "$svc")" >&2 || true
        die "temporal $svc exited while waiting for $what (log: $(log_file "$svc"))"
      fi
    done
    if ((SECONDS >= deadline)); then
      for svc in "${SERVICES[@]}"; do tail -n 5 "$(log_file "$svc")" >&2 || true; done
      die "$what: not done after $limit s (logs: $CL/*.log)"
    fi
    sleep 0.5
  done
}

# The dev server creates "default" and registers the search attributes on it at boot; a
# cluster starts with no namespace, so up does both (crewlet's org examples and the bare
# benchmark workers use "default"; the e2e suite registers a namespace of its own).
namespace_default() {
  "$TEMPORAL" operator namespace describe --address "$ADDRESS" --namespace default >/dev/null 2>&1 && return 0
  "$TEMPORAL" operator namespace create --address "$ADDRESS" --namespace default --retention 24h >/dev/null
}

search_attributes_default() {
  local have line name
  have="$("$TEMPORAL" operator search-attribute list --address "$ADDRESS" --namespace default 2>/dev/null)" || return 1
  while IFS= read -r line; do
    name="${line%%=*}"
    grep -qw "$name" <<<"$have" && continue
    "$TEMPORAL" operator search-attribute create --address "$ADDRESS" --namespace default \
      --name "$name" --type "${line#*=}" >/dev/null || return 1
  done < <(config_lines "$ROOT/temporal-config/search-attributes.txt")
}

service_down() {
  local svc="$1" pid
  if pid="$(service_pid "$svc")"; then
    kill "$pid" 2>/dev/null || true
    local i
    for ((i = 0; i < 150; i++)); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then kill -9 "$pid" 2>/dev/null || true; fi
    log "temporal $svc: stopped (pid $pid)"
  else
    log "temporal $svc: already down"
  fi
  rm -f "$(pid_file "$svc")"
}

# ---------------------------------------------------------------- commands

# env_lines PREFIX: the dev stack's Postgres and Redis, and this cluster's frontend;
# CREWLET_BENCH_TEMPORAL_PIDS tells the idle-seats benchmark whose CPU is Temporal's.
env_lines() {
  "$ROOT/deploy/dev/stack.sh" env | grep -v CREWLET_TEMPORAL_ADDRESS | sed "s/^export /$1/"
  printf "%sCREWLET_TEMPORAL_ADDRESS='%s'\n" "$1" "$ADDRESS"
  local svc pid pids=()
  for svc in "${SERVICES[@]}"; do
    if pid="$(service_pid "$svc")"; then pids+=("$pid"); fi
  done
  printf "%sCREWLET_BENCH_TEMPORAL_PIDS='%s'\n" "$1" "${pids[*]}"
}

lock() {
  mkdir -p "$CL"
  exec 9>"$CL/.lock"
  flock 9
}

cmd_up() {
  lock
  TEMPORAL="$(temporal_cli)"
  port_open "$PG_PORT" || die "Postgres is not up on $HOST:$PG_PORT: run deploy/dev/stack.sh up first (or task stack:up:cluster)"
  ensure_server
  schema_up "$DB" temporal
  schema_up "$VIS_DB" visibility
  render_config
  local svc
  for svc in "${SERVICES[@]}"; do service_launch "$svc"; done
  wait_for "the frontend to serve on $ADDRESS" 120 cluster_healthy
  wait_for "namespace default" 60 namespace_default
  wait_for "search attributes on namespace default" 60 search_attributes_default
  env_lines "" >"$DEV/cluster.env"
  log "cluster: serving on $ADDRESS ($SHARDS history shards, Postgres $DB/$VIS_DB)"
  log "env: $DEV/cluster.env (load with: set -a; . .dev/cluster.env; set +a)"
}

cmd_down() {
  lock
  local svc
  # Reverse of the start order: the frontend stops taking calls before history goes.
  for svc in worker frontend matching history; do service_down "$svc"; done
}

cmd_status() {
  local rc=0 svc pid
  for svc in "${SERVICES[@]}"; do
    if pid="$(service_pid "$svc")"; then
      log "temporal $svc: up   pid $pid, $HOST:$(grpc_port "$svc")"
    else
      log "temporal $svc: down"; rc=1
    fi
  done
  ((rc == 0)) && log "cluster: $ADDRESS ($SHARDS history shards, Postgres $DB/$VIS_DB)"
  return $rc
}

cmd_reset() {
  cmd_down
  port_open "$PG_PORT" || die "Postgres is not up on $HOST:$PG_PORT: nothing to drop"
  local db
  for db in "$DB" "$VIS_DB"; do
    psql_q -d postgres -c "drop database if exists $db with (force)" >/dev/null
    log "schema: dropped database $db"
  done
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  reset) cmd_reset ;;
  env) env_lines "export " ;;
  *) echo "usage: $0 up|down|status|reset|env" >&2; exit 2 ;;
esac
