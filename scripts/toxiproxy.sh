#!/usr/bin/env bash
# Installs (idempotently, cached) and runs Toxiproxy for the chaos drills
# (docs/DRILLS.md): a TCP proxy whose links can be cut or slowed over HTTP.
#
#   scripts/toxiproxy.sh install|start|stop|status|path
#
# install  go install github.com/Shopify/toxiproxy/v2/cmd/{server,cli}@$TOXIPROXY_VERSION
#          into $COURIER_CACHE/toxiproxy (GOBIN); nothing to do when already there.
# start    install, then run the server on $HOST:$COURIER_TOXIPROXY_PORT (8474) in the
#          background unless it already answers; waits until its API answers.
# stop     stop the server this script started (pid file), if any.
# path     print the server binary's path.
#
# Environment:
#   COURIER_CACHE            cache dir  (default: $HOME/.cache/courier)
#   COURIER_STATE            pid + log  (default: /tmp/courier-services)
#   COURIER_TOXIPROXY_PORT   API port   (default: 8474)
#   TOXIPROXY_VERSION        (default: v2.12.0)
set -euo pipefail

CACHE="${COURIER_CACHE:-${HOME:-/tmp}/.cache/courier}"
STATE="${COURIER_STATE:-/tmp/courier-services}"
VERSION="${TOXIPROXY_VERSION:-v2.12.0}"
HOST=127.0.0.1
PORT="${COURIER_TOXIPROXY_PORT:-8474}"
[[ $PORT =~ ^[0-9]+$ ]] || { echo "[toxiproxy] ERROR: port '$PORT' is not a number" >&2; exit 1; }

BIN_DIR="$CACHE/toxiproxy/$VERSION"
SERVER="$BIN_DIR/server"
CLI="$BIN_DIR/cli"
RUN_DIR="$STATE/toxiproxy"
PID_FILE="$RUN_DIR/toxiproxy.pid"
LOG_FILE="$RUN_DIR/toxiproxy.log"

log() { printf '[toxiproxy] %s\n' "$*" >&2; }
die() { printf '[toxiproxy] ERROR: %s\n' "$*" >&2; exit 1; }

installed() { [[ -x $SERVER && -x $CLI ]]; }

cmd_install() {
    if installed; then
        return 0
    fi
    command -v go >/dev/null || die "go is not installed: cannot install toxiproxy (needs the Go toolchain and the Go module proxy)"
    mkdir -p "$BIN_DIR"
    log "installing toxiproxy $VERSION into $BIN_DIR (go install; a minute or two the first time)"
    local pkg
    for pkg in server cli; do
        GOBIN="$BIN_DIR" GOFLAGS="${GOFLAGS:--buildvcs=false}" \
            go install "github.com/Shopify/toxiproxy/v2/cmd/$pkg@$VERSION" \
            || die "go install github.com/Shopify/toxiproxy/v2/cmd/$pkg@$VERSION failed"
    done
    installed || die "toxiproxy binaries missing in $BIN_DIR after go install"
    log "toxiproxy installed: $SERVER"
}

api_ok() { curl -fsS --max-time 2 "http://$HOST:$PORT/version" >/dev/null 2>&1; }

pid_alive() { [[ -s $PID_FILE ]] && kill -0 "$(<"$PID_FILE")" 2>/dev/null; }

cmd_start() {
    cmd_install
    if api_ok; then
        log "toxiproxy already answering on $HOST:$PORT"
        return 0
    fi
    mkdir -p "$RUN_DIR"
    log "starting toxiproxy on $HOST:$PORT (log: $LOG_FILE)"
    # New session so a Ctrl-C in the caller does not reach it; fd 9 (services.sh lock) closed.
    setsid "$SERVER" -host "$HOST" -port "$PORT" </dev/null >>"$LOG_FILE" 2>&1 9>&- &
    echo $! >"$PID_FILE"
    local i
    for ((i = 0; i < 100; i++)); do
        api_ok && { log "toxiproxy ready (pid $(<"$PID_FILE"))"; return 0; }
        pid_alive || { tail -n 20 "$LOG_FILE" >&2 || true; die "toxiproxy exited during startup (log: $LOG_FILE)"; }
        sleep 0.1
    done
    die "toxiproxy not answering on $HOST:$PORT after 10 s (log: $LOG_FILE)"
}

cmd_stop() {
    if ! pid_alive; then
        log "toxiproxy not running (no live pid in $PID_FILE)"
        rm -f "$PID_FILE"
        return 0
    fi
    local pid; pid=$(<"$PID_FILE")
    log "stopping toxiproxy (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    local i
    for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    rm -f "$PID_FILE"
}

cmd_status() {
    if api_ok; then
        echo "toxiproxy running  $HOST:$PORT  $(curl -fsS --max-time 2 "http://$HOST:$PORT/version")"
    else
        echo "toxiproxy stopped"
        return 1
    fi
}

case ${1:-} in
    install) cmd_install ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    path) cmd_install >&2; echo "$SERVER" ;;
    *) echo "usage: $0 install|start|stop|status|path" >&2; exit 2 ;;
esac
