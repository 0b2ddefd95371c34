#!/usr/bin/env bash
# Local dev stack for crewlet: Temporal dev server (deploy/temporal), Postgres, Redis.
# Everything (data, logs, pids) lives under <repo>/.dev/.
#
#   deploy/dev/stack.sh up       start what is not running (installs what is missing)
#   deploy/dev/stack.sh down     stop all three
#   deploy/dev/stack.sh status   print each service up/down
#   deploy/dev/stack.sh env      print the CREWLET_* exports: eval "$(deploy/dev/stack.sh env)"
#   deploy/dev/stack.sh browser  install Debian's chromium for the browser tests if missing
#
# Ports (loopback only): Temporal 7233 (UI 8233), Postgres 55432, Redis 56379.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEV="$ROOT/.dev"

HOST=127.0.0.1
TEMPORAL_PORT=7233
TEMPORAL_UI_PORT=8233
PG_PORT=55432
PG_DB=crewlet
REDIS_PORT=56379

PG_URL="postgres://postgres@$HOST:$PG_PORT/$PG_DB?sslmode=disable"
REDIS_URL="redis://$HOST:$REDIS_PORT/0"
TEMPORAL_ADDRESS="$HOST:$TEMPORAL_PORT"

T_DIR="$DEV/temporal"
T_PID="$T_DIR/server.pid"
T_LOG="$T_DIR/server.log"
PG_DIR="$DEV/postgres"
PG_DATA="$PG_DIR/data"
PG_RUN="$PG_DIR/run"
PG_LOG="$PG_DIR/log/postgres.log"
R_DIR="$DEV/redis"
R_CONF="$ROOT/deploy/dev/redis.conf"

log() { printf '%s\n' "$*"; }
die() { printf 'stack: %s\n' "$*" >&2; exit 1; }

# shellcheck source=../stack-lib.sh
. "$ROOT/deploy/stack-lib.sh"

# ---------------------------------------------------------------- Temporal

# The dev server is deploy/temporal (Temporal server and UI from their Go modules, the
# version in deploy/temporal/go.mod), built once into .dev/bin/ and again when its source
# changes.
T_SRC="$ROOT/deploy/temporal"
T_BIN="$DEV/bin/temporal-dev"

ensure_temporal_bin() {
  local f stale=0
  if [[ -x "$T_BIN" ]]; then
    for f in "$T_SRC/main.go" "$T_SRC/go.mod" "$T_SRC/go.sum"; do [[ "$f" -nt "$T_BIN" ]] && stale=1; done
    ((stale)) || return 0
  fi
  command -v go >/dev/null || die "temporal: no go toolchain to build the dev server in $T_SRC"
  log "temporal: building the dev server ($T_SRC: Temporal server $(server_version) and UI) into $T_BIN (several minutes the first time)"
  local started=$SECONDS
  mkdir -p "$(dirname "$T_BIN")"
  (cd "$T_SRC" && go build -trimpath -ldflags="-s -w" -o "$T_BIN" .) \
    || die "temporal: go build in $T_SRC failed"
  log "temporal: built in $((SECONDS - started)) s"
}

# server_version: the go.temporal.io/server version deploy/temporal/go.mod requires.
server_version() { sed -n 's/^[[:space:]]*go\.temporal\.io\/server \(v[^ ]*\).*/\1/p' "$T_SRC/go.mod" | head -n 1; }

temporal_healthy() { "$T_BIN" check "$TEMPORAL_ADDRESS" 2>/dev/null; }

# Lines of a KEY=VALUE file, without comments and blank lines.
config_lines() {
  [[ -f "$1" ]] || return 0
  sed -e 's/#.*//' -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' "$1" | grep -v '^$' || true
}

# temporal_launch: start the dev server in the background unless the port already answers.
# Sets T_LAUNCHED_PID when it started one; temporal_wait then waits for it to be healthy.
T_LAUNCHED_PID=""
temporal_launch() {
  # Built even when a server already answers: tests start servers of their own from it.
  ensure_temporal_bin
  if port_open "$TEMPORAL_PORT"; then
    log "temporal: already up on $TEMPORAL_ADDRESS (UI http://$HOST:$TEMPORAL_UI_PORT)"
    return 0
  fi
  mkdir -p "$T_DIR"
  local args=(--ip "$HOST" --port "$TEMPORAL_PORT"
              --ui-ip "$HOST" --ui-port "$TEMPORAL_UI_PORT")
  local line
  while IFS= read -r line; do args+=(--dynamic-config-value "$line"); done \
    < <(config_lines "$ROOT/temporal-config/dynamic-config.txt")
  while IFS= read -r line; do args+=(--search-attribute "$line"); done \
    < <(config_lines "$ROOT/temporal-config/search-attributes.txt")
  # CREWLET_DEV_TEMPORAL_PPROF_PORT=PORT serves the server's Go pprof on loopback, to
  # profile where it spends its CPU (`go tool pprof http://127.0.0.1:PORT/debug/pprof/profile`).
  if [[ -n "${CREWLET_DEV_TEMPORAL_PPROF_PORT:-}" ]]; then
    args+=(--pprof-port "$CREWLET_DEV_TEMPORAL_PPROF_PORT")
  fi
  printf '%s\n' "$(date -Is) $T_BIN ${args[*]}" >>"$T_LOG"
  # setsid: own session, so a Ctrl-C in the terminal that ran `up` (e.g. `task dev`) does
  # not reach the server. In-memory store: no --db-filename, state is gone on `down`.
  setsid nohup "$T_BIN" "${args[@]}" >>"$T_LOG" 2>&1 </dev/null 9>&- &
  T_LAUNCHED_PID=$!
  echo "$T_LAUNCHED_PID" >"$T_PID"
}

temporal_wait() {
  [[ -n "$T_LAUNCHED_PID" ]] || return 0
  local pid="$T_LAUNCHED_PID" deadline=$((SECONDS + 60))
  until temporal_healthy; do
    if ! alive "$pid"; then
      tail -n 30 "$T_LOG" >&2 || true
      die "temporal: server exited during startup (log: $T_LOG)"
    fi
    if ((SECONDS >= deadline)); then
      tail -n 30 "$T_LOG" >&2 || true
      die "temporal: not healthy after 60 s (pid $pid, log: $T_LOG)"
    fi
    sleep 0.3
  done
  log "temporal: started on $TEMPORAL_ADDRESS (UI http://$HOST:$TEMPORAL_UI_PORT), pid $pid, log $T_LOG"
}

temporal_down() {
  local pid=""
  [[ -f "$T_PID" ]] && pid="$(cat "$T_PID")"
  if [[ -n "$pid" ]] && alive "$pid" && [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == temporal-dev ]]; then
    kill "$pid" 2>/dev/null || true
    local i
    for ((i = 0; i < 100; i++)); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then kill -9 "$pid" 2>/dev/null || true; fi
    rm -f "$T_PID"
    log "temporal: stopped (pid $pid)"
  else
    rm -f "$T_PID"
    if port_open "$TEMPORAL_PORT"; then
      log "temporal: $TEMPORAL_ADDRESS answers but was not started by stack.sh (no live pid file); left alone"
    else
      log "temporal: already down"
    fi
  fi
}

# ---------------------------------------------------------------- Postgres

pg_bin() {
  local b
  if b="$(command -v "$1" 2>/dev/null)"; then printf '%s\n' "$b"; return 0; fi
  b="$(ls -d /usr/lib/postgresql/*/bin/"$1" 2>/dev/null | sort -V | tail -n 1)"
  [[ -n "$b" ]] || die "postgres: $1 not found (install postgresql, e.g. apt-get install -y postgresql)"
  printf '%s\n' "$b"
}

# as_pg CMD...: run as the postgres OS user when we are root (postgres refuses root).
as_pg() {
  if [[ "$(id -u)" == 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

psql_q() { "$(pg_bin psql)" -X -q -h "$HOST" -p "$PG_PORT" -U postgres -d postgres -tA -v ON_ERROR_STOP=1 "$@"; }

pg_running() { [[ -f "$PG_DATA/PG_VERSION" ]] && as_pg "$(pg_bin pg_ctl)" -D "$PG_DATA" status >/dev/null 2>&1; }

pg_up() {
  local pg_ctl; pg_ctl="$(pg_bin pg_ctl)"
  if [[ "$(id -u)" == 0 ]] && ! id postgres >/dev/null 2>&1; then
    die "postgres: running as root needs a 'postgres' OS user to own the cluster"
  fi
  if ! [[ -f "$PG_DATA/PG_VERSION" ]]; then
    mkdir -p "$PG_DATA" "$PG_RUN" "$(dirname "$PG_LOG")"
    chmod 755 "$DEV"
    chmod 700 "$PG_DATA"
    [[ "$(id -u)" == 0 ]] && chown -R postgres: "$PG_DIR"
    if [[ "$(id -u)" == 0 ]] && ! runuser -u postgres -- test -w "$PG_DATA"; then
      die "postgres: the postgres OS user cannot reach $PG_DATA (check permissions of its parent dirs)"
    fi
    as_pg "$(pg_bin initdb)" -D "$PG_DATA" -U postgres --auth=trust -E UTF8 --locale=C >"$PG_DIR/log/initdb.log" 2>&1 \
      || { tail -n 20 "$PG_DIR/log/initdb.log" >&2; die "postgres: initdb failed (log: $PG_DIR/log/initdb.log)"; }
    printf "\n# crewlet dev stack: listen settings (rewritten by deploy/dev/stack.sh up)\ninclude_if_exists = 'crewlet.conf'\n" \
      | as_pg tee -a "$PG_DATA/postgresql.conf" >/dev/null
    log "postgres: initialized cluster in $PG_DATA"
  fi
  if pg_running; then
    log "postgres: already up on $HOST:$PG_PORT"
  else
    mkdir -p "$PG_RUN" "$(dirname "$PG_LOG")"
    [[ "$(id -u)" == 0 ]] && chown postgres: "$PG_RUN" "$(dirname "$PG_LOG")"
    # Loopback only, non-default port, socket inside .dev (paths follow the checkout).
    # 300 connections: `task test` runs packages side by side, and the e2e processes (a
    # pool of 16 each) beside the store's concurrency tests passed the default 100.
    printf "listen_addresses = '%s'\nport = %s\nunix_socket_directories = '%s'\nfsync = on\nmax_connections = 300\n" \
      "$HOST" "$PG_PORT" "$PG_RUN" | as_pg tee "$PG_DATA/crewlet.conf" >/dev/null
    if port_open "$PG_PORT"; then die "postgres: port $PG_PORT is taken by something else"; fi
    as_pg "$pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -w -t 60 start >/dev/null 9>&- \
      || { tail -n 20 "$PG_LOG" >&2 || true; die "postgres: pg_ctl start failed (log: $PG_LOG)"; }
    log "postgres: started on $HOST:$PG_PORT, data $PG_DATA, log $PG_LOG"
  fi
  if [[ "$(psql_q -c "select 1 from pg_database where datname = '$PG_DB'")" != 1 ]]; then
    psql_q -c "create database $PG_DB" >/dev/null
    log "postgres: created database $PG_DB"
  fi
}

pg_down() {
  if pg_running; then
    as_pg "$(pg_bin pg_ctl)" -D "$PG_DATA" -m fast -w stop >/dev/null
    log "postgres: stopped"
  else
    log "postgres: already down"
  fi
}

# ---------------------------------------------------------------- Redis

redis_ping() { redis-cli -h "$HOST" -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; }

redis_up() {
  if ! command -v redis-server >/dev/null; then
    log "redis: installing redis-server with apt-get"
    apt_install redis-server || die "redis: apt-get install redis-server failed"
  fi
  if redis_ping; then
    log "redis: already up on $HOST:$REDIS_PORT"
    return 0
  fi
  if port_open "$REDIS_PORT"; then die "redis: port $REDIS_PORT is taken by something else"; fi
  mkdir -p "$R_DIR"
  redis-server "$R_CONF" --dir "$R_DIR" --pidfile "$R_DIR/redis.pid" --logfile "$R_DIR/redis.log" 9>&- \
    || die "redis: redis-server failed to start (log: $R_DIR/redis.log)"
  local i
  for ((i = 0; i < 100; i++)); do redis_ping && break; sleep 0.1; done
  redis_ping || { tail -n 20 "$R_DIR/redis.log" >&2 || true; die "redis: not answering on $HOST:$REDIS_PORT (log: $R_DIR/redis.log)"; }
  log "redis: started on $HOST:$REDIS_PORT (AOF, appendfsync always), data $R_DIR"
}

redis_down() {
  if command -v redis-cli >/dev/null && redis_ping; then
    redis-cli -h "$HOST" -p "$REDIS_PORT" shutdown >/dev/null 2>&1 || true
    local i
    for ((i = 0; i < 100; i++)); do redis_ping || break; sleep 0.1; done
    log "redis: stopped"
  else
    log "redis: already down"
  fi
}

# ---------------------------------------------------------------- commands

env_lines() {
  printf "%sCREWLET_PG_URL='%s'\n" "$1" "$PG_URL"
  printf "%sCREWLET_REDIS_URL='%s'\n" "$1" "$REDIS_URL"
  printf "%sCREWLET_TEMPORAL_ADDRESS='%s'\n" "$1" "$TEMPORAL_ADDRESS"
  # For tests that start a dev server of their own (internal/testenv.OwnTemporal).
  printf "%sCREWLET_TEMPORAL_DEV='%s'\n" "$1" "$T_BIN"
}

# One up/down at a time (e.g. `task dev` and `task test` started together). The servers
# are started with `9>&-` so they do not inherit (and hold) the lock.
lock() {
  mkdir -p "$DEV"
  exec 9>"$DEV/.lock"
  flock 9
}

cmd_up() {
  lock
  # Temporal is the slowest to boot: launch it first, start Redis and Postgres while it
  # comes up, then wait for it to report SERVING.
  temporal_launch
  redis_up
  pg_up
  temporal_wait
  env_lines "" >"$DEV/env"
  log "env: $DEV/env (load with: set -a; . .dev/env; set +a)"
}

# The console's browser tests (internal/e2e) drive Debian's headless Chromium and fail
# without one; $CREWLET_CHROMIUM names another binary instead.
cmd_browser() {
  if [[ -n "${CREWLET_CHROMIUM:-}" ]] || command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then
    log "chromium: present"
    return 0
  fi
  log "chromium: installing Debian's chromium with apt-get (the console's browser tests need it)"
  apt_install chromium || die "chromium: apt-get install chromium failed"
}

cmd_down() {
  lock
  temporal_down
  pg_down
  redis_down
}

cmd_status() {
  local rc=0
  if port_open "$TEMPORAL_PORT"; then
    log "temporal: up   $TEMPORAL_ADDRESS (UI http://$HOST:$TEMPORAL_UI_PORT)"
  else log "temporal: down"; rc=1; fi
  if port_open "$PG_PORT"; then log "postgres: up   $HOST:$PG_PORT db $PG_DB"
  else log "postgres: down"; rc=1; fi
  if command -v redis-cli >/dev/null && redis_ping; then log "redis:    up   $HOST:$REDIS_PORT"
  else log "redis:    down"; rc=1; fi
  return $rc
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) env_lines "export " ;;
  browser) cmd_browser ;;
  *) echo "usage: $0 up|down|status|env|browser" >&2; exit 2 ;;
esac
