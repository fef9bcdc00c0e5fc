#!/usr/bin/env bash
# Single-quoted `bash -c` scripts below expand their own "$1" on purpose.
# shellcheck disable=SC2016
# Standalone ZooKeeper for development, from Debian's jars (tools/setup-env.sh installs them).
#
#   tools/zookeeper.sh start|stop|status [--port N] [--run-dir DIR]
#
# Listens on 127.0.0.1:N only, admin HTTP server off, four-letter words ruok/srvr/stat/mntr on.
# Files: DIR/zookeeper/zoo.cfg, DIR/zookeeper/data/, DIR/zookeeper.pid, DIR/zookeeper.log.
# One ZooKeeper per run dir. The JVM runs in its own session (setsid), so `stop` signals its
# process group only.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PORT=2181
RUN_DIR="${META_RUN_DIR:-$ROOT/run}"
START_TIMEOUT_S="${ZK_START_TIMEOUT_S:-30}"
STOP_TIMEOUT_S=15
ZOOKEEPER_JAR=/usr/share/java/zookeeper.jar
LOGGER_JAR=/usr/share/java/slf4j-simple.jar
MAIN_CLASS=org.apache.zookeeper.server.quorum.QuorumPeerMain

usage() {
    cat <<EOF
usage: tools/zookeeper.sh start|stop|status [--port N] [--run-dir DIR]

  start    start a standalone ZooKeeper on 127.0.0.1:N and wait (<= ${START_TIMEOUT_S} s) until it
           serves requests; does nothing if the one from DIR already runs
  stop     stop the ZooKeeper started from DIR (SIGTERM, SIGKILL after ${STOP_TIMEOUT_S} s)
  status   print whether it runs and answers; exit 0 if it serves requests, 3 if not running

  --port N       client port (default 2181)
  --run-dir DIR  pid, log, config and data go here (default \$META_RUN_DIR or <checkout>/run)

Requires java and $ZOOKEEPER_JAR (run tools/setup-env.sh).
EOF
}

say() { printf 'zookeeper: %s\n' "$*"; }
die() { printf 'zookeeper: error: %s\n' "$*" >&2; exit 1; }

command_name=""
while [ "$#" -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --port) [ "$#" -ge 2 ] || die "--port needs a value"; PORT="$2"; shift 2 ;;
        --port=*) PORT="${1#--port=}"; shift ;;
        --run-dir) [ "$#" -ge 2 ] || die "--run-dir needs a value"; RUN_DIR="$2"; shift 2 ;;
        --run-dir=*) RUN_DIR="${1#--run-dir=}"; shift ;;
        start|stop|status)
            [ -z "$command_name" ] || die "only one command allowed (got $command_name and $1)"
            command_name="$1"; shift ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done
[ -n "$command_name" ] || { usage >&2; die "missing command: start, stop or status"; }
if ! [[ "$PORT" =~ ^[0-9]+$ ]] || [ "$PORT" -lt 1 ] || [ "$PORT" -gt 65535 ]; then
    die "--port must be a TCP port number, got '$PORT'"
fi
mkdir -p "$RUN_DIR"
RUN_DIR="$(cd "$RUN_DIR" && pwd)"
ZK_DIR="$RUN_DIR/zookeeper"
CONFIG="$ZK_DIR/zoo.cfg"
PID_FILE="$RUN_DIR/zookeeper.pid"
LOG_FILE="$RUN_DIR/zookeeper.log"

# Prints the reply to a four-letter word, or nothing if the port does not answer.
four_letter_word() {
    timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf %s "$2" >&3 && cat <&3' \
        _ "$PORT" "$1" 2>/dev/null || true
}

port_open() { timeout 1 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$PORT" 2>/dev/null; }

# `ruok` answers imok while the database still loads; `srvr` (whitelisted by default since
# ZooKeeper 3.5, so this also works for servers we did not start) says "Mode:" once it serves.
serving() { four_letter_word srvr | grep -q '^Mode:'; }

# Prints the pid from the pid file if that process is our ZooKeeper; fails otherwise.
running_pid() {
    local pid
    [ -f "$PID_FILE" ] || return 1
    pid="$(cat "$PID_FILE")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    # Guard against pid reuse: the process must be a ZooKeeper server using our config.
    tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$MAIN_CLASS $CONFIG" || return 1
    printf '%s\n' "$pid"
}

# The client port of the ZooKeeper that runs from this run dir (its config is ours).
configured_port() { sed -n 's/^clientPort=//p' "$CONFIG" 2>/dev/null; }

classpath() {
    # As Debian's zkEnv.sh / /etc/zookeeper/conf/environment: the conf dir and zookeeper.jar,
    # whose manifest Class-Path lists every dependency jar in /usr/share/java.
    local path=""
    [ -d /etc/zookeeper/conf ] && path="/etc/zookeeper/conf:"
    path="$path$ZOOKEEPER_JAR"
    # slf4j-simple makes the server log to stderr (our log file) instead of nowhere.
    [ -f "$LOGGER_JAR" ] && path="$path:$LOGGER_JAR"
    printf '%s\n' "$path"
}

write_config() {
    mkdir -p "$ZK_DIR/data"
    cat >"$CONFIG" <<EOF
# Written by tools/zookeeper.sh; rewritten at every start.
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$ZK_DIR/data
clientPort=$PORT
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr
autopurge.snapRetainCount=3
autopurge.purgeInterval=24
EOF
}

log_tail() {
    printf -- '--- last lines of %s ---\n' "$LOG_FILE" >&2
    tail -n 30 "$LOG_FILE" >&2 || true
}

do_start() {
    local pid waited=0
    if pid="$(running_pid)"; then
        [ "$(configured_port)" = "$PORT" ] ||
            die "a ZooKeeper from $RUN_DIR already runs on port $(configured_port) (pid $pid)"
        serving || die "ZooKeeper (pid $pid) does not serve on 127.0.0.1:$PORT; see $LOG_FILE"
        say "already running (pid $pid, 127.0.0.1:$PORT)"
        return 0
    fi
    if [ -f "$PID_FILE" ]; then
        say "removing stale pid file $PID_FILE"
        rm -f "$PID_FILE"
    fi
    command -v java >/dev/null 2>&1 || die "java not found; run tools/setup-env.sh"
    [ -f "$ZOOKEEPER_JAR" ] || die "$ZOOKEEPER_JAR not found; run tools/setup-env.sh"
    port_open && die "127.0.0.1:$PORT is already in use by another process"
    write_config
    printf '=== %s tools/zookeeper.sh start (port %s) ===\n' "$(date -Is)" "$PORT" >>"$LOG_FILE"
    # The child writes its own pid, then becomes the JVM (exec), so the pid file is right even
    # when setsid has to fork.
    setsid bash -c 'printf "%s\n" "$$" >"$1"; shift; exec "$@"' _ "$PID_FILE" \
        java -Xmx512m -Dzookeeper.admin.enableServer=false -cp "$(classpath)" \
        "$MAIN_CLASS" "$CONFIG" </dev/null >>"$LOG_FILE" 2>&1 &
    while ! serving; do
        if [ "$waited" -ge $((START_TIMEOUT_S * 10)) ]; then
            log_tail
            if pid="$(running_pid)"; then kill -KILL -- "-$pid" 2>/dev/null || true; fi
            rm -f "$PID_FILE"
            die "ZooKeeper did not serve on 127.0.0.1:$PORT within ${START_TIMEOUT_S} s"
        fi
        if [ "$waited" -ge 10 ] && ! running_pid >/dev/null; then
            log_tail
            rm -f "$PID_FILE"
            die "ZooKeeper exited during start-up; see $LOG_FILE"
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
    say "started (pid $(running_pid), 127.0.0.1:$PORT, data $ZK_DIR/data, log $LOG_FILE)"
}

do_stop() {
    local pid waited=0
    if ! pid="$(running_pid)"; then
        if [ -f "$PID_FILE" ]; then
            rm -f "$PID_FILE"
            say "not running (removed stale pid file $PID_FILE)"
        else
            say "not running (no pid file $PID_FILE)"
        fi
        return 0
    fi
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    # running_pid, not `kill -0`: a zombie (no init to reap it) has no cmdline and is done.
    while running_pid >/dev/null; do
        if [ "$waited" -ge $((STOP_TIMEOUT_S * 10)) ]; then
            say "warning: pid $pid ignored SIGTERM for ${STOP_TIMEOUT_S} s; sending SIGKILL" >&2
            kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
    rm -f "$PID_FILE"
    say "stopped (pid $pid)"
}

do_status() {
    local pid
    if pid="$(running_pid)"; then
        PORT="$(configured_port)"
        if serving; then
            say "running (pid $pid, 127.0.0.1:$PORT, serving)"
            return 0
        fi
        say "running (pid $pid, 127.0.0.1:$PORT) but NOT serving requests; see $LOG_FILE"
        return 1
    fi
    if [ -f "$PID_FILE" ]; then
        say "not running (stale pid file $PID_FILE)"
        return 1
    fi
    if serving; then
        say "not started from $RUN_DIR, but a ZooKeeper serves on 127.0.0.1:$PORT"
        return 0
    fi
    say "not running (127.0.0.1:$PORT)"
    return 3
}

case "$command_name" in
    start) do_start ;;
    stop) do_stop ;;
    status) do_status ;;
esac
