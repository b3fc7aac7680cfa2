#!/usr/bin/env bash
# Start or stop a Docker engine by hand (hosts without systemd, CI).
#
#   deploy/engine.sh start   # no-op if an engine already answers; else starts dockerd and waits until it does
#   deploy/engine.sh stop    # stops the dockerd this script started (by the PID it recorded), nothing else
#
# dockerd runs with --iptables=false --ip-forward=false --bridge=none, so the host's firewall, forwarding
# and default bridge are left alone; compose networks are created per project (ours are internal-only).
# State: $MPDP_ENGINE_DIR (default /run/mpdp-engine): dockerd.pid (only when we started it) and dockerd.log.
set -euo pipefail

DIR="${MPDP_ENGINE_DIR:-/run/mpdp-engine}"
PIDFILE="$DIR/dockerd.pid"
LOG="$DIR/dockerd.log"
WAIT="${MPDP_ENGINE_WAIT:-60}"

answers() { docker info --format '{{.ServerVersion}}' >/dev/null 2>&1; }

case "${1:-}" in
  start)
    if answers; then
      echo "engine: already running ($(docker info --format '{{.ServerVersion}}'))" >&2
      exit 0
    fi
    command -v dockerd >/dev/null || { echo "engine: dockerd not installed; run deploy/host-setup.sh as root" >&2; exit 1; }
    [ "$(id -u)" = 0 ] || { echo "engine: starting dockerd needs root" >&2; exit 1; }
    mkdir -p "$DIR"
    # setsid: the engine outlives this shell; its PID is recorded so `stop` ends exactly it.
    setsid dockerd --iptables=false --ip-forward=false --bridge=none >"$LOG" 2>&1 < /dev/null &
    echo $! > "$PIDFILE"
    deadline=$((SECONDS + WAIT))
    until answers; do
      if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
        echo "engine: dockerd exited during start-up; last lines of $LOG:" >&2; tail -n 30 "$LOG" >&2; rm -f "$PIDFILE"; exit 1
      fi
      if [ $SECONDS -ge $deadline ]; then
        echo "engine: dockerd did not answer within ${WAIT}s; last lines of $LOG:" >&2; tail -n 30 "$LOG" >&2; exit 1
      fi
      sleep 0.2  # polling an external daemon's readiness (docker info) with a deadline
    done
    echo "engine: dockerd $(docker info --format '{{.ServerVersion}}') started, pid $(cat "$PIDFILE"), log $LOG" >&2
    ;;
  stop)
    if [ ! -f "$PIDFILE" ]; then
      echo "engine: no $PIDFILE (this script did not start the running engine); leaving it alone" >&2
      exit 0
    fi
    pid="$(cat "$PIDFILE")"
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid"
      for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      if kill -0 "$pid" 2>/dev/null; then echo "engine: dockerd $pid ignored SIGTERM for 30 s; killing it" >&2; kill -KILL "$pid"; fi
    fi
    rm -f "$PIDFILE"
    echo "engine: dockerd $pid stopped" >&2
    ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
