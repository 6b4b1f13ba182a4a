#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Control the private etcd / RabbitMQ / PostgreSQL / MariaDB / Ironic / Keystone / Redis /
# Placement servers started by tools/with-test-servers.sh, e.g. from a functional test that injects faults.
#
# Usage (inside a command run by tools/with-test-servers.sh, which exports
# RINGFLEET_TEST_SERVERS_DIR):
#   tools/test-servers-ctl.sh ACTION [ARGS...]
#
# Actions (every start-* waits until the server is ready, every stop-*/kill-*
# waits until the process is gone; all exit non-zero on failure):
#   start-etcd | stop-etcd | kill-etcd | restart-etcd | wait-etcd
#       kill-etcd = SIGKILL (no graceful shutdown); start-etcd reuses the same
#       data dir and the exact command line in $RINGFLEET_TEST_ETCD_CMD.
#   start-rabbit | stop-rabbit | kill-rabbit | restart-rabbit | wait-rabbit
#       full broker restart on the same Mnesia dir (durable queues survive).
#   stop-app-rabbit | start-app-rabbit
#       rabbitmqctl stop_app / start_app: the Erlang node stays up, AMQP closes.
#   start-pg | stop-pg | kill-pg | restart-pg | wait-pg
#       stop-pg = fast shutdown (SIGINT); kill-pg = SIGKILL of the postmaster
#       (start-pg then removes its stale lock files and does crash recovery).
#   freeze-pg | thaw-pg
#       SIGSTOP / SIGCONT of the postmaster and every backend: a hung server
#       that still accepts TCP (the kernel completes handshakes) and answers
#       nothing.
#   start-mariadb | stop-mariadb | kill-mariadb | restart-mariadb | wait-mariadb
#       stop-mariadb = normal shutdown (SIGTERM); kill-mariadb = SIGKILL
#       (start-mariadb then does InnoDB crash recovery).
#   start-ironic | stop-ironic | kill-ironic | restart-ironic | wait-ironic
#       the all-in-one ironic (API + conductor, fake hardware) on the same
#       SQLite file, so nodes survive; kill-ironic = SIGKILL of its process
#       group (master and workers).
#   start-keystone | stop-keystone | kill-keystone | restart-keystone | wait-keystone
#       Keystone under gunicorn on the same SQLite file and fernet keys, so
#       users, roles and unrevoked tokens survive; kill-keystone = SIGKILL of
#       its process group (gunicorn master and worker).
#   start-redis | stop-redis | kill-redis | restart-redis | wait-redis
#       stop-redis = SIGTERM (Redis saves its RDB snapshot on the way out, so
#       the data survives restart-redis); kill-redis = SIGKILL (the data
#       written since the last snapshot is lost, as on a crashed host).
#   start-placement | stop-placement | kill-placement | restart-placement | wait-placement
#       Placement under gunicorn on the same SQLite file, so resource
#       providers, inventories and allocations survive; kill-placement =
#       SIGKILL of its process group (gunicorn master and worker).
#   pid etcd|rabbit|pg|mariadb|epmd|ironic|keystone|redis|placement
#                              print the current PID (changes on restart)
#   rabbitmqctl ARGS...        run rabbitmqctl against our node
#   status                     one line per server: running/stopped, PID
#   env                        print the RINGFLEET_TEST_* variables
#
# This file is also sourced by tools/with-test-servers.sh as a function
# library (everything prefixed rf_); only the dispatch at the end is skipped.

# ---------------------------------------------------------------- helpers --

rf_msg() { printf '%s: %s\n' "${RF_PROG:-test-servers}" "$*" >&2; }
rf_die() { rf_msg "error: $*"; exit 1; }

# Microseconds since the epoch (locale-independent).
rf_now_us() { local t=${EPOCHREALTIME//[!0-9]/}; printf '%s' "$((10#$t))"; }

# Seconds with one decimal since a rf_now_us timestamp.
rf_elapsed() {
    local ms=$((($(rf_now_us) - $1) / 1000))
    printf '%d.%d' "$((ms / 1000))" "$((ms % 1000 / 100))"
}

# True while PID names a live (non-zombie) process.
rf_alive() {
    local pid=${1:-} stat
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat:0:1} != Z && ${stat:0:1} != X ]]
}

rf_read_pid() { local f=$1 p=''; [[ -s $f ]] && read -r p <"$f"; printf '%s' "${p:-}"; }

# rf_wait_gone PID SECONDS: wait for a process to die; 1 if still alive.
rf_wait_gone() {
    local pid=$1 end=$(($(rf_now_us) + $2 * 1000000))
    while rf_alive "$pid"; do
        (($(rf_now_us) < end)) || return 1
        sleep 0.05
    done
}

# rf_kill_pid PID NAME [SIGNAL] [SECONDS]: send SIGNAL (TERM), wait, then SIGKILL.
rf_kill_pid() {
    local pid=$1 name=$2 sig=${3:-TERM} secs=${4:-20}
    rf_alive "$pid" || return 0
    kill "-$sig" "$pid" 2>/dev/null || true
    kill -CONT "$pid" 2>/dev/null || true # a test may have left it SIGSTOPped
    rf_wait_gone "$pid" "$secs" && return 0
    rf_msg "$name (pid $pid) still alive ${secs}s after SIG$sig, sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    rf_wait_gone "$pid" 10 || rf_msg "$name (pid $pid) survived SIGKILL"
}

# True if something accepts TCP connections on 127.0.0.1:PORT.
rf_tcp_open() {
    # shellcheck disable=SC2016 # $1 is expanded by the inner bash
    timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null
}

# rf_wait_for SECONDS FUNC [ARGS...]: retry FUNC until it succeeds or time is up.
rf_wait_for() {
    local secs=$1 end
    shift
    end=$(($(rf_now_us) + secs * 1000000))
    until "$@"; do
        (($(rf_now_us) < end)) || return 1
        sleep 0.1
    done
}

# rf_why_not PID SECONDS: why a server is not ready.
rf_why_not() {
    if rf_alive "$1"; then
        printf 'did not become ready within %s s (pid %s)' "$2" "$1"
    else
        printf 'is not running (exited during startup?)'
    fi
}

rf_tail() {
    local f
    for f in "$@"; do
        [[ -s $f ]] || continue
        printf '%s\n' "----- last lines of $f -----" >&2
        tail -n "${RF_TAIL_LINES:-60}" "$f" >&2
    done
}

# ------------------------------------------------------------------ state --

# All paths derive from RF_DIR; ports etc. come from $RF_DIR/state.env.
rf_paths() {
    RF_STATE=$RF_DIR/state.env
    RF_ETCD_DIR=$RF_DIR/etcd
    RF_ETCD_CMD=$RF_ETCD_DIR/etcd.cmd
    RF_ETCD_PIDF=$RF_ETCD_DIR/etcd.pid
    RF_ETCD_LOG=$RF_ETCD_DIR/etcd.log
    RF_RABBIT_DIR=$RF_DIR/rabbit
    RF_RABBIT_ENV=$RF_RABBIT_DIR/rabbit.env
    RF_RABBITMQCTL=$RF_RABBIT_DIR/rabbitmqctl
    RF_RABBIT_PIDF=$RF_RABBIT_DIR/rabbit.pid
    RF_RABBIT_LAUNCHER_PIDF=$RF_RABBIT_DIR/launcher.pid
    RF_RABBIT_LOG=$RF_RABBIT_DIR/stdout.log
    RF_EPMD_PIDF=$RF_RABBIT_DIR/epmd.pid
    RF_EPMD_LOG=$RF_RABBIT_DIR/epmd.log
    RF_PG_DIR=$RF_DIR/pg
    RF_PG_DATA=$RF_PG_DIR/data
    RF_PG_SOCK=$RF_PG_DIR/run
    RF_PG_LOG=$RF_PG_DIR/postgres.log
    RF_MARIA_DIR=$RF_DIR/mariadb
    RF_MARIA_DATA=$RF_MARIA_DIR/data
    RF_MARIA_SOCK=$RF_MARIA_DIR/mariadbd.sock
    RF_MARIA_PIDF=$RF_MARIA_DIR/mariadbd.pid
    RF_MARIA_LOG=$RF_MARIA_DIR/mariadbd.log
    RF_IRONIC_DIR=$RF_DIR/ironic
    RF_IRONIC_CONF=$RF_IRONIC_DIR/ironic.conf
    RF_IRONIC_PIDF=$RF_IRONIC_DIR/ironic.pid
    RF_IRONIC_LOG=$RF_IRONIC_DIR/stdout.log
    RF_KEYSTONE_DIR=$RF_DIR/keystone
    RF_KEYSTONE_CONF=$RF_KEYSTONE_DIR/keystone.conf
    RF_KEYSTONE_PIDF=$RF_KEYSTONE_DIR/gunicorn.pid
    RF_KEYSTONE_LOG=$RF_KEYSTONE_DIR/stdout.log
    RF_REDIS_DIR=$RF_DIR/redis
    RF_REDIS_PIDF=$RF_REDIS_DIR/redis.pid
    RF_REDIS_LOG=$RF_REDIS_DIR/redis.log
    RF_PLACEMENT_DIR=$RF_DIR/placement
    RF_PLACEMENT_CONF=$RF_PLACEMENT_DIR/placement.conf
    RF_PLACEMENT_PIDF=$RF_PLACEMENT_DIR/gunicorn.pid
    RF_PLACEMENT_LOG=$RF_PLACEMENT_DIR/stdout.log
}

rf_load_state() {
    RF_DIR=${RINGFLEET_TEST_SERVERS_DIR:-}
    [[ -n $RF_DIR ]] || rf_die "RINGFLEET_TEST_SERVERS_DIR is not set (run under tools/with-test-servers.sh)"
    [[ -r $RF_DIR/state.env ]] || rf_die "$RF_DIR/state.env not found"
    rf_paths
    # shellcheck source=/dev/null
    . "$RF_STATE"
}

rf_has() { [[ ,$RF_SERVERS, == *,$1,* ]]; }

# ------------------------------------------------------------------- etcd --

rf_etcd_url() { printf 'http://127.0.0.1:%s' "$RF_ETCD_PORT"; }

# Writes the exact command line (shell-quoted, one line; shlex.split() works).
rf_etcd_write_cmd() {
    local peer="http://127.0.0.1:$RF_ETCD_PEER_PORT" client
    client=$(rf_etcd_url)
    local -a cmd=(
        "$(command -v etcd)" --name ringfleet-ci --data-dir "$RF_ETCD_DIR/data"
        --logger=zap --log-level=warn
        # single member: short election timeout = ready (and re-elected
        # after a restart) in ~0.1 s instead of ~0.5-1 s
        --heartbeat-interval=50 --election-timeout=250
        --listen-client-urls "$client" --advertise-client-urls "$client"
        --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer"
        --initial-cluster "ringfleet-ci=$peer" --initial-cluster-state new
    )
    printf '%q ' "${cmd[@]}" | sed 's/ $//' >"$RF_ETCD_CMD"
    printf '\n' >>"$RF_ETCD_CMD"
}

rf_etcd_start_bg() {
    local pid cmdline
    pid=$(rf_read_pid "$RF_ETCD_PIDF")
    if rf_alive "$pid"; then rf_msg "etcd already running (pid $pid)"; return 0; fi
    cmdline=$(<"$RF_ETCD_CMD")
    printf '=== start %(%F %T)T ===\n' -1 >>"$RF_ETCD_LOG"
    eval "setsid $cmdline </dev/null >>\"\$RF_ETCD_LOG\" 2>&1 &"
    printf '%s\n' "$!" >"$RF_ETCD_PIDF"
    disown "$!" # no "Killed" job report when a test kill -9s it
}

rf_etcd_ready() {
    local pid
    pid=$(rf_read_pid "$RF_ETCD_PIDF")
    rf_alive "$pid" || return 2
    curl -sf --max-time 2 "$(rf_etcd_url)/health" 2>/dev/null | grep -q '"health":"true"'
}

# rf_etcd_wait SECONDS: 0 when healthy; on failure prints the log tail.
rf_etcd_wait() {
    local rc=0
    rf_wait_for "$1" rf_etcd_ready_or_dead || rc=1
    if ((rc == 0)) && rf_etcd_ready; then return 0; fi
    rf_msg "etcd $(rf_why_not "$(rf_read_pid "$RF_ETCD_PIDF")" "$1")"
    rf_tail "$RF_ETCD_LOG"
    return 1
}
# Stops waiting early when the process died.
rf_etcd_ready_or_dead() { local r=0; rf_etcd_ready || r=$?; ((r != 1)); }

rf_etcd_stop() { # [SIGNAL]
    rf_kill_pid "$(rf_read_pid "$RF_ETCD_PIDF")" etcd "${1:-TERM}" 15
}

# ------------------------------------------------------------------- epmd --

rf_epmd_start_bg() {
    local pid
    pid=$(rf_read_pid "$RF_EPMD_PIDF")
    if rf_alive "$pid"; then return 0; fi
    ERL_EPMD_PORT=$RF_EPMD_PORT ERL_EPMD_ADDRESS=127.0.0.1 \
        setsid epmd -address 127.0.0.1 -port "$RF_EPMD_PORT" </dev/null >>"$RF_EPMD_LOG" 2>&1 &
    printf '%s\n' "$!" >"$RF_EPMD_PIDF"
    disown "$!"
}

rf_epmd_stop() { rf_kill_pid "$(rf_read_pid "$RF_EPMD_PIDF")" epmd TERM 5; }

# ----------------------------------------------------------------- rabbit --

rf_rabbit_url() { printf 'rabbit://guest:guest@127.0.0.1:%s/' "$RF_AMQP_PORT"; }

# One-time setup of the node's files, env file and rabbitmqctl wrapper.
rf_rabbit_init() {
    mkdir -p "$RF_RABBIT_DIR/home" "$RF_RABBIT_DIR/mnesia" "$RF_RABBIT_DIR/log"
    printf '[].\n' >"$RF_RABBIT_DIR/enabled_plugins"
    # No rabbitmq.conf on purpose (a system one must not be read; parsing one
    # costs boot time): settings go in as Erlang args. A 10 MB disk alarm
    # threshold keeps a nearly full CI disk from blocking publishers.
    local -a env=(
        "HOME=$RF_RABBIT_DIR/home"
        "RABBITMQ_NODENAME=$RF_RABBIT_NODE"
        "RABBITMQ_NODE_IP_ADDRESS=127.0.0.1"
        "RABBITMQ_NODE_PORT=$RF_AMQP_PORT"
        "RABBITMQ_DIST_PORT=$RF_DIST_PORT"
        "RABBITMQ_MNESIA_BASE=$RF_RABBIT_DIR/mnesia"
        "RABBITMQ_LOG_BASE=$RF_RABBIT_DIR/log"
        "RABBITMQ_PID_FILE=$RF_RABBIT_PIDF"
        "RABBITMQ_CONF_ENV_FILE=/dev/null"
        "RABBITMQ_ENABLED_PLUGINS_FILE=$RF_RABBIT_DIR/enabled_plugins"
        "RABBITMQ_CONFIG_FILE=$RF_RABBIT_DIR/rabbitmq.conf"
        "RABBITMQ_ADVANCED_CONFIG_FILE=$RF_RABBIT_DIR/advanced.config"
        "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1} -rabbit disk_free_limit 10000000"
        "RABBITMQ_CTL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}"
        "ERL_EPMD_PORT=$RF_EPMD_PORT"
        "ERL_EPMD_ADDRESS=127.0.0.1"
    )
    local kv
    : >"$RF_RABBIT_ENV"
    for kv in "${env[@]}"; do
        printf 'export %s=%q\n' "${kv%%=*}" "${kv#*=}" >>"$RF_RABBIT_ENV"
    done
    cat >"$RF_RABBITMQCTL" <<EOF
#!/usr/bin/env bash
# rabbitmqctl for the private test broker $RF_RABBIT_NODE (node, cookie, epmd
# port come from the env file); extra arguments are passed through.
. $(printf '%q' "$RF_RABBIT_ENV")
exec /usr/lib/rabbitmq/bin/rabbitmqctl -n "\$RABBITMQ_NODENAME" "\$@"
EOF
    chmod +x "$RF_RABBITMQCTL"
}

rf_rabbit_pid() {
    local pid
    pid=$(rf_read_pid "$RF_RABBIT_PIDF")
    if rf_alive "$pid"; then printf '%s' "$pid"; return 0; fi
    pid=$(rf_read_pid "$RF_RABBIT_LAUNCHER_PIDF")
    if rf_alive "$pid"; then printf '%s' "$pid"; fi
}

rf_rabbit_start_bg() {
    local pid
    pid=$(rf_rabbit_pid)
    if [[ -n $pid ]]; then rf_msg "rabbit already running (pid $pid)"; return 0; fi
    rf_epmd_start_bg
    rm -f "$RF_RABBIT_PIDF"
    printf '=== start %(%F %T)T ===\n' -1 >>"$RF_RABBIT_LOG"
    (
        # shellcheck source=/dev/null
        . "$RF_RABBIT_ENV"
        exec setsid /usr/lib/rabbitmq/bin/rabbitmq-server </dev/null >>"$RF_RABBIT_LOG" 2>&1
    ) &
    printf '%s\n' "$!" >"$RF_RABBIT_LAUNCHER_PIDF"
    disown "$!"
}

rf_rabbitmqctl() { timeout "${RF_CTL_TIMEOUT:-60}" "$RF_RABBITMQCTL" "$@"; }

# 0 ready, 1 not yet, 2 process gone.
rf_rabbit_ready() {
    [[ -n $(rf_rabbit_pid) ]] || return 2
    rf_tcp_open "$RF_AMQP_PORT" || return 1
    rf_rabbitmqctl -q await_startup --timeout 10 >"$RF_RABBIT_DIR/ctl.out" 2>&1 || return 1
}
rf_rabbit_ready_or_dead() { local r=0; rf_rabbit_ready || r=$?; ((r != 1)); }

# Real AMQP 0-9-1 login as guest/guest with the stdlib (no client library).
rf_amqp_login_check() {
    python3 - "$RF_AMQP_PORT" <<'EOF'
import socket, struct, sys

def frame(sock):
    hdr = b""
    while len(hdr) < 7:
        chunk = sock.recv(7 - len(hdr))
        if not chunk:
            sys.exit("connection closed by broker (login refused?)")
        hdr += chunk
    ftype, chan, size = struct.unpack(">BHI", hdr)
    body = b""
    while len(body) < size + 1:
        chunk = sock.recv(size + 1 - len(body))
        if not chunk:
            sys.exit("connection closed mid-frame")
        body += chunk
    return ftype, body[:-1]

def method(cls, meth, args):
    payload = struct.pack(">HH", cls, meth) + args
    return struct.pack(">BHI", 1, 0, len(payload)) + payload + b"\xce"

def sstr(s):
    return struct.pack(">B", len(s)) + s

def lstr(s):
    return struct.pack(">I", len(s)) + s

s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(b"AMQP\x00\x00\x09\x01")
ftype, body = frame(s)
assert body[:4] == struct.pack(">HH", 10, 10), "expected connection.start"
s.sendall(method(10, 11, lstr(b"") + sstr(b"PLAIN") + lstr(b"\x00guest\x00guest") + sstr(b"en_US")))
ftype, body = frame(s)
cls, meth = struct.unpack(">HH", body[:4])
if (cls, meth) != (10, 30):
    sys.exit("expected connection.tune, got %d.%d %r" % (cls, meth, body[4:80]))
chan_max, frame_max, heartbeat = struct.unpack(">HIH", body[4:12])
s.sendall(method(10, 31, struct.pack(">HIH", chan_max, frame_max, 0)))
s.sendall(method(10, 40, sstr(b"/") + sstr(b"") + b"\x00"))
ftype, body = frame(s)
cls, meth = struct.unpack(">HH", body[:4])
if (cls, meth) != (10, 41):
    sys.exit("expected connection.open-ok, got %d.%d %r" % (cls, meth, body[4:80]))
s.sendall(method(10, 50, struct.pack(">H", 200) + sstr(b"bye") + struct.pack(">HH", 0, 0)))
s.close()
EOF
}

rf_rabbit_wait() {
    local rc=0
    rf_wait_for "$1" rf_rabbit_ready_or_dead || rc=1
    if ((rc == 0)) && rf_rabbit_ready; then
        if command -v python3 >/dev/null; then
            rf_amqp_login_check >"$RF_RABBIT_DIR/login.out" 2>&1 && return 0
            rf_msg "rabbit is up but AMQP login guest/guest failed:"
            cat "$RF_RABBIT_DIR/login.out" >&2
        else
            rf_rabbitmqctl -q authenticate_user guest guest >"$RF_RABBIT_DIR/ctl.out" 2>&1 && return 0
            rf_msg "rabbit is up but 'authenticate_user guest guest' failed"
        fi
    else
        rf_msg "rabbit $(rf_why_not "$(rf_rabbit_pid)" "$1")"
    fi
    rf_tail "$RF_EPMD_LOG" "$RF_RABBIT_LOG" "$RF_RABBIT_DIR/log/$RF_RABBIT_NODE.log" \
        "$RF_RABBIT_DIR/ctl.out"
    return 1
}

rf_rabbit_stop() { # [kill]
    local pid launcher
    pid=$(rf_read_pid "$RF_RABBIT_PIDF")
    launcher=$(rf_read_pid "$RF_RABBIT_LAUNCHER_PIDF")
    if [[ ${1:-} == kill ]]; then
        rf_kill_pid "$pid" rabbit KILL 5
    elif rf_alive "$pid" || rf_alive "$launcher"; then
        if rf_alive "$pid"; then
            RF_CTL_TIMEOUT=40 rf_rabbitmqctl -q stop >"$RF_RABBIT_DIR/ctl.out" 2>&1 ||
                rf_msg "rabbitmqctl stop failed: $(tail -n 3 "$RF_RABBIT_DIR/ctl.out" | tr '\n' ' ')"
        fi
        rf_kill_pid "$pid" rabbit TERM 20
    fi
    rf_kill_pid "$launcher" rabbit-launcher TERM 10
}

# --------------------------------------------------------------- postgres --

rf_pg_url() {
    printf 'postgresql+psycopg2://%s:%s@127.0.0.1:%s/%s' \
        "$RF_DB_USER" "$RF_DB_PASS" "$RF_PG_PORT" "$RF_DB_NAME"
}

# Run a command as OSUSER when we are root (postgres and mariadbd refuse to
# run as root), from DIR, a directory it can read.
rf_run_as() { # DIR OSUSER COMMAND...
    local dir=$1 osuser=$2
    shift 2
    if ((EUID == 0)); then
        (cd "$dir" && runuser -u "$osuser" -- "$@")
    else
        (cd "$dir" && "$@")
    fi
}

# As the OS user owning the cluster (postgres when we are root).
rf_pg_as() { rf_run_as "$RF_PG_DIR" "$RF_PG_OSUSER" "$@"; }

rf_pg_init() {
    mkdir -p "$RF_PG_DIR"
    if ((EUID == 0)); then chown "$RF_PG_OSUSER:" "$RF_PG_DIR"; fi
    chmod 700 "$RF_PG_DIR"
    rf_pg_as mkdir -p "$RF_PG_SOCK"
    # shellcheck disable=SC2153 # RF_PG_BIN comes from state.env
    if ! rf_pg_as "$RF_PG_BIN/initdb" -D "$RF_PG_DATA" -U postgres --no-sync \
        --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 \
        >"$RF_PG_DIR/initdb.log" 2>&1; then
        rf_msg "initdb failed"
        rf_tail "$RF_PG_DIR/initdb.log"
        return 1
    fi
    rf_pg_as tee -a "$RF_PG_DATA/postgresql.conf" >/dev/null <<EOF
# private test server (tools/with-test-servers.sh)
listen_addresses = '127.0.0.1'
port = $RF_PG_PORT
unix_socket_directories = '$RF_PG_SOCK'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
logging_collector = off
EOF
}

rf_pg_start_bg() {
    local pid
    pid=$(rf_pg_pid)
    if [[ -n $pid ]]; then rf_msg "postgres already running (pid $pid)"; return 0; fi
    # After a kill -9 the dead postmaster's lock file stays behind, and where
    # PID 1 does not reap orphans its zombie makes postgres think it is still
    # running: remove the lock file once the postmaster is really gone.
    pid=$(rf_read_pid "$RF_PG_DATA/postmaster.pid")
    if [[ -n $pid ]] && ! rf_alive "$pid"; then
        rm -f "$RF_PG_DATA/postmaster.pid" "$RF_PG_SOCK"/.s.PGSQL.*
    fi
    if ! rf_pg_as "$RF_PG_BIN/pg_ctl" -D "$RF_PG_DATA" -l "$RF_PG_LOG" -W start \
        >>"$RF_PG_DIR/pg_ctl.log" 2>&1; then
        rf_msg "pg_ctl start failed"
        rf_tail "$RF_PG_DIR/pg_ctl.log"
        return 1
    fi
}

rf_pg_pid() {
    local pid
    pid=$(rf_read_pid "$RF_PG_DATA/postmaster.pid")
    if rf_alive "$pid"; then printf '%s' "$pid"; fi
}

rf_pg_ready() {
    [[ -n $(rf_pg_pid) ]] || return 1
    "$RF_PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$RF_PG_PORT" -t 2
}

# Creates the role and database (first start only) and checks the TCP login
# with the password, i.e. what the SQLAlchemy URL will do. The role may signal
# other backends: the tests drop their per-test databases WITH (FORCE), and an
# autovacuum worker that happens to be in one of them runs as no role, so
# without pg_signal_backend the drop fails ("must be a member of the role whose
# process is being terminated") — seen once in CI.
rf_pg_setup_db() {
    if [[ ! -e $RF_PG_DIR/db-created ]]; then
        rf_pg_as "$RF_PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$RF_PG_SOCK" -p "$RF_PG_PORT" \
            -U postgres -d postgres \
            -c "CREATE ROLE $RF_DB_USER LOGIN CREATEDB PASSWORD '$RF_DB_PASS'" \
            -c "CREATE DATABASE $RF_DB_NAME OWNER $RF_DB_USER" \
            -c "GRANT pg_signal_backend TO $RF_DB_USER" \
            >"$RF_PG_DIR/setup.log" 2>&1 || return 1
        rf_pg_as touch "$RF_PG_DIR/db-created"
    fi
    PGPASSWORD=$RF_DB_PASS PGCONNECT_TIMEOUT=5 "$RF_PG_BIN/psql" -X -qAt \
        -h 127.0.0.1 -p "$RF_PG_PORT" -U "$RF_DB_USER" -d "$RF_DB_NAME" \
        -c 'SELECT 1' >>"$RF_PG_DIR/setup.log" 2>&1
}

rf_pg_wait() {
    if rf_wait_for "$1" rf_pg_ready && rf_pg_setup_db; then return 0; fi
    rf_msg "postgres $(rf_why_not "$(rf_pg_pid)" "$1")"
    rf_tail "$RF_PG_LOG" "$RF_PG_DIR/setup.log"
    return 1
}

# rf_children PID: the pids whose parent is PID.
rf_children() {
    local p st
    for p in /proc/[0-9]*/stat; do
        st=$(cat "$p" 2>/dev/null) || continue
        st=${st##*) }
        st=${st#? }
        [[ ${st%% *} == "$1" ]] && p=${p#/proc/} && echo "${p%/stat}"
    done
    return 0
}

rf_pg_signal_all() { # SIG: the postmaster first (no new backend), then its children
    local pid p
    pid=$(rf_pg_pid)
    [[ -n $pid ]] || { rf_msg "postgres is not running"; return 1; }
    kill "-$1" "$pid"
    for p in $(rf_children "$pid"); do kill "-$1" "$p" 2>/dev/null || true; done
}

rf_pg_stop() { # [kill]
    local pid
    pid=$(rf_pg_pid)
    [[ -n $pid ]] || return 0
    rf_pg_signal_all CONT # a test may have left it frozen
    if [[ ${1:-} == kill ]]; then
        # Backends exit by themselves once the postmaster is gone; wait for
        # them, or a restart finds the old shared memory still attached.
        local p
        local -a kids=()
        mapfile -t kids < <(rf_children "$pid")
        rf_kill_pid "$pid" postgres KILL 5
        for p in "${kids[@]}"; do rf_kill_pid "$p" postgres-child QUIT 10; done
        return 0
    fi
    # SIGINT = pg_ctl stop -m fast, without needing to switch user.
    rf_kill_pid "$pid" postgres INT 20
}

# ---------------------------------------------------------------- mariadb --

rf_maria_url() {
    printf 'mysql+pymysql://%s:%s@127.0.0.1:%s/%s?charset=utf8mb4' \
        "$RF_DB_USER" "$RF_DB_PASS" "$RF_MARIA_PORT" "$RF_DB_NAME"
}

# As the OS user owning the datadir (mysql when we are root).
rf_maria_as() { rf_run_as "$RF_MARIA_DIR" "$RF_MARIA_OSUSER" "$@"; }

# The client as the datadir's OS user, over the socket: mariadb-install-db
# gives that user an account authenticated by unix_socket (no password).
rf_maria_admin_sql() {
    rf_maria_as mariadb --no-defaults --batch --socket="$RF_MARIA_SOCK" \
        -u "$RF_MARIA_OSUSER" "$@"
}

rf_maria_init() {
    mkdir -p "$RF_MARIA_DIR"
    if ((EUID == 0)); then chown "$RF_MARIA_OSUSER:" "$RF_MARIA_DIR"; fi
    chmod 700 "$RF_MARIA_DIR"
    # The bootstrap server's temporary tables go to our private dir, not the
    # shared /tmp: two test-server sets bootstrapping at once (CI runs two
    # streams) failed there with "Could not remove temporary table
    # '/tmp/#sql-temptable-…'". One more try from an empty datadir covers a
    # bootstrap that fails for a reason of its own; the first log is kept.
    local try
    for try in 1 2; do
        if rf_maria_as mariadb-install-db --no-defaults --datadir="$RF_MARIA_DATA" \
            --tmpdir="$RF_MARIA_DIR" \
            --auth-root-authentication-method=socket --skip-test-db --skip-name-resolve \
            >"$RF_MARIA_DIR/install-db.$try.log" 2>&1; then
            return 0
        fi
        rf_msg "mariadb-install-db failed (try $try of 2)"
        rf_tail "$RF_MARIA_DIR/install-db.$try.log"
        rm -rf "$RF_MARIA_DATA"
    done
    return 1
}

rf_maria_start_bg() {
    local pid
    pid=$(rf_maria_pid)
    if [[ -n $pid ]]; then rf_msg "mariadb already running (pid $pid)"; return 0; fi
    rm -f "$RF_MARIA_PIDF"
    # The server collation stays the case-insensitive default of a Debian
    # install (utf8mb4_general_ci): the schema must make identity columns
    # binary by itself, and the tests show it does. Durability is traded
    # for speed as for postgres (fsync off).
    rf_maria_as setsid /usr/sbin/mariadbd --no-defaults \
        --datadir="$RF_MARIA_DATA" --socket="$RF_MARIA_SOCK" --pid-file="$RF_MARIA_PIDF" \
        --log-error="$RF_MARIA_LOG" --tmpdir="$RF_MARIA_DIR" \
        --bind-address=127.0.0.1 --port="$RF_MARIA_PORT" --skip-name-resolve \
        --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
        --max-connections=400 --innodb-buffer-pool-size=128M \
        --innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0 --sync-binlog=0 \
        </dev/null >>"$RF_MARIA_DIR/stdout.log" 2>&1 &
    disown "$!"
}

# The server's PID, from its pid file (written once it is up; the process
# started above is the server itself, setsid execs it).
rf_maria_pid() {
    local pid
    pid=$(rf_read_pid "$RF_MARIA_PIDF")
    if rf_alive "$pid"; then printf '%s' "$pid"; fi
}

rf_maria_ready() {
    [[ -n $(rf_maria_pid) ]] || return 1
    rf_maria_as mariadb-admin --no-defaults --socket="$RF_MARIA_SOCK" \
        -u "$RF_MARIA_OSUSER" --connect-timeout=2 ping >/dev/null 2>&1
}

# Creates the user (with a password) and the database on the first start,
# then checks the TCP login with the password, i.e. what the SQLAlchemy URL
# will do. The user may create and drop databases: tests use one each.
rf_maria_setup_db() {
    if [[ ! -e $RF_MARIA_DIR/db-created ]]; then
        rf_maria_admin_sql -e "
            CREATE USER '$RF_DB_USER'@'127.0.0.1' IDENTIFIED BY '$RF_DB_PASS';
            GRANT ALL PRIVILEGES ON *.* TO '$RF_DB_USER'@'127.0.0.1';
            CREATE DATABASE $RF_DB_NAME;" >"$RF_MARIA_DIR/setup.log" 2>&1 || return 1
        touch "$RF_MARIA_DIR/db-created"
    fi
    MYSQL_PWD=$RF_DB_PASS mariadb --no-defaults --batch --connect-timeout=5 \
        -h 127.0.0.1 -P "$RF_MARIA_PORT" -u "$RF_DB_USER" "$RF_DB_NAME" \
        -e 'SELECT 1' >>"$RF_MARIA_DIR/setup.log" 2>&1
}

rf_maria_wait() {
    if rf_wait_for "$1" rf_maria_ready && rf_maria_setup_db; then return 0; fi
    rf_msg "mariadb $(rf_why_not "$(rf_maria_pid)" "$1")"
    rf_tail "$RF_MARIA_LOG" "$RF_MARIA_DIR/stdout.log" "$RF_MARIA_DIR/setup.log"
    return 1
}

rf_maria_stop() { # [kill]
    local pid
    pid=$(rf_maria_pid)
    [[ -n $pid ]] || return 0
    if [[ ${1:-} == kill ]]; then
        rf_kill_pid "$pid" mariadb KILL 5
    else
        # SIGTERM = a normal shutdown (InnoDB flushes; the next start needs
        # no crash recovery).
        rf_kill_pid "$pid" mariadb TERM 30
    fi
}

# ----------------------------------------------------------------- ironic --

rf_ironic_url() { printf 'http://127.0.0.1:%s' "$RF_IRONIC_PORT"; }

# [conductor] deploy_callback_timeout of the test Ironic, in seconds (exported
# as RINGFLEET_TEST_IRONIC_CALLBACK_TIMEOUT): how long a deploy of a
# custom-agent node waits in "wait call-back" before it fails.
RF_IRONIC_CALLBACK_TIMEOUT=20

# Config and schema (first start only); RF_IRONIC_VENV comes from state.env.
rf_ironic_init() {
    mkdir -p "$RF_IRONIC_DIR/locks"
    local iface
    cat >"$RF_IRONIC_CONF" <<EOF
# private test server (tools/with-test-servers.sh)
[DEFAULT]
host = ringfleet-ci
auth_strategy = noauth
rpc_transport = none
log_file = $RF_IRONIC_DIR/ironic.log
enabled_hardware_types = fake-hardware
EOF
    for iface in bios console firmware inspect raid rescue vendor; do
        printf 'enabled_%s_interfaces = fake,no-%s\n' "$iface" "$iface" >>"$RF_IRONIC_CONF"
    done
    for iface in boot management power; do
        printf 'enabled_%s_interfaces = fake\n' "$iface" >>"$RF_IRONIC_CONF"
    done
    # custom-agent besides fake (the default): a node a test switches to it
    # waits in "wait call-back" for a ramdisk that never calls, and fails
    # its deploy after [conductor] deploy_callback_timeout, a real deploy
    # failure; the timeouts are checked every check_provision_state_interval.
    cat >>"$RF_IRONIC_CONF" <<EOF
enabled_deploy_interfaces = fake,custom-agent
default_deploy_interface = fake
enabled_network_interfaces = noop
enabled_storage_interfaces = noop
default_network_interface = noop
[api]
host_ip = 127.0.0.1
port = $RF_IRONIC_PORT
[conductor]
deploy_callback_timeout = $RF_IRONIC_CALLBACK_TIMEOUT
check_provision_state_interval = 1
[database]
connection = sqlite:///$RF_IRONIC_DIR/ironic.sqlite
[service_catalog]
# the URL a deploy ramdisk would call back (custom-agent needs one to start)
endpoint_override = $(rf_ironic_url)
[dhcp]
dhcp_provider = none
[fake]
deploy_delay = $RF_IRONIC_DEPLOY_DELAY
[oslo_concurrency]
lock_path = $RF_IRONIC_DIR/locks
EOF
    if ! "$RF_IRONIC_VENV/bin/ironic-dbsync" --config-file "$RF_IRONIC_CONF" create_schema \
        >"$RF_IRONIC_DIR/dbsync.log" 2>&1; then
        rf_msg "ironic-dbsync create_schema failed"
        rf_tail "$RF_IRONIC_DIR/dbsync.log"
        return 1
    fi
}

rf_ironic_start_bg() {
    rf_group_start ironic "$RF_IRONIC_PIDF" "$RF_IRONIC_LOG" "$RF_IRONIC_DIR" \
        "$RF_IRONIC_VENV/bin/ironic" --config-file "$RF_IRONIC_CONF"
}

# 0 ready, 1 not yet, 2 process gone.
rf_ironic_ready() {
    rf_alive "$(rf_read_pid "$RF_IRONIC_PIDF")" || return 2
    curl -sf --max-time 2 -H 'X-OpenStack-Ironic-API-Version: 1.82' \
        "$(rf_ironic_url)/v1/drivers" 2>/dev/null | grep -q '"fake-hardware"' || return 1
}
rf_ironic_ready_or_dead() { local r=0; rf_ironic_ready || r=$?; ((r != 1)); }

rf_ironic_wait() {
    local rc=0
    rf_wait_for "$1" rf_ironic_ready_or_dead || rc=1
    if ((rc == 0)) && rf_ironic_ready; then return 0; fi
    rf_msg "ironic $(rf_why_not "$(rf_read_pid "$RF_IRONIC_PIDF")" "$1")"
    rf_tail "$RF_IRONIC_LOG" "$RF_IRONIC_DIR/ironic.log"
    return 1
}

rf_ironic_stop() { rf_group_stop "$RF_IRONIC_PIDF" ironic "${1:-TERM}"; }

# ------------------------------------------------------- process groups --

# rf_group_start NAME PIDFILE LOG DIR COMMAND...: COMMAND in DIR, in its own
# session and process group (so that rf_group_stop reaches the workers it
# forks), appending to LOG, its PID in PIDFILE; nothing if already running.
rf_group_start() {
    local name=$1 pidf=$2 log=$3 dir=$4 pid
    shift 4
    pid=$(rf_read_pid "$pidf")
    if rf_alive "$pid"; then rf_msg "$name already running (pid $pid)"; return 0; fi
    printf '=== start %(%F %T)T ===\n' -1 >>"$log"
    (cd "$dir" && exec setsid "$@") </dev/null >>"$log" 2>&1 &
    printf '%s\n' "$!" >"$pidf"
    disown "$!"
}

# Live processes in process group PGID (a server started with setsid: its
# master and the workers it forked).
rf_group() {
    local p st
    for p in /proc/[0-9]*/stat; do
        st=$(cat "$p" 2>/dev/null) || continue
        st=${st##*) }
        read -r _ _ st _ <<<"$st"
        p=${p#/proc/}
        p=${p%/stat}
        [[ $st == "$1" ]] && rf_alive "$p" && printf '%s\n' "$p"
    done
    return 0
}

# rf_group_stop PIDFILE NAME SIGNAL: signal the process group led by the PID
# in PIDFILE, wait for the leader, then for each member.
rf_group_stop() {
    local pid name=$2 sig=$3 p
    pid=$(rf_read_pid "$1")
    [[ $pid =~ ^[0-9]+$ ]] || return 0
    local -a group
    mapfile -t group < <(rf_group "$pid")
    ((${#group[@]})) || return 0
    kill "-$sig" -- "-$pid" 2>/dev/null || true
    rf_kill_pid "$pid" "$name" "$sig" 15
    # Workers left by a SIGKILLed master would keep the port.
    for p in "${group[@]}"; do rf_kill_pid "$p" "$name-worker" "$sig" 5; done
}

# --------------------------------------------------------------- keystone --

# The identity endpoint (what clients and keystonemiddleware use as auth_url).
rf_keystone_url() { printf 'http://127.0.0.1:%s/v3' "$RF_KEYSTONE_PORT"; }

# rf_keystone_keys DIR: a key repository as keystone-manage fernet_setup
# and credential_setup make one (files 0, the staged key, and 1, the
# primary: each a Fernet key, base64 of 32 random bytes), without their
# 1.5 s of imports each.
rf_keystone_keys() {
    local i
    mkdir -p "$1"
    chmod 700 "$1"
    for i in 0 1; do
        (umask 077 && head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '\n' >"$1/$i")
    done
}

# The schema of this Keystone version (keystone-manage db_sync, 3 s),
# made once beside its virtualenv and copied by every run.
rf_keystone_schema() {
    local schema=$RF_KEYSTONE_VENV/ringfleet-schema.sqlite tmp
    if [[ ! -s $schema ]]; then
        tmp=$(mktemp "$schema.tmp.XXXXXX")
        printf '[database]\nconnection = sqlite:///%s\n' "$tmp" >"$RF_KEYSTONE_DIR/db_sync.conf"
        if ! "$RF_KEYSTONE_VENV/bin/keystone-manage" --config-file "$RF_KEYSTONE_DIR/db_sync.conf" \
            db_sync >"$RF_KEYSTONE_DIR/db_sync.log" 2>&1; then
            rm -f "$tmp"
            rf_msg "keystone-manage db_sync failed"
            rf_tail "$RF_KEYSTONE_DIR/db_sync.log"
            return 1
        fi
        mv -f "$tmp" "$schema"
    fi
    cp "$schema" "$RF_KEYSTONE_DIR/keystone.sqlite"
}

# Config, fernet and credential keys, schema, and keystone-manage bootstrap
# (admin user, project and role; reader, member, manager, service roles;
# the identity service's public and internal endpoints). First start only;
# RF_KEYSTONE_VENV and RF_KEYSTONE_ADMIN_PASSWORD come from state.env.
rf_keystone_init() {
    local dir=$RF_KEYSTONE_DIR
    mkdir -p "$dir"
    chmod 700 "$dir"
    cat >"$RF_KEYSTONE_CONF" <<EOF
# private test server (tools/with-test-servers.sh)
[DEFAULT]
log_file = $dir/keystone.log
[database]
connection = sqlite:///$dir/keystone.sqlite
[fernet_tokens]
key_repository = $dir/fernet-keys
[fernet_receipts]
key_repository = $dir/fernet-keys
[credential]
key_repository = $dir/credential-keys
EOF
    # Keystone parses sys.argv with oslo.config, so gunicorn gets no
    # arguments: it reads this file from its working directory.
    cat >"$dir/gunicorn.conf.py" <<EOF
# private test server (tools/with-test-servers.sh)
wsgi_app = "keystone.wsgi.api:application"
bind = "127.0.0.1:$RF_KEYSTONE_PORT"
workers = 1
threads = 4
graceful_timeout = 5
errorlog = "$dir/gunicorn.log"
raw_env = ["OS_KEYSTONE_CONFIG_FILES=$RF_KEYSTONE_CONF"]
control_socket_disable = True
EOF
    rf_keystone_keys "$dir/fernet-keys"
    rf_keystone_keys "$dir/credential-keys"
    rf_keystone_schema || return 1
    if ! "$RF_KEYSTONE_VENV/bin/keystone-manage" --config-file "$RF_KEYSTONE_CONF" bootstrap \
        --bootstrap-password "$RF_KEYSTONE_ADMIN_PASSWORD" \
        --bootstrap-region-id RegionOne \
        --bootstrap-public-url "$(rf_keystone_url)" \
        --bootstrap-internal-url "$(rf_keystone_url)" \
        >"$dir/bootstrap.log" 2>&1; then
        rf_msg "keystone-manage bootstrap failed"
        rf_tail "$dir/bootstrap.log"
        return 1
    fi
}

rf_keystone_start_bg() {
    # gunicorn reads its settings from gunicorn.conf.py in its directory.
    rf_group_start keystone "$RF_KEYSTONE_PIDF" "$RF_KEYSTONE_LOG" "$RF_KEYSTONE_DIR" \
        "$RF_KEYSTONE_VENV/bin/gunicorn"
}

# 0 ready, 1 not yet, 2 process gone.
rf_keystone_ready() {
    rf_alive "$(rf_read_pid "$RF_KEYSTONE_PIDF")" || return 2
    curl -sf --max-time 2 "$(rf_keystone_url)" 2>/dev/null | grep -q '"status": "stable"' || return 1
}
rf_keystone_ready_or_dead() { local r=0; rf_keystone_ready || r=$?; ((r != 1)); }

rf_keystone_wait() {
    local rc=0
    rf_wait_for "$1" rf_keystone_ready_or_dead || rc=1
    if ((rc == 0)) && rf_keystone_ready; then return 0; fi
    rf_msg "keystone $(rf_why_not "$(rf_read_pid "$RF_KEYSTONE_PIDF")" "$1")"
    rf_tail "$RF_KEYSTONE_LOG" "$RF_KEYSTONE_DIR/gunicorn.log" "$RF_KEYSTONE_DIR/keystone.log"
    return 1
}

rf_keystone_stop() { rf_group_stop "$RF_KEYSTONE_PIDF" keystone "${1:-TERM}"; }

# ------------------------------------------------------------------ redis --

rf_redis_url() { printf 'redis://127.0.0.1:%s' "$RF_REDIS_PORT"; }

# A snapshot at most once an hour (and at every graceful shutdown): a
# restart keeps the data, a kill -9 loses what came since the last one.
rf_redis_start_bg() {
    local pid
    pid=$(rf_read_pid "$RF_REDIS_PIDF")
    if rf_alive "$pid"; then rf_msg "redis already running (pid $pid)"; return 0; fi
    mkdir -p "$RF_REDIS_DIR"
    printf '=== start %(%F %T)T ===\n' -1 >>"$RF_REDIS_LOG"
    setsid "$(command -v redis-server)" --bind 127.0.0.1 --port "$RF_REDIS_PORT" \
        --dir "$RF_REDIS_DIR" --dbfilename dump.rdb --save '3600 1' --appendonly no \
        --daemonize no --logfile '' </dev/null >>"$RF_REDIS_LOG" 2>&1 &
    printf '%s\n' "$!" >"$RF_REDIS_PIDF"
    disown "$!"
}

# 0 ready, 1 not yet, 2 process gone.
rf_redis_ready() {
    rf_alive "$(rf_read_pid "$RF_REDIS_PIDF")" || return 2
    [[ $(timeout 2 redis-cli -h 127.0.0.1 -p "$RF_REDIS_PORT" ping 2>/dev/null) == PONG ]] || return 1
}
rf_redis_ready_or_dead() { local r=0; rf_redis_ready || r=$?; ((r != 1)); }

rf_redis_wait() {
    local rc=0
    rf_wait_for "$1" rf_redis_ready_or_dead || rc=1
    if ((rc == 0)) && rf_redis_ready; then return 0; fi
    rf_msg "redis $(rf_why_not "$(rf_read_pid "$RF_REDIS_PIDF")" "$1")"
    rf_tail "$RF_REDIS_LOG"
    return 1
}

rf_redis_stop() { # [SIGNAL]
    rf_kill_pid "$(rf_read_pid "$RF_REDIS_PIDF")" redis "${1:-TERM}" 15
}

# -------------------------------------------------------------- placement --

rf_placement_url() { printf 'http://127.0.0.1:%s' "$RF_PLACEMENT_PORT"; }

# The microversion the readiness check asks for: Placement 16.0.0's newest.
RF_PLACEMENT_MICROVERSION=1.39

# Config and schema (first start only); RF_PLACEMENT_VENV comes from state.env.
rf_placement_init() {
    local dir=$RF_PLACEMENT_DIR
    mkdir -p "$dir"
    chmod 700 "$dir"
    # noauth2, no Keystone: the token is USER[:PROJECT], user "admin" has the
    # admin role, others none (unless the request sends X-Roles). Without
    # randomize_allocation_candidates, schedulers asking at once with a
    # limit all get the same candidates, and all but one lose their claim.
    cat >"$RF_PLACEMENT_CONF" <<EOF
# private test server (tools/with-test-servers.sh)
[DEFAULT]
log_file = $dir/placement.log
[api]
auth_strategy = noauth2
[placement_database]
connection = sqlite:///$dir/placement.sqlite
[placement]
randomize_allocation_candidates = true
EOF
    # The WSGI application reads placement.conf from OS_PLACEMENT_CONFIG_DIR
    # (no command line); gunicorn reads this file from its working
    # directory, as Keystone's does. One sync worker: two processes on one
    # SQLite file fail writes with "database is locked".
    cat >"$dir/gunicorn.conf.py" <<EOF
# private test server (tools/with-test-servers.sh)
wsgi_app = "placement.wsgi.api:application"
bind = "127.0.0.1:$RF_PLACEMENT_PORT"
workers = 1
graceful_timeout = 5
errorlog = "$dir/gunicorn.log"
raw_env = ["OS_PLACEMENT_CONFIG_DIR=$dir"]
control_socket_disable = True
EOF
    # The schema: 0.9 s, hidden behind the other servers' startup.
    if ! "$RF_PLACEMENT_VENV/bin/placement-manage" --config-file "$RF_PLACEMENT_CONF" db sync \
        >"$dir/db_sync.log" 2>&1; then
        rf_msg "placement-manage db sync failed"
        rf_tail "$dir/db_sync.log"
        return 1
    fi
}

rf_placement_start_bg() {
    # gunicorn reads its settings from gunicorn.conf.py in its directory.
    rf_group_start placement "$RF_PLACEMENT_PIDF" "$RF_PLACEMENT_LOG" "$RF_PLACEMENT_DIR" \
        "$RF_PLACEMENT_VENV/bin/gunicorn"
}

# 0 ready, 1 not yet, 2 process gone. Ready = an authenticated list of
# resource providers answers, i.e. the application loaded and reads its
# database (the root document needs neither).
rf_placement_ready() {
    rf_alive "$(rf_read_pid "$RF_PLACEMENT_PIDF")" || return 2
    curl -sf --max-time 2 -H 'X-Auth-Token: admin' \
        -H "OpenStack-API-Version: placement $RF_PLACEMENT_MICROVERSION" \
        "$(rf_placement_url)/resource_providers" 2>/dev/null |
        grep -q '"resource_providers"' || return 1
}
rf_placement_ready_or_dead() { local r=0; rf_placement_ready || r=$?; ((r != 1)); }

rf_placement_wait() {
    local rc=0
    rf_wait_for "$1" rf_placement_ready_or_dead || rc=1
    if ((rc == 0)) && rf_placement_ready; then return 0; fi
    rf_msg "placement $(rf_why_not "$(rf_read_pid "$RF_PLACEMENT_PIDF")" "$1")"
    rf_tail "$RF_PLACEMENT_LOG" "$RF_PLACEMENT_DIR/gunicorn.log" "$RF_PLACEMENT_DIR/placement.log"
    return 1
}

rf_placement_stop() { rf_group_stop "$RF_PLACEMENT_PIDF" placement "${1:-TERM}"; }

# -------------------------------------------------------------------- env --

rf_print_env() {
    printf 'RINGFLEET_TEST_SERVERS_DIR=%s\n' "$RF_DIR"
    if rf_has etcd; then
        printf 'RINGFLEET_TEST_ETCD_URL=etcd3+%s\n' "$(rf_etcd_url)"
        printf 'RINGFLEET_TEST_ETCD_PID=%s\n' "$(rf_read_pid "$RF_ETCD_PIDF")"
        printf 'RINGFLEET_TEST_ETCD_CMD=%s\n' "$RF_ETCD_CMD"
    fi
    if rf_has rabbit; then
        printf 'RINGFLEET_TEST_TRANSPORT_URL=%s\n' "$(rf_rabbit_url)"
        printf 'RINGFLEET_TEST_RABBIT_PID=%s\n' "$(rf_rabbit_pid)"
        printf 'RINGFLEET_TEST_RABBIT_NODE=%s\n' "$RF_RABBIT_NODE"
        printf 'RINGFLEET_TEST_RABBITMQCTL=%s\n' "$RF_RABBITMQCTL"
    fi
    if rf_has postgres; then
        printf 'RINGFLEET_TEST_DB_URL=%s\n' "$(rf_pg_url)"
        printf 'RINGFLEET_TEST_PG_PID=%s\n' "$(rf_pg_pid)"
    fi
    if rf_has mariadb; then
        printf 'RINGFLEET_TEST_MYSQL_URL=%s\n' "$(rf_maria_url)"
        printf 'RINGFLEET_TEST_MARIADB_PID=%s\n' "$(rf_maria_pid)"
    fi
    if rf_has ironic; then
        printf 'RINGFLEET_TEST_IRONIC_URL=%s\n' "$(rf_ironic_url)"
        printf 'RINGFLEET_TEST_IRONIC_PID=%s\n' "$(rf_read_pid "$RF_IRONIC_PIDF")"
        printf 'RINGFLEET_TEST_IRONIC_CALLBACK_TIMEOUT=%s\n' "$RF_IRONIC_CALLBACK_TIMEOUT"
    fi
    if rf_has keystone; then
        printf 'RINGFLEET_TEST_KEYSTONE_URL=%s\n' "$(rf_keystone_url)"
        printf 'RINGFLEET_TEST_KEYSTONE_PID=%s\n' "$(rf_read_pid "$RF_KEYSTONE_PIDF")"
        printf 'RINGFLEET_TEST_KEYSTONE_ADMIN_PASSWORD=%s\n' "$RF_KEYSTONE_ADMIN_PASSWORD"
    fi
    if rf_has redis; then
        printf 'RINGFLEET_TEST_REDIS_URL=%s\n' "$(rf_redis_url)"
        printf 'RINGFLEET_TEST_REDIS_PID=%s\n' "$(rf_read_pid "$RF_REDIS_PIDF")"
        printf 'RINGFLEET_TEST_REDIS_SERVER=%s\n' "$(command -v redis-server)"
        printf 'RINGFLEET_TEST_REDIS_SENTINEL=%s\n' "$(command -v redis-sentinel || true)"
    fi
    if rf_has placement; then
        printf 'RINGFLEET_TEST_PLACEMENT_URL=%s\n' "$(rf_placement_url)"
        printf 'RINGFLEET_TEST_PLACEMENT_PID=%s\n' "$(rf_read_pid "$RF_PLACEMENT_PIDF")"
    fi
}

# --------------------------------------------------------------- dispatch --

rf_main() {
    set -euo pipefail
    RF_PROG=test-servers-ctl
    local action=${1:-} secs=${RINGFLEET_TEST_SERVER_TIMEOUT:-90}
    [[ -n $action ]] || rf_die "usage: $0 ACTION (see the header of this file)"
    shift
    rf_load_state
    case $action in
    start-etcd) rf_etcd_start_bg; rf_etcd_wait "$secs" ;;
    wait-etcd) rf_etcd_wait "$secs" ;;
    stop-etcd) rf_etcd_stop TERM ;;
    kill-etcd) rf_etcd_stop KILL ;;
    restart-etcd) rf_etcd_stop TERM; rf_etcd_start_bg; rf_etcd_wait "$secs" ;;
    start-rabbit) rf_rabbit_start_bg; rf_rabbit_wait "$secs" ;;
    wait-rabbit) rf_rabbit_wait "$secs" ;;
    stop-rabbit) rf_rabbit_stop ;;
    kill-rabbit) rf_rabbit_stop kill ;;
    restart-rabbit) rf_rabbit_stop; rf_rabbit_start_bg; rf_rabbit_wait "$secs" ;;
    stop-app-rabbit) rf_rabbitmqctl -q stop_app ;;
    start-app-rabbit) rf_rabbitmqctl -q start_app; rf_rabbit_wait "$secs" ;;
    rabbitmqctl) exec "$RF_RABBITMQCTL" "$@" ;;
    start-pg) rf_pg_start_bg; rf_pg_wait "$secs" ;;
    wait-pg) rf_pg_wait "$secs" ;;
    stop-pg) rf_pg_stop ;;
    kill-pg) rf_pg_stop kill ;;
    freeze-pg) rf_pg_signal_all STOP ;;
    thaw-pg) rf_pg_signal_all CONT ;;
    restart-pg) rf_pg_stop; rf_pg_start_bg; rf_pg_wait "$secs" ;;
    start-mariadb) rf_maria_start_bg; rf_maria_wait "$secs" ;;
    wait-mariadb) rf_maria_wait "$secs" ;;
    stop-mariadb) rf_maria_stop ;;
    kill-mariadb) rf_maria_stop kill ;;
    restart-mariadb) rf_maria_stop; rf_maria_start_bg; rf_maria_wait "$secs" ;;
    start-ironic) rf_ironic_start_bg; rf_ironic_wait "$secs" ;;
    wait-ironic) rf_ironic_wait "$secs" ;;
    stop-ironic) rf_ironic_stop TERM ;;
    kill-ironic) rf_ironic_stop KILL ;;
    restart-ironic) rf_ironic_stop TERM; rf_ironic_start_bg; rf_ironic_wait "$secs" ;;
    start-keystone) rf_keystone_start_bg; rf_keystone_wait "$secs" ;;
    wait-keystone) rf_keystone_wait "$secs" ;;
    stop-keystone) rf_keystone_stop TERM ;;
    kill-keystone) rf_keystone_stop KILL ;;
    restart-keystone) rf_keystone_stop TERM; rf_keystone_start_bg; rf_keystone_wait "$secs" ;;
    start-redis) rf_redis_start_bg; rf_redis_wait "$secs" ;;
    wait-redis) rf_redis_wait "$secs" ;;
    stop-redis) rf_redis_stop TERM ;;
    kill-redis) rf_redis_stop KILL ;;
    restart-redis) rf_redis_stop TERM; rf_redis_start_bg; rf_redis_wait "$secs" ;;
    start-placement) rf_placement_start_bg; rf_placement_wait "$secs" ;;
    wait-placement) rf_placement_wait "$secs" ;;
    stop-placement) rf_placement_stop TERM ;;
    kill-placement) rf_placement_stop KILL ;;
    restart-placement) rf_placement_stop TERM; rf_placement_start_bg; rf_placement_wait "$secs" ;;
    pid)
        case ${1:-} in
        etcd) rf_read_pid "$RF_ETCD_PIDF" ;;
        rabbit) rf_rabbit_pid ;;
        pg | postgres) rf_pg_pid ;;
        mariadb | mysql) rf_maria_pid ;;
        epmd) rf_read_pid "$RF_EPMD_PIDF" ;;
        ironic) rf_read_pid "$RF_IRONIC_PIDF" ;;
        keystone) rf_read_pid "$RF_KEYSTONE_PIDF" ;;
        redis) rf_read_pid "$RF_REDIS_PIDF" ;;
        placement) rf_read_pid "$RF_PLACEMENT_PIDF" ;;
        *) rf_die "usage: pid etcd|rabbit|pg|mariadb|epmd|ironic|keystone|redis|placement" ;;
        esac
        echo
        ;;
    status)
        local name pid
        for name in etcd rabbit postgres mariadb ironic keystone redis placement; do
            rf_has "$name" || continue
            case $name in
            etcd) pid=$(rf_read_pid "$RF_ETCD_PIDF"); rf_alive "$pid" || pid='' ;;
            rabbit) pid=$(rf_rabbit_pid) ;;
            postgres) pid=$(rf_pg_pid) ;;
            mariadb) pid=$(rf_maria_pid) ;;
            ironic) pid=$(rf_read_pid "$RF_IRONIC_PIDF"); rf_alive "$pid" || pid='' ;;
            keystone) pid=$(rf_read_pid "$RF_KEYSTONE_PIDF"); rf_alive "$pid" || pid='' ;;
            redis) pid=$(rf_read_pid "$RF_REDIS_PIDF"); rf_alive "$pid" || pid='' ;;
            placement) pid=$(rf_read_pid "$RF_PLACEMENT_PIDF"); rf_alive "$pid" || pid='' ;;
            esac
            if [[ -n $pid ]]; then echo "$name running pid $pid"; else echo "$name stopped"; fi
        done
        ;;
    env) rf_print_env ;;
    *) rf_die "unknown action '$action' (see the header of $0)" ;;
    esac
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    rf_main "$@"
fi
