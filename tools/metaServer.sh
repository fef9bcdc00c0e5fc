#!/usr/bin/env bash
# Single-quoted `bash -c` scripts below expand their own "$1" on purpose.
# shellcheck disable=SC2016
# Start, stop and inspect a metaq-py broker, like Metamorphosis' bin/metaServer.sh.
#
#   tools/metaServer.sh start [local|slave|samsa|gregor] | stop [broker|zookeeper]
#                       | restart [local|slave|samsa|gregor] | reload | status
#                       | promote [--new-slave HOST:PORT]   (--help on each)
#
# Run dir: $META_RUN_DIR or <checkout>/run (meta-server.pid, meta-server.log, and for `start
# local` the ZooKeeper files plus the marker zookeeper.started-by-metaServer).
# Config:  $META_CONF or <checkout>/conf/server.ini; for `start slave` also
#          $META_SLAVE_CONF or <checkout>/conf/async_slave.properties, for `start samsa`
#          $META_SAMSA_CONF or <checkout>/conf/samsa_master.properties, for `start gregor`
#          $META_GREGOR_CONF or <checkout>/conf/gregor_slave.properties.
# Python:  $META_PYTHON, else <checkout>/.venv/bin/python, else python3.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN_DIR="${META_RUN_DIR:-$ROOT/run}"
CONF="${META_CONF:-$ROOT/conf/server.ini}"
SLAVE_CONF="${META_SLAVE_CONF:-$ROOT/conf/async_slave.properties}"
HTTP_CONF="${META_HTTP_CONF:-$ROOT/conf/jettyBroker.properties}"
SAMSA_CONF="${META_SAMSA_CONF:-$ROOT/conf/samsa_master.properties}"
GREGOR_CONF="${META_GREGOR_CONF:-$ROOT/conf/gregor_slave.properties}"
PID_FILE="$RUN_DIR/meta-server.pid"
LOG_FILE="$RUN_DIR/meta-server.log"
ZK_MARKER="$RUN_DIR/zookeeper.started-by-metaServer"
ZK_LOCAL_PORT=2181
START_TIMEOUT_S="${META_START_TIMEOUT_S:-60}"
STOP_TIMEOUT_S="${META_STOP_TIMEOUT_S:-30}"
RELOAD_TIMEOUT_S="${META_RELOAD_TIMEOUT_S:-60}"
PROMOTE_TIMEOUT_S="${META_PROMOTE_TIMEOUT_S:-120}"
DEFAULT_PORT=8123

if [ -n "${META_PYTHON:-}" ]; then
    PY="$META_PYTHON"
elif [ -x "$ROOT/.venv/bin/python" ]; then
    PY="$ROOT/.venv/bin/python"
else
    PY=python3
fi

say() { printf 'metaServer: %s\n' "$*"; }
warn() { printf 'metaServer: warning: %s\n' "$*" >&2; }
die() { printf 'metaServer: error: %s\n' "$*" >&2; exit 1; }

usage() {
    cat <<EOF
usage: tools/metaServer.sh COMMAND [ARGS]

commands:
  start          start the broker in the background (config \$META_CONF or conf/server.ini)
  start local    set up the environment, start ZooKeeper on 127.0.0.1:$ZK_LOCAL_PORT if none
                 answers, then start the broker with --local (hostName=127.0.0.1,
                 zk.zkConnect=127.0.0.1:$ZK_LOCAL_PORT)
  start slave    start the broker as an async slave (also reads \$META_SLAVE_CONF or
                 conf/async_slave.properties): it copies the master with the same brokerId
  start samsa    start the broker as a synchronous-replication master (also reads
                 \$META_SAMSA_CONF or conf/samsa_master.properties): a put is answered 200 only
                 once its gregor slave stored it too
  start gregor   start the broker as a synchronous-replication slave (also reads
                 \$META_GREGOR_CONF or conf/gregor_slave.properties): it takes 'sync' only from
                 the samsa master its 'master' key names, refuses puts and registers nothing in
                 ZooKeeper
  start --http   also serve the HTTP protocol (/put, /get, /offset) on serverPort of
                 \$META_HTTP_CONF or conf/jettyBroker.properties (combines with every mode)
  stop [broker|zookeeper]
                 stop the broker (SIGTERM; SIGKILL after ${STOP_TIMEOUT_S} s) and the ZooKeeper
                 that 'start local' started, unless another broker this script started from
                 this checkout still runs; 'stop broker' leaves that ZooKeeper running,
                 'stop zookeeper' stops only it
  restart [local|slave|samsa|gregor] [--http]
                 stop the broker if it runs, then start the given way
  reload         make the running broker re-read its config file (SIGHUP); the [topic=...]
                 sections take effect, [system] and [zookeeper] changes wait for a restart
  status         print whether the broker runs, as what (master, async slave of broker N, ...),
                 with pid and port, and its /readyz answer
  promote [--new-slave HOST:PORT]
                 failover: stop the async or gregor slave and start it again as the master of
                 its brokerId, on the same config and data (after the old master is gone); a
                 gregor slave's consumer offsets are recovered first, and with --new-slave it
                 starts as a samsa master of that gregor slave

Run dir: $RUN_DIR (\$META_RUN_DIR); log: meta-server.log there.
'tools/metaServer.sh COMMAND --help' describes one command.
EOF
}

usage_start() {
    cat <<EOF
usage: tools/metaServer.sh start [local|slave|samsa|gregor] [--http]

Starts the broker in the background, in its own session:
    $PY -m meta.server -f $CONF
logging to $LOG_FILE, and waits up to ${START_TIMEOUT_S} s (\$META_START_TIMEOUT_S) until
its serverPort accepts connections (with serverPort=0, any free port, until it names the
port it took), then until it is registered in ZooKeeper (its "serving meta://HOST:PORT" log
line): producers and consumers find it only from then on. After a kill -9 (or a crash) the
broker first waits for ZooKeeper to expire the old run's session, which still holds its
node: up to zk.zkSessionTimeoutMs plus 5 s. The script then says so, with that time, and
waits as long. Fails, printing the log tail, if the broker exits first; if it is still not
registered when the wait ends, says so and leaves it running.

  local   first run tools/setup-env.sh --broker-only (what the broker and the client need;
          tools/test installs the rest), start ZooKeeper on 127.0.0.1:$ZK_LOCAL_PORT (data in
          the run dir; skipped if one already answers there) and pass --local to the broker.
  slave   start an async slave (Java: -Fmetaslave=FILE):
              $PY -m meta.server -f $CONF --slave $SLAVE_CONF
          (\$META_SLAVE_CONF). Keys: slaveId (required, >= 0), slaveGroup (default
          meta-slave-group_<slaveId>), slaveMaxDelayInMills (default 500),
          autoSyncMasterConfig (default false: when true, the master's server.ini is taken
          over, keeping the slave's ports, paths and [zookeeper]). server.ini must have the
          master's brokerId (usually a copy of the master's file) and its own serverPort,
          dashboardHttpPort and dataPath. A copy of the shipped conf/server.ini listens on
          every interface (its hostName is commented out): next to a 'start local' master
          (127.0.0.1) set hostName=127.0.0.1 (docs/ha.md, "Async slave").
          'stats slave' on the slave (or 'meta-admin slaves') shows the lag.
          The slave registers as ids/<brokerId>/slave<slaveId> in ZooKeeper, copies every
          topic and partition of its master byte for byte (resuming from its local data after
          a restart), serves gets and offsets, and answers puts with 403. To run a master and
          a slave on one machine, give each its own \$META_RUN_DIR.
  samsa   start a synchronous-replication master (Java: -Fsamsa=FILE):
              $PY -m meta.server -f $CONF --samsa $SAMSA_CONF
          (\$META_SAMSA_CONF). Keys: slave (required: the gregor slave's host:port),
          sendToSlaveTimeoutInMills (2000), slaveContinuousFailureThreshold (100),
          checkSlaveIntervalInMills (100), recoverOffset (false: when true, the consumer
          offsets in ZooKeeper are remapped to this broker's data before it registers, as
          'meta-admin recover-offsets --execute' does). A put gets 200 only once the
          record is stored here and on the slave; while the slave is down, puts get 500 and
          the broker stops advertising itself to producers (consumers keep reading).
          'stats sync' (or 'meta-admin replication') shows the replication state.
  gregor  start a synchronous-replication slave (Java: -Fgregor=FILE):
              $PY -m meta.server -f $CONF --gregor $GREGOR_CONF
          (\$META_GREGOR_CONF: master=HOST:PORT, the one samsa master whose 'sync' is taken;
          optional syncSecret, see docs/ha.md). server.ini must have the master's
          brokerId and accept every topic of the master, with at least as many partitions,
          and its own serverPort, dashboardHttpPort and dataPath. The slave takes 'sync' from its samsa master,
          serves gets and offsets, answers puts with 403 and needs no ZooKeeper. Start it
          before its master. 'promote' turns it into a master after its master is lost.
  --http  also serve the HTTP protocol (Java: -FjettyBroker=FILE):
              $PY -m meta.server -f $CONF --http $HTTP_CONF
          (\$META_HTTP_CONF; key serverPort, default 8080): POST /put/<brokerId>,
          GET /get/<brokerId> and GET /offset/<brokerId>, on hostName when it is set. The
          script then also waits (up to 10 s) for the HTTP port and names it when started.
EOF
}

usage_stop() {
    cat <<EOF
usage: tools/metaServer.sh stop [broker|zookeeper]

Sends SIGTERM to the broker (it flushes, leaves ZooKeeper and closes), waits up to
${STOP_TIMEOUT_S} s (\$META_STOP_TIMEOUT_S), then SIGKILLs it with a warning. Also stops the
ZooKeeper that 'start local' started from this run dir, unless 'broker' is given or another
broker this script started from this checkout (with another \$META_RUN_DIR) still runs: then
that ZooKeeper keeps running for it, and one line names that broker and says how to stop
ZooKeeper anyway. 'stop zookeeper' stops only that ZooKeeper, whatever still runs. Exit 1
if nothing was running (with 'broker': if the broker was not running; with 'zookeeper': if
this run dir's 'start local' started no ZooKeeper that still runs).
EOF
}

usage_restart() {
    cat <<EOF
usage: tools/metaServer.sh restart [local|slave|samsa|gregor] [--http]

Stops the broker if it runs (ZooKeeper keeps running), then does
'start [local|slave|samsa|gregor] [--http]'.
EOF
}

usage_reload() {
    cat <<EOF
usage: tools/metaServer.sh reload

Sends SIGHUP to the running broker, found through its pid file
    $PID_FILE
The broker re-reads its config file and applies the [topic=...] sections: new topics are
accepted and registered in ZooKeeper, changed ones are registered again, and
master_config_checksum is rewritten. [system] and [zookeeper] changes are logged and take
effect at the next restart. A file that does not load changes nothing: the broker keeps
its running configuration and keeps serving.

Then waits up to ${RELOAD_TIMEOUT_S} s (\$META_RELOAD_TIMEOUT_S) for the outcome in the log
    $LOG_FILE
and prints it. Exit 0 if the reload was applied; 1 if the broker refused the file, could
not update ZooKeeper, or logged no outcome in time; 3 if the broker does not run.
EOF
}

usage_promote() {
    cat <<EOF
usage: tools/metaServer.sh promote [--new-slave HOST:PORT]

Failover: promotes the slave of this run dir to master of its brokerId. Run it only once
the old master is gone for good (killed, or its machine lost).

An async slave (started with 'start slave'):
 1. If it runs (pid file $PID_FILE), stops it with SIGTERM (it leaves
    ZooKeeper). If a broker runs that is not a slave, refuses (exit 1). If nothing runs,
    goes on with step 2.
 2. Starts the broker as a master with the same config and data:
        $PY -m meta.server -f $CONF
    (no --slave: \$META_SLAVE_CONF is not read), so the same brokerId and dataPath.
 3. Waits up to ${PROMOTE_TIMEOUT_S} s (\$META_PROMOTE_TIMEOUT_S) until it is registered as
    ids/<brokerId>/master. After a kill -9 of the old master, its ephemeral node lives until
    ZooKeeper expires its session (zk.zkSessionTimeoutMs); the broker waits that out. If
    another live broker still holds ids/<brokerId>/master, the broker gives up after the
    session timeout and exits, and so does this command (exit 1).
Offsets continue: the files are byte-identical to the old master's up to what was
replicated. Messages the old master acknowledged but the slave had not copied are lost.

A gregor slave (started with 'start gregor'; when nothing runs, known from the last start
in the log):
 1. Stops it.
 2. Recovers the consumer offsets of its brokerId in ZooKeeper (zk.zkConnect and zk.zkRoot
    of its server.ini) against its data, as 'meta-admin recover-offsets --execute' does:
        $PY -m meta.admin recover-offsets -f $CONF --zk-from-config --execute
    Skipped when zk.zkEnable=false. A failure stops here (exit 1): nothing is started.
 3. Starts it as a plain master (steps 2 and 3 above), or with --new-slave HOST:PORT as a
    samsa master whose gregor slave is HOST:PORT: the samsa file is \$META_SAMSA_CONF (or
    conf/samsa_master.properties) with slave=HOST:PORT and recoverOffset=false, written to
    $RUN_DIR/samsa_master.promoted.properties. Start that slave (the old master, for
    example, with an EMPTY dataPath, by 'start gregor'); until it is caught up, the samsa
    master refuses puts.
Every message the old samsa master acknowledged is on its gregor slave: a 200 meant two
copies.

Producers and consumers find the new master through ZooKeeper. Consumers whose committed
offset is beyond the promoted end: see "Failover" in docs/ha.md.

To bring the old master of an async slave back, start it as a slave of the new one ('start
slave' with an async_slave.properties and an EMPTY dataPath: its un-replicated tail differs
from the new master's data, and a slave refuses data that is not a copy of its master's).
EOF
}

usage_status() {
    cat <<EOF
usage: tools/metaServer.sh status

Prints whether the broker runs, as what (master, samsa master, gregor slave, or async slave
of broker N: from its command line and config file), with its pid and port, and its readiness
as its dashboard's /readyz answers it (registered in ZooKeeper, stores open). The port is the running broker's:
from its "serving meta://HOST:PORT" log line since its start (so serverPort=0 shows the port
it took), else from the config file named on its command line. Exit 0 if it runs, 1 if its
pid file is stale, 3 if it does not run.
EOF
}

# Prints the broker pid if the pid file names a live meta.server process; fails otherwise.
running_pid() {
    local pid
    [ -f "$PID_FILE" ] || return 1
    pid="$(cat "$PID_FILE")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    # Guard against pid reuse; a zombie has an empty cmdline and counts as gone.
    tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "-m meta.server " || return 1
    printf '%s\n' "$pid"
}

# Prints "HOST PORT" the broker listens on, from config file $2 (default $CONF) when
# meta.config can read it; PORT is 0 for serverPort=0 (any free port).
listen_address() {
    local local_flag="$1" conf="${2:-$CONF}" address
    address="$("$PY" - "$conf" "$local_flag" 2>/dev/null <<'EOF'
import sys
from meta.config import load_config
config = load_config(sys.argv[1])
host = "127.0.0.1" if sys.argv[2] == "1" or not config.host_name else config.host_name
print(host, config.server_port)
EOF
)" || address=""
    [ -n "$address" ] || address="127.0.0.1 $DEFAULT_PORT"
    printf '%s\n' "$address"
}

# Prints the broker's /readyz answer, e.g. "readiness: 200 ready". The dashboard's address
# comes from the log's last "dashboard serving" line (it also names a port chosen with
# dashboardHttpPort=0).
readiness() {
    "$PY" - "$LOG_FILE" 2>/dev/null <<'EOF' || echo "readiness: unknown (no answer from /readyz)"
import re, sys, urllib.error, urllib.request
text = open(sys.argv[1], encoding="utf-8", errors="replace").read()
lines = re.findall(r"dashboard (?:serving (http://\S+/)|off)", text)
if not lines or not lines[-1]:
    print("readiness: unknown (the dashboard is off)")
    sys.exit(0)
try:
    with urllib.request.urlopen(lines[-1] + "readyz", timeout=3) as response:
        status, body = response.status, response.read()
except urllib.error.HTTPError as error:
    status, body = error.code, error.read()
print(f"readiness: {status} " + "; ".join(body.decode(errors="replace").splitlines()))
EOF
}

# Prints the port of the last "broker N serving meta://HOST:PORT" line logged after byte $1
# (the broker logs it once it listens and is registered); nothing if there is none.
served_port() {
    tail -c +"$(($1 + 1))" "$LOG_FILE" 2>/dev/null |
        grep -o 'broker [0-9]* serving meta://[^ ]*' | tail -n 1 | sed -E 's/.*:([0-9]+)$/\1/' ||
        true
}

# Prints the byte offset of this run dir's log at the running broker's start (its last
# "tools/metaServer.sh start" marker), 0 if there is none.
start_offset() {
    local offset
    offset="$(grep -b -a -F ' tools/metaServer.sh start: ' "$LOG_FILE" 2>/dev/null |
        tail -n 1 | cut -d: -f1 || true)"
    printf '%s\n' "${offset:-0}"
}

# Prints the config file named by -f on the command line of process $1, as an absolute path.
process_conf() {
    local arg previous=""
    while IFS= read -r -d '' arg; do
        if [ "$previous" = "-f" ]; then
            case "$arg" in
                /*) printf '%s\n' "$arg" ;;
                *) printf '%s\n' "$(readlink "/proc/$1/cwd")/$arg" ;;
            esac
            return 0
        fi
        previous="$arg"
    done <"/proc/$1/cmdline"
    return 1
}

port_open() { timeout 1 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null; }

log_tail_since() {
    printf -- '--- %s (this start) ---\n' "$LOG_FILE" >&2
    tail -c +"$(($1 + 1))" "$LOG_FILE" 2>/dev/null | tail -n 40 >&2 || true
}

start_local_zookeeper() {
    if "$ROOT/tools/zookeeper.sh" status --port "$ZK_LOCAL_PORT" --run-dir "$RUN_DIR" \
        >/dev/null 2>&1; then
        say "ZooKeeper already answers on 127.0.0.1:$ZK_LOCAL_PORT; using it"
        return 0
    fi
    "$ROOT/tools/zookeeper.sh" start --port "$ZK_LOCAL_PORT" --run-dir "$RUN_DIR" ||
        die "could not start ZooKeeper on 127.0.0.1:$ZK_LOCAL_PORT"
    : >"$ZK_MARKER"
}

stop_local_zookeeper() {
    [ -f "$ZK_MARKER" ] || return 1
    "$ROOT/tools/zookeeper.sh" stop --run-dir "$RUN_DIR" || warn "could not stop ZooKeeper"
    rm -f "$ZK_MARKER"
}

# The brokers this script started from this checkout that still run, other than this run
# dir's, one "pid RUN_DIR" line each. A broker carries both in its environment
# (METASERVER_CHECKOUT, METASERVER_RUN_DIR, set by do_start); other users' processes,
# which cannot be read, are not this script's.
other_brokers() {
    local environ pid run_dir own
    own="$(cd "$RUN_DIR" 2>/dev/null && pwd -P || printf '%s' "$RUN_DIR")"
    for environ in $(grep -lzxF -- "METASERVER_CHECKOUT=$ROOT" /proc/[0-9]*/environ \
        2>/dev/null); do
        pid="${environ#/proc/}"
        pid="${pid%/environ}"
        tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "-m meta.server " || continue
        run_dir="$(tr '\0' '\n' 2>/dev/null <"$environ" | sed -n 's/^METASERVER_RUN_DIR=//p')"
        [ -n "$run_dir" ] && [ "$run_dir" != "$own" ] || continue
        printf '%s %s\n' "$pid" "$run_dir"
    done
}

# Stops the ZooKeeper of 'start local' unless another broker of this checkout still runs
# (other_brokers); then says which, and how to stop it anyway. Returns 1 if it stopped
# none and none runs.
stop_local_zookeeper_unless_used() {
    local others command
    [ -f "$ZK_MARKER" ] || return 1
    others="$(other_brokers | sed -E 's/^([0-9]+) (.*)$/\2 (pid \1)/' | paste -sd ',' |
        sed 's/,/, /g')"
    if [ -z "$others" ]; then
        stop_local_zookeeper
        return 0
    fi
    command="tools/metaServer.sh stop zookeeper"
    [ -z "${META_RUN_DIR:-}" ] || command="META_RUN_DIR=$RUN_DIR $command"
    say "ZooKeeper (127.0.0.1:$ZK_LOCAL_PORT, started by 'start local' here) keeps running for" \
        "the broker(s) of $others; stop it anyway with: $command"
}

# Stops the broker; returns 1 if it was not running.
stop_broker() {
    local pid waited=0
    if ! pid="$(running_pid)"; then
        if [ -f "$PID_FILE" ]; then
            warn "removing stale pid file $PID_FILE (pid $(cat "$PID_FILE") is not meta-server)"
            rm -f "$PID_FILE"
        fi
        return 1
    fi
    say "stopping meta-server (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    while running_pid >/dev/null; do
        if [ "$waited" -ge $((STOP_TIMEOUT_S * 10)) ]; then
            warn "meta-server (pid $pid) still runs ${STOP_TIMEOUT_S} s after SIGTERM; SIGKILL"
            kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
            sleep 0.2
            break
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
    rm -f "$PID_FILE"
    say "meta-server stopped"
}

# The seconds a broker started at log offset $1 said it waits for ZooKeeper to expire the
# node of an earlier run's session (empty when it said nothing of the kind).
stale_session_wait() {
    tail -c +"$(($1 + 1))" "$LOG_FILE" 2>/dev/null |
        grep -o 'waiting up to [0-9]* s for ZooKeeper to expire it' | head -n 1 |
        sed -E 's/waiting up to ([0-9]+) s.*/\1/' || true
}

# After the port opened: wait until the broker started at log offset $1 logged its "serving"
# line, which comes after its registration in ZooKeeper (at once without ZooKeeper). Says
# why when the broker waits out an earlier run's session, and waits that long.
wait_registered() {
    local offset="$1" address="$2" waited=0 limit=$((START_TIMEOUT_S * 10)) told=0 stale
    while [ -z "$(served_port "$offset")" ]; do
        if ! running_pid >/dev/null; then
            log_tail_since "$offset"
            rm -f "$PID_FILE"
            die "meta-server exited before it registered in ZooKeeper; see $LOG_FILE"
        fi
        stale="$(stale_session_wait "$offset")"
        if [ "$told" -eq 0 ] && [ -n "$stale" ]; then
            told=1
            say "meta-server accepts connections on $address but is not registered in" \
                "ZooKeeper yet: its node is still held by the session of an earlier run" \
                "(killed or crashed without a clean stop). It waits up to $stale s" \
                "(zk.zkSessionTimeoutMs plus 5 s) for ZooKeeper to expire that session;" \
                "producers and consumers do not find it until then. Waiting."
            [ $(((stale + 10) * 10)) -le "$limit" ] || limit=$(((stale + 10) * 10))
        fi
        if [ "$waited" -ge "$limit" ]; then
            log_tail_since "$offset"
            die "meta-server (pid $(running_pid)) accepts connections on $address but did not" \
                "register in ZooKeeper within $((limit / 10)) s; it keeps trying (see $LOG_FILE)"
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
}

# Prints the first text since log offset $1 of $LOG_FILE that the extended regex $2 matches
# (grep -o), once the broker logged it. Fails, with the log tail, naming $4 if the broker
# exits first, or $5 if nothing matched within $3 s. Called in $(...), where errexit does
# not hold: callers add `|| exit 1`.
wait_log_match() {
    local offset="$1" pattern="$2" timeout_s="$3" exited="$4" timed_out="$5" waited=0 found
    while :; do
        found="$(tail -c +"$((offset + 1))" "$LOG_FILE" 2>/dev/null |
            grep -m 1 -oE -- "$pattern" || true)"
        [ -z "$found" ] || break
        if ! running_pid >/dev/null; then
            log_tail_since "$offset"
            rm -f "$PID_FILE"
            die "$exited"
        fi
        if [ "$waited" -ge $((timeout_s * 10)) ]; then
            log_tail_since "$offset"
            die "$timed_out"
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
    printf '%s\n' "$found"
}

# Prints HOST:PORT of the HTTP protocol of the broker started at log offset $1, once it logged
# "HTTP protocol serving" (just after its registration); fails, with the log tail, if the
# broker exits first (a port it cannot take stops it) or nothing is logged in 10 s.
wait_http_serving() {
    local serving
    serving="$(wait_log_match "$1" 'HTTP protocol serving http://[^/ ]+' 10 \
        "meta-server exited before it served the HTTP protocol; see $LOG_FILE" \
        "meta-server logged no 'HTTP protocol serving' line in 10 s; see $LOG_FILE")" || exit 1
    printf '%s\n' "${serving#HTTP protocol serving http://}"
}

# Whether a broker started at log offset $3 serves on $1:$2; with port 0, whether it logged
# its "serving" line (the port it took is only known from there).
started_on() {
    if [ "$2" = 0 ]; then
        [ -n "$(served_port "$3")" ]
    else
        port_open "$1" "$2"
    fi
}

do_start() {
    local local_flag=0 slave_flag=0 http_flag=0 samsa_flag=0 gregor_flag=0
    local pid host port log_offset started_zk=0 waited=0
    local mode="" argument
    for argument in "$@"; do
        case "$argument" in
            --http) http_flag=1 ;;
            -h|--help) usage_start; exit 0 ;;
            *) [ -z "$mode" ] || { usage_start >&2; die "too many arguments: $*"; }
               mode="$argument" ;;
        esac
    done
    case "$mode" in
        "") ;;
        local) local_flag=1 ;;
        slave) slave_flag=1 ;;
        samsa) samsa_flag=1 ;;
        gregor) gregor_flag=1 ;;
        *) usage_start >&2; die "unknown start mode: $mode" ;;
    esac
    if pid="$(running_pid)"; then
        die "meta-server is already running (pid $pid); use 'restart' or 'stop'"
    fi
    if [ -f "$PID_FILE" ]; then
        warn "removing stale pid file $PID_FILE (pid $(cat "$PID_FILE") is not meta-server)"
        rm -f "$PID_FILE"
    fi
    [ -f "$CONF" ] || die "config file $CONF not found (set META_CONF)"
    if [ "$slave_flag" -eq 1 ] && [ ! -f "$SLAVE_CONF" ]; then
        die "slave config file $SLAVE_CONF not found (set META_SLAVE_CONF)"
    fi
    if [ "$samsa_flag" -eq 1 ] && [ ! -f "$SAMSA_CONF" ]; then
        die "samsa config file $SAMSA_CONF not found (set META_SAMSA_CONF)"
    fi
    if [ "$gregor_flag" -eq 1 ] && [ ! -f "$GREGOR_CONF" ]; then
        die "gregor config file $GREGOR_CONF not found (set META_GREGOR_CONF)"
    fi
    if [ "$http_flag" -eq 1 ] && [ ! -f "$HTTP_CONF" ]; then
        die "HTTP config file $HTTP_CONF not found (set META_HTTP_CONF)"
    fi
    mkdir -p "$RUN_DIR"
    if [ "$local_flag" -eq 1 ]; then
        "$ROOT/tools/setup-env.sh" --broker-only || die "tools/setup-env.sh --broker-only failed"
        [ -n "${META_PYTHON:-}" ] || PY="$ROOT/.venv/bin/python"
        [ -f "$ZK_MARKER" ] || started_zk=1
        start_local_zookeeper
        [ -f "$ZK_MARKER" ] || started_zk=0
    fi
    "$PY" -c 'import meta.server.main' 2>/dev/null ||
        die "$PY cannot import meta.server.main; run tools/setup-env.sh (or set META_PYTHON)"
    read -r host port <<<"$(listen_address "$local_flag")"
    if [ "$port" != 0 ] && port_open "$host" "$port"; then
        die "$host:$port already accepts connections (another broker?)"
    fi

    local args=(-m meta.server -f "$CONF")
    [ "$local_flag" -eq 0 ] || args+=(--local)
    [ "$slave_flag" -eq 0 ] || args+=(--slave "$SLAVE_CONF")
    [ "$samsa_flag" -eq 0 ] || args+=(--samsa "$SAMSA_CONF")
    [ "$gregor_flag" -eq 0 ] || args+=(--gregor "$GREGOR_CONF")
    [ "$http_flag" -eq 0 ] || args+=(--http "$HTTP_CONF")
    touch "$LOG_FILE"
    log_offset="$(stat -c %s "$LOG_FILE")"
    printf '=== %s tools/metaServer.sh start: %s %s ===\n' "$(date -Is)" "$PY" "${args[*]}" \
        >>"$LOG_FILE"
    # Own session (no terminal, no stray SIGHUP/SIGINT); the child writes its own pid, then
    # becomes the broker (exec), so the pid file is right even when setsid forks.
    # Its environment says which checkout and run dir it belongs to (other_brokers).
    METASERVER_CHECKOUT="$ROOT" METASERVER_RUN_DIR="$(cd "$RUN_DIR" && pwd -P)" \
        setsid nohup bash -c 'printf "%s\n" "$$" >"$1"; shift; exec "$@"' _ "$PID_FILE" \
        "$PY" "${args[@]}" </dev/null >>"$LOG_FILE" 2>&1 &

    while ! started_on "$host" "$port" "$log_offset"; do
        if [ "$waited" -ge 5 ] && ! running_pid >/dev/null; then
            log_tail_since "$log_offset"
            rm -f "$PID_FILE"
            [ "$started_zk" -eq 0 ] || stop_local_zookeeper || true
            die "meta-server exited during start-up; see $LOG_FILE"
        fi
        if [ "$waited" -ge $((START_TIMEOUT_S * 10)) ]; then
            log_tail_since "$log_offset"
            stop_broker || true
            [ "$started_zk" -eq 0 ] || stop_local_zookeeper || true
            [ "$port" != 0 ] ||
                die "meta-server (serverPort=0) logged no serving line in ${START_TIMEOUT_S} s"
            die "meta-server did not accept connections on $host:$port within ${START_TIMEOUT_S} s"
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
    [ "$port" != 0 ] || port="$(served_port "$log_offset")"
    wait_registered "$log_offset" "$host:$port"
    local http_text=""
    [ "$http_flag" -eq 0 ] || http_text=", HTTP $(wait_http_serving "$log_offset")"
    say "meta-server started (pid $(running_pid || cat "$PID_FILE"), $host:$port$http_text," \
        "log $LOG_FILE)"
}

do_stop() {
    local target="${1:-}"
    case "$target" in
        ""|broker) ;;
        zookeeper)
            [ "$#" -le 1 ] || { usage_stop >&2; die "too many arguments: $*"; }
            stop_local_zookeeper && exit 0
            say "no ZooKeeper started by 'start local' from $RUN_DIR"
            exit 1 ;;
        -h|--help) usage_stop; exit 0 ;;
        *) usage_stop >&2; die "unknown stop target: $1 (only 'broker' or 'zookeeper')" ;;
    esac
    [ "$#" -le 1 ] || { usage_stop >&2; die "too many arguments: $*"; }
    local stopped=0
    if stop_broker; then stopped=1; else say "meta-server is not running"; fi
    if [ "$target" = "" ] && stop_local_zookeeper_unless_used; then stopped=1; fi
    [ "$stopped" -eq 1 ] || exit 1
}

do_restart() {
    local argument
    for argument in "$@"; do
        case "$argument" in
            local|slave|samsa|gregor|--http) ;;
            -h|--help) usage_restart; exit 0 ;;
            *) usage_restart >&2; die "unknown restart mode: $argument" ;;
        esac
    done
    stop_broker || say "meta-server was not running"
    do_start "$@"
}

do_reload() {
    case "${1:-}" in
        "") ;;
        -h|--help) usage_reload; exit 0 ;;
        *) usage_reload >&2; die "reload takes no arguments (got $*)" ;;
    esac
    local pid log_offset outcome
    if ! pid="$(running_pid)"; then
        say "meta-server is not running (no live meta-server pid in $PID_FILE)"
        exit 3
    fi
    touch "$LOG_FILE"
    # wc follows a symbolic link (stat -c %s would measure the link itself).
    log_offset="$(wc -c <"$LOG_FILE")"
    kill -HUP "$pid" || die "could not signal meta-server (pid $pid)"
    say "reload requested (SIGHUP sent to pid $pid); waiting for the outcome in $LOG_FILE"
    # The whole line: its level (ERROR) is the outcome.
    outcome="$(wait_log_match "$log_offset" '.*config reload (done|failed).*' \
        "$RELOAD_TIMEOUT_S" "meta-server (pid $pid) exited; see $LOG_FILE" \
        "no reload outcome in $LOG_FILE within ${RELOAD_TIMEOUT_S} s (it is logged at INFO)")" ||
        exit 1
    printf '%s\n' "$outcome"
    case "$outcome" in
        *" ERROR "*) exit 1 ;;
    esac
}

do_promote() {
    local new_slave="" role="" pid log_offset
    while [ "$#" -gt 0 ]; do
        case "$1" in
            -h|--help) usage_promote; exit 0 ;;
            --new-slave)
                [ "$#" -ge 2 ] || { usage_promote >&2; die "--new-slave needs HOST:PORT"; }
                new_slave="$2"
                shift 2 ;;
            --new-slave=*) new_slave="${1#--new-slave=}"; shift ;;
            *) usage_promote >&2; die "unknown promote argument: $1" ;;
        esac
    done
    if [ -n "$new_slave" ] && ! [[ "$new_slave" =~ ^[^[:space:]]+:[0-9]+$ ]]; then
        die "--new-slave $new_slave is not HOST:PORT"
    fi
    if pid="$(running_pid)"; then
        role="$(process_role "$pid")"
        [ -n "$role" ] ||
            die "meta-server (pid $pid) is not a slave (no --slave or --gregor): nothing to promote"
        say "stopping the $(role_text "$pid" "$CONF") (pid $pid)"
        stop_broker || true
    else
        role="$(last_start_role)"
        say "no slave runs from $RUN_DIR; starting its config and data as the master"
    fi
    if [ "$role" = gregor ]; then
        recover_offsets_of_conf || die "offset recovery failed; nothing was started"
    elif [ -n "$new_slave" ]; then
        die "--new-slave promotes a gregor slave; $RUN_DIR did not run one"
    fi
    mkdir -p "$RUN_DIR"
    touch "$LOG_FILE"
    log_offset="$(wc -c <"$LOG_FILE")"
    if [ -n "$new_slave" ]; then
        write_promoted_samsa_conf "$new_slave"
        SAMSA_CONF="$RUN_DIR/samsa_master.promoted.properties"
        do_start samsa
    else
        do_start
    fi
    wait_for_master_registration "$log_offset"
}

# Prints "slave" or "gregor" when process $1 runs as an async or a gregor slave, else nothing.
process_role() {
    tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline" | grep -oE -- ' --(slave|gregor) ' |
        tr -d ' -' || true
}

# Prints what process $1 runs as: "master", "samsa master", "gregor slave" or "async slave of
# broker N" (N the brokerId of config file $2, left out when the file does not load).
role_text() {
    local broker_id
    case "$(tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline")" in
        *" --gregor "*) echo "gregor slave" ;;
        *" --samsa "*) echo "samsa master" ;;
        *" --slave "*)
            broker_id="$("$PY" -c 'import sys; from meta.config import load_config
print(load_config(sys.argv[1]).broker_id)' "$2" 2>/dev/null)" || broker_id=""
            echo "async slave${broker_id:+ of broker $broker_id}" ;;
        *) echo "master" ;;
    esac
}

# Prints "slave" or "gregor" when the last start logged in this run dir was one, else nothing.
last_start_role() {
    grep -a -F ' tools/metaServer.sh start: ' "$LOG_FILE" 2>/dev/null | tail -n 1 |
        grep -oE -- ' --(slave|gregor) ' | tr -d ' -' || true
}

# Runs 'meta-admin recover-offsets --execute' on $CONF with its own ZooKeeper settings,
# unless ZooKeeper is disabled there.
recover_offsets_of_conf() {
    local enabled
    enabled="$("$PY" - "$CONF" <<'EOF'
import sys
from meta.config import load_config
print("yes" if load_config(sys.argv[1]).zookeeper.enabled else "no")
EOF
)" || return 1
    if [ "$enabled" != yes ]; then
        say "zk.zkEnable=false in $CONF: no consumer offsets to recover"
        return 0
    fi
    say "recovering the consumer offsets of $CONF against its data"
    "$PY" -m meta.admin recover-offsets -f "$CONF" --zk-from-config --execute
}

# Writes $RUN_DIR/samsa_master.promoted.properties: $SAMSA_CONF (when it exists) with
# slave=$1 and recoverOffset=false (the offsets were just recovered).
write_promoted_samsa_conf() {
    mkdir -p "$RUN_DIR"
    {
        printf '# Written by tools/metaServer.sh promote --new-slave %s\n' "$1"
        if [ -f "$SAMSA_CONF" ]; then
            grep -vE '^[[:space:]]*(slave|recoverOffset)[[:space:]]*[=:]' "$SAMSA_CONF" || true
        fi
        printf 'slave=%s\nrecoverOffset=false\n' "$1"
    } >"$RUN_DIR/samsa_master.promoted.properties"
}

# Waits until the broker started at log offset $1 logged its registration as master.
wait_for_master_registration() {
    local serving
    say "waiting for the registration as master (the old master's ZooKeeper session must end)"
    serving="$(wait_log_match "$1" 'broker [0-9]* serving meta://[^ ]*' "$PROMOTE_TIMEOUT_S" \
        "the promoted broker exited (does another master of its brokerId still run?)" \
        "not registered within ${PROMOTE_TIMEOUT_S} s; it still runs")" || exit 1
    say "promoted: $serving is the master"
}

do_status() {
    case "${1:-}" in
        "") ;;
        -h|--help) usage_status; exit 0 ;;
        *) usage_status >&2; die "status takes no arguments (got $*)" ;;
    esac
    local pid host port served conf local_flag=0
    if pid="$(running_pid)"; then
        tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- " --local" && local_flag=1
        conf="$(process_conf "$pid")" || conf="$CONF"
        read -r host port <<<"$(listen_address "$local_flag" "$conf")"
        served="$(served_port "$(start_offset)")"
        [ -z "$served" ] || port="$served"
        if port_open "$host" "$port"; then
            say "meta-server is running as $(role_text "$pid" "$conf") (pid $pid, port $port)"
            say "$(readiness)"
        elif [ "$port" = 0 ]; then
            say "meta-server is running (pid $pid) but not serving yet (serverPort=0 and no" \
                "'serving meta://HOST:PORT' line in $LOG_FILE since its start)"
        else
            say "meta-server is running (pid $pid) but $host:$port does not accept connections"
        fi
        if [ -f "$ZK_MARKER" ]; then
            "$ROOT/tools/zookeeper.sh" status --run-dir "$RUN_DIR" || true
        fi
        exit 0
    fi
    if [ -f "$PID_FILE" ]; then
        say "meta-server is not running (stale pid file $PID_FILE, pid $(cat "$PID_FILE"))"
        exit 1
    fi
    say "meta-server is not running"
    exit 3
}

[ "$#" -ge 1 ] || { usage >&2; die "missing command"; }
command_name="$1"
shift
case "$command_name" in
    -h|--help|help) usage ;;
    start) do_start "$@" ;;
    stop) do_stop "$@" ;;
    restart) do_restart "$@" ;;
    status) do_status "$@" ;;
    reload) do_reload "$@" ;;
    promote) do_promote "$@" ;;
    *) usage >&2; die "unknown command: $command_name" ;;
esac
