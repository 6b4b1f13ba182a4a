#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Run a command with private etcd, RabbitMQ, PostgreSQL, MariaDB, Ironic, Keystone, Redis and
# Placement servers.
#
# Usage: tools/with-test-servers.sh COMMAND [ARGS...]
#        tools/with-test-servers.sh --install
#
# Starts the servers (bound to 127.0.0.1 only, all state in a private temp
# dir), exports RINGFLEET_TEST_* variables to COMMAND, runs it, stops every
# server by PID, removes the dir and exits with COMMAND's status. Missing
# Debian packages are installed (as root) without starting their system
# services; any system-wide instance is left alone (we use our own ports).
# With --install it only installs what SERVERS need (the Debian packages,
# and the missing virtualenvs side by side), and exits: first, for a caller
# that then starts several runs at once (their apt-get runs would race for
# the package manager, and each would build the same virtualenvs; runs on
# free ports are safe side by side).
# Ironic (standalone: API and conductor in one process, no Keystone, fake
# hardware, SQLite) is pip-installed into its own virtualenv, cached outside
# the clone and reused by later runs. So is Keystone (SQLite, fernet tokens,
# under gunicorn; keystone-manage bootstrap makes the admin user, project and
# role, and the reader/member/manager/service roles), and Placement (SQLite,
# under gunicorn, noauth2: clients send "X-Auth-Token: admin").
#
# Environment:
#   SERVERS=etcd,rabbit,postgres,mariadb,ironic,keystone,redis,placement
#                                     which servers to start (default: all)
#   RINGFLEET_TEST_SERVER_TIMEOUT=90  seconds each server may take to be ready
#   RINGFLEET_TEST_KEEP_DIR=1         keep the private dir (logs) afterwards
#   RINGFLEET_IRONIC_VENV=DIR         Ironic's virtualenv (default
#       ${XDG_CACHE_HOME:-~/.cache}/ringfleet/ironic-39.0.0-pyX.Y); built if missing
#   RINGFLEET_TEST_IRONIC_DEPLOY_DELAY=1,2  [fake] deploy_delay (min,max s) of each
#       fake deploy step; a deploy or undeploy takes two (2-4 s), so a test
#       can catch a node mid-deploy
#   RINGFLEET_KEYSTONE_VENV=DIR       Keystone's virtualenv (default
#       ${XDG_CACHE_HOME:-~/.cache}/ringfleet/keystone-30.0.0-pyX.Y); built if missing
#   RINGFLEET_PLACEMENT_VENV=DIR      Placement's virtualenv (default
#       ${XDG_CACHE_HOME:-~/.cache}/ringfleet/placement-16.0.0-pyX.Y); built if missing
#
# Exported to COMMAND:
#   RINGFLEET_TEST_SERVERS_DIR    private dir; state for tools/test-servers-ctl.sh
#   RINGFLEET_TEST_CTL            absolute path of tools/test-servers-ctl.sh
#   RINGFLEET_TEST_ETCD_URL       etcd3+http://127.0.0.1:PORT (tooz URL)
#   RINGFLEET_TEST_ETCD_PID       PID of etcd as started (see `ctl pid etcd`)
#   RINGFLEET_TEST_ETCD_CMD       file holding etcd's exact command line
#   RINGFLEET_TEST_TRANSPORT_URL  rabbit://guest:guest@127.0.0.1:PORT/
#   RINGFLEET_TEST_RABBIT_PID     PID of the broker's beam.smp as started
#   RINGFLEET_TEST_RABBIT_NODE    Erlang node name of the broker
#   RINGFLEET_TEST_RABBITMQCTL    executable: rabbitmqctl bound to our node
#   RINGFLEET_TEST_DB_URL         postgresql+psycopg2://USER:PASS@127.0.0.1:PORT/ringfleet
#   RINGFLEET_TEST_PG_PID         PID of the postmaster as started
#   RINGFLEET_TEST_MYSQL_URL      mysql+pymysql://USER:PASS@127.0.0.1:PORT/ringfleet?charset=utf8mb4
#   RINGFLEET_TEST_MARIADB_PID    PID of mariadbd as started
#   RINGFLEET_TEST_IRONIC_URL     http://127.0.0.1:PORT (Ironic API, noauth)
#   RINGFLEET_TEST_IRONIC_PID     PID of the ironic process as started
#   RINGFLEET_TEST_IRONIC_CALLBACK_TIMEOUT  Ironic's [conductor] deploy_callback_timeout (s):
#       a node with deploy_interface custom-agent ends 'deploy failed' after it
#   RINGFLEET_TEST_KEYSTONE_URL   http://127.0.0.1:PORT/v3 (identity endpoint, auth_url)
#   RINGFLEET_TEST_KEYSTONE_PID   PID of Keystone's gunicorn master as started
#   RINGFLEET_TEST_KEYSTONE_ADMIN_PASSWORD  password of user admin (domain Default),
#       admin on project admin and on the system
#   RINGFLEET_TEST_REDIS_URL      redis://127.0.0.1:PORT (tooz URL; Debian's redis-server)
#   RINGFLEET_TEST_REDIS_PID      PID of redis-server as started
#   RINGFLEET_TEST_REDIS_SERVER   the redis-server executable, and
#   RINGFLEET_TEST_REDIS_SENTINEL the redis-sentinel one (Debian's redis-sentinel):
#       a test starts its own replica and sentinels with them, under
#       RINGFLEET_TEST_SERVERS_DIR (stopped at the end like any leftover)
#   RINGFLEET_TEST_PLACEMENT_URL  http://127.0.0.1:PORT (Placement API, noauth2: send
#       "X-Auth-Token: admin"; microversions up to 1.39)
#   RINGFLEET_TEST_PLACEMENT_PID  PID of Placement's gunicorn master as started
# (variables of servers not selected by SERVERS are not set).
#
# Fault injection from a test: "$RINGFLEET_TEST_CTL" ACTION, e.g. kill-etcd,
# start-etcd, restart-etcd, stop-app-rabbit, start-app-rabbit, restart-rabbit,
# kill-rabbit, restart-pg, restart-mariadb, kill-ironic, start-ironic, restart-ironic,
# kill-keystone, start-keystone, restart-redis, kill-redis, start-redis,
# kill-placement, start-placement, restart-placement, pid etcd
# (see tools/test-servers-ctl.sh). Starts
# block until the server is ready. The *_PID variables are the PIDs at startup;
# after a restart ask `"$RINGFLEET_TEST_CTL" pid etcd|rabbit|pg|mariadb|ironic|keystone|placement`.
# A test may also start etcd itself: shlex.split(open($..._ETCD_CMD).read());
# anything left running with the private dir in its command line is stopped
# at the end.

# Functions below run from traps; shellcheck 0.9 calls them unreachable.
# shellcheck disable=SC2317

set -euo pipefail

RF_PROG=with-test-servers
RF_TOOLS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tools/test-servers-ctl.sh
. "$RF_TOOLS/test-servers-ctl.sh"

RF_TIMEOUT=${RINGFLEET_TEST_SERVER_TIMEOUT:-90}
RF_DIR=''
RF_CHILD=''
RF_CLEANED=0
RF_PG_STARTER=''
RF_MARIA_STARTER=''
RF_IRONIC_STARTER=''
RF_KEYSTONE_STARTER=''
RF_PLACEMENT_STARTER=''
RF_INSTALL_LOGS=''
RF_LOCK=/tmp/ringfleet-servers.lock
# Our stderr, for messages from traps that may fire while a function runs
# with its stderr redirected to a log file.
exec {RF_STDERR}>&2 {RF_STDIN}<&0

usage() {
    sed -n '2,/^$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
    exit 2
}

# ---------------------------------------------------------------- install --

# The newest /usr/lib/postgresql/VERSION/bin with a server in it.
pg_bin_dir() {
    local d v best='' bestv=0
    for d in /usr/lib/postgresql/*/bin; do
        [[ -x $d/postgres && -x $d/initdb ]] || continue
        v=${d#/usr/lib/postgresql/}
        v=${v%%[!0-9]*}
        if ((${v:-0} >= bestv)); then best=$d bestv=${v:-0}; fi
    done
    printf '%s' "$best"
}

RF_POLICY=/usr/sbin/policy-rc.d
RF_POLICY_BACKUP=''
RF_POLICY_OURS=0

# Put back the policy-rc.d we found (or none).
restore_policy() {
    ((RF_POLICY_OURS)) || return 0
    rm -f "$RF_POLICY"
    if [[ -n $RF_POLICY_BACKUP ]]; then mv "$RF_POLICY_BACKUP" "$RF_POLICY"; fi
    RF_POLICY_OURS=0 RF_POLICY_BACKUP=''
}

ensure_packages() {
    local -a pkgs=()
    if rf_has etcd; then
        command -v etcd >/dev/null || pkgs+=(etcd-server)
        command -v curl >/dev/null || pkgs+=(curl)
    fi
    if rf_has rabbit; then
        [[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]] && command -v epmd >/dev/null ||
            pkgs+=(rabbitmq-server)
    fi
    if rf_has postgres; then
        [[ -n $(pg_bin_dir) ]] || pkgs+=(postgresql)
    fi
    if rf_has mariadb; then
        [[ -x /usr/sbin/mariadbd ]] && command -v mariadb-install-db >/dev/null ||
            pkgs+=(mariadb-server)
    fi
    if rf_has redis; then
        command -v redis-server >/dev/null && command -v redis-cli >/dev/null || pkgs+=(redis-server)
        command -v redis-sentinel >/dev/null || pkgs+=(redis-sentinel)
    fi
    if { rf_has ironic && [[ ! -x $RF_IRONIC_VENV/bin/ironic ]]; } ||
        { rf_has keystone && [[ ! -x $RF_KEYSTONE_VENV/bin/keystone-manage ]]; } ||
        { rf_has placement && [[ ! -x $RF_PLACEMENT_VENV/bin/placement-manage ]]; }; then
        # Debian's python3 has venv without ensurepip until python3-venv is in.
        python3 -c 'import ensurepip, venv' 2>/dev/null || pkgs+=(python3-venv)
        command -v curl >/dev/null || pkgs+=(curl)
    fi
    ((${#pkgs[@]})) || return 0
    ((EUID == 0)) || rf_die "missing packages ${pkgs[*]} and not root: install them first"
    rf_msg "installing ${pkgs[*]}"
    local rc=0 log
    log=$(mktemp /tmp/ringfleet-apt.XXXXXX.log)
    # Keep the packages from starting their own system services (101 =
    # action forbidden); cleanup() restores it too if we are interrupted.
    if [[ -e $RF_POLICY ]]; then
        RF_POLICY_BACKUP=$RF_POLICY.ringfleet-saved.$$
        mv "$RF_POLICY" "$RF_POLICY_BACKUP"
    fi
    RF_POLICY_OURS=1
    printf '#!/bin/sh\n# temporary, tools/with-test-servers.sh\nexit 101\n' >"$RF_POLICY"
    chmod 755 "$RF_POLICY"
    {
        apt-get -o DPkg::Lock::Timeout=300 update &&
            DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y \
                --no-install-recommends "${pkgs[@]}"
    } >"$log" 2>&1 || rc=$?
    restore_policy
    if ((rc != 0)); then
        tail -n 40 "$log" >&2
        rf_die "apt-get failed (exit $rc), full log in $log"
    fi
    rm -f "$log"
}

# venv_install VENV EXE LOG REQUIREMENT...: a virtualenv of its own for a
# pip-installed server (Ironic, Keystone, Placement), built beside its final place and
# renamed into it, so an interrupted install is never taken for a finished
# one; done when VENV/bin/EXE exists. Logs to LOG.
venv_install() {
    local venv=$1 exe=$2 log=$3 tmp t0
    shift 3
    [[ -x $venv/bin/$exe ]] && return 0
    t0=$(rf_now_us)
    rf_msg "installing $* in $venv"
    mkdir -p "$(dirname "$venv")"
    # Left by interrupted runs long ago.
    find "$(dirname "$venv")" -maxdepth 1 -name "${venv##*/}.tmp.*" -mmin +120 \
        -exec rm -rf {} + 2>/dev/null || true
    tmp=$(mktemp -d "$venv.tmp.XXXXXX")
    chmod 755 "$tmp"
    # (runs in a background starter; cleanup() TERMs it when interrupted)
    # shellcheck disable=SC2064 # $tmp is meant to expand now
    trap "rm -rf -- '$tmp'; exit 143" TERM
    if ! { python3 -m venv "$tmp" && "$tmp/bin/pip" install -q "$@"; } >"$log" 2>&1; then
        rm -rf "$tmp"
        rf_msg "installing $* failed"
        rf_tail "$log"
        return 1
    fi
    # A venv's scripts name its python by absolute path: build the venv at
    # the temp path, then point them at the final one before the rename.
    grep -rlI --null -F "$tmp" "$tmp/bin" | xargs -0 -r sed -i "s|$tmp|$venv|g"
    # Another run may have finished first: keep theirs.
    mv -T "$tmp" "$venv" 2>/dev/null || rm -rf "$tmp"
    trap - TERM
    [[ -x $venv/bin/$exe ]] || return 1
    rf_msg "installed $* in $(rf_elapsed "$t0") s"
}

RF_IRONIC_VERSION=39.0.0
RF_KEYSTONE_VERSION=30.0.0
RF_PLACEMENT_VERSION=16.0.0
# gunicorn as in constraints.txt: the WSGI server ringfleet-api runs under
# (Keystone and Placement run under it too).
RF_GUNICORN_VERSION=27.0.1

# The virtualenvs' installs, as run in the background.
install_ironic() {
    venv_install "$RF_IRONIC_VENV" ironic "$1" "ironic==$RF_IRONIC_VERSION"
}
install_keystone() {
    venv_install "$RF_KEYSTONE_VENV" keystone-manage "$1" \
        "keystone==$RF_KEYSTONE_VERSION" "gunicorn==$RF_GUNICORN_VERSION"
}
install_placement() {
    venv_install "$RF_PLACEMENT_VENV" placement-manage "$1" \
        "openstack-placement==$RF_PLACEMENT_VERSION" "gunicorn==$RF_GUNICORN_VERSION"
}

# --install: the missing virtualenvs of SERVERS, side by side (pip mostly
# waits for downloads); logs in a temporary dir, kept if one fails.
install_venvs() {
    local name rc=0
    RF_INSTALL_LOGS=$(mktemp -d /tmp/ringfleet-install.XXXXXX)
    for name in ironic keystone placement; do
        rf_has "$name" || continue
        "install_$name" "$RF_INSTALL_LOGS/$name.log" {RF_STDERR}>&- {RF_STDIN}<&- &
        case $name in
        ironic) RF_IRONIC_STARTER=$! ;;
        keystone) RF_KEYSTONE_STARTER=$! ;;
        placement) RF_PLACEMENT_STARTER=$! ;;
        esac
    done
    for name in RF_IRONIC_STARTER RF_KEYSTONE_STARTER RF_PLACEMENT_STARTER; do
        [[ -n ${!name} ]] || continue
        wait "${!name}" || rc=1
        printf -v "$name" '%s' ''
    done
    ((rc == 0)) || rf_die "installing failed, logs in $RF_INSTALL_LOGS"
}

# ------------------------------------------------------------------ ports --

# Ports of other runs on this machine: their servers may not listen yet
# (RabbitMQ opens its AMQP port only at the end of its boot).
reserved_ports() {
    local f
    for f in /tmp/ringfleet-servers.*/state.env; do
        [[ -e $f && $f != "$RF_STATE" ]] || continue
        sed -n 's/^RF_[A-Z_]*PORT=\([0-9][0-9]*\)$/\1/p' "$f" 2>/dev/null || true
    done
}

# pick_ports NAME=DEFAULT...: set each NAME to DEFAULT if that is free on
# 127.0.0.1 and not reserved, else to a random free port in 20000-31999
# (below the ephemeral range). Call with RF_LOCK held.
pick_ports() {
    local out name port
    out=$(python3 - "$(reserved_ports | tr '\n' ' ')" "$@" <<'EOF'
import random, socket, sys
used = {int(p) for p in sys.argv[1].split()}
def free(port):
    if port in used:
        return False
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()
for arg in sys.argv[2:]:
    name, port = arg.split("=")
    port = int(port)
    while not free(port):
        port = random.randrange(20000, 32000)
    used.add(port)
    print("%s=%d" % (name, port))
EOF
    )
    while IFS='=' read -r name port; do
        printf -v "$name" '%s' "$port"
    done <<<"$out"
}

# ---------------------------------------------------------------- cleanup --

# Any process still mentioning our private dir on its command line (e.g. an
# etcd a test restarted itself from RINGFLEET_TEST_ETCD_CMD) is ours too.
kill_leftovers() {
    local p cmd
    local -a pids=() names=()
    for p in /proc/[0-9]*; do
        p=${p#/proc/}
        [[ $p == "$$" || $p == "$BASHPID" ]] && continue
        cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline") || continue
        [[ $cmd == *"$RF_DIR/"* ]] && rf_alive "$p" && pids+=("$p") && names+=("$p:${cmd%% *}")
    done
    # Ironic's forked workers are named "ironic: ServiceWrapper worker(N)",
    # Keystone's and Placement's gunicorn have no arguments: they are found
    # by the process group of the server we started.
    local name pidf
    for name in ironic keystone placement; do
        rf_has "$name" || continue
        case $name in
        ironic) pidf=$RF_IRONIC_PIDF ;;
        keystone) pidf=$RF_KEYSTONE_PIDF ;;
        placement) pidf=$RF_PLACEMENT_PIDF ;;
        esac
        [[ -n $(rf_read_pid "$pidf") ]] || continue
        for p in $(rf_group "$(rf_read_pid "$pidf")"); do
            [[ " ${pids[*]} " == *" $p "* ]] || { pids+=("$p") && names+=("$p:$name"); }
        done
    done
    ((${#pids[@]})) || return 0
    rf_msg "stopping leftover processes ${names[*]}"
    for p in "${pids[@]}"; do rf_kill_pid "$p" "leftover" TERM 10; done
}

stop_servers() {
    [[ -n $RF_DIR && -e $RF_DIR/state.env ]] || return 0
    # Postgres and etcd stop quickly: signal them first, then the broker.
    local pgpid mariapid etcdpid redispid
    redispid=$(rf_read_pid "$RF_REDIS_PIDF")
    pgpid=$(rf_pg_pid 2>/dev/null || true)
    mariapid=$(rf_maria_pid 2>/dev/null || true)
    etcdpid=$(rf_read_pid "$RF_ETCD_PIDF")
    if rf_alive "$pgpid"; then kill -INT "$pgpid" 2>/dev/null || true; fi
    if rf_alive "$mariapid"; then kill -TERM "$mariapid" 2>/dev/null || true; fi
    if rf_alive "$etcdpid"; then kill -TERM "$etcdpid" 2>/dev/null || true; fi
    if rf_alive "$redispid"; then kill -TERM "$redispid" 2>/dev/null || true; fi
    if rf_has ironic; then kill -TERM -- "-$(rf_read_pid "$RF_IRONIC_PIDF")" 2>/dev/null || true; fi
    if rf_has keystone; then kill -TERM -- "-$(rf_read_pid "$RF_KEYSTONE_PIDF")" 2>/dev/null || true; fi
    if rf_has placement; then
        kill -TERM -- "-$(rf_read_pid "$RF_PLACEMENT_PIDF")" 2>/dev/null || true
    fi
    if rf_has rabbit; then rf_rabbit_stop; fi
    if rf_has ironic; then rf_ironic_stop TERM; fi
    if rf_has keystone; then rf_keystone_stop TERM; fi
    if rf_has placement; then rf_placement_stop TERM; fi
    rf_kill_pid "$pgpid" postgres INT 20
    rf_kill_pid "$mariapid" mariadb TERM 30
    rf_kill_pid "$etcdpid" etcd TERM 15
    rf_kill_pid "$redispid" redis TERM 15
    rf_epmd_stop
    kill_leftovers
}

cleanup() {
    local rc=$?
    ((RF_CLEANED)) && return
    RF_CLEANED=1
    set +e
    exec 2>&"$RF_STDERR"
    trap '' INT TERM
    restore_policy
    if [[ -n $RF_CHILD ]] && rf_alive "$RF_CHILD"; then
        kill -TERM "$RF_CHILD" 2>/dev/null
        rf_wait_gone "$RF_CHILD" 10 || kill -KILL "$RF_CHILD" 2>/dev/null
    fi
    # Interrupted during initdb: let it finish so postgres stops cleanly.
    rf_wait_gone "$RF_PG_STARTER" 30
    rf_wait_gone "$RF_MARIA_STARTER" 30
    # Interrupted during a virtualenv's install: stop pip (the starter then
    # removes its half-built venv).
    local starter
    for starter in "$RF_IRONIC_STARTER" "$RF_KEYSTONE_STARTER" "$RF_PLACEMENT_STARTER"; do
        rf_alive "$starter" || continue
        pkill -TERM -P "$starter" 2>/dev/null
        kill -TERM "$starter" 2>/dev/null
        rf_wait_gone "$starter" 10
    done
    stop_servers
    # Install logs (--install) are worth keeping only when it failed.
    if [[ -n $RF_INSTALL_LOGS ]] && ((rc == 0 || rc > 128)); then rm -rf "$RF_INSTALL_LOGS"; fi
    if [[ -n $RF_DIR && -d $RF_DIR ]]; then
        if [[ ${RINGFLEET_TEST_KEEP_DIR:-} == 1 ]]; then
            rf_msg "kept $RF_DIR"
        else
            rm -rf "$RF_DIR"
        fi
    fi
    exit "$rc"
}

on_signal() {
    local sig=$1 code=$2
    exec 2>&"$RF_STDERR"
    rf_msg "got SIG$sig, stopping"
    trap '' INT TERM
    if [[ -n $RF_CHILD ]] && rf_alive "$RF_CHILD"; then
        kill "-$sig" "$RF_CHILD" 2>/dev/null || true
        if ! rf_wait_gone "$RF_CHILD" 10; then
            rf_msg "command still running 10 s after SIG$sig, sending SIGKILL"
            kill -KILL "$RF_CHILD" 2>/dev/null || true
        fi
    fi
    exit "$code"
}

# ------------------------------------------------------------------- main --

up() { # NAME URL START_US
    printf '%s: %-8s up at %s in %s s\n' "$RF_PROG" "$1" "$2" "$(rf_elapsed "$3")" >&2
}

fail_start() {
    rf_msg "failed to start $1; the private dir was $RF_DIR"
    exit 1
}

main() {
    (($#)) || usage
    [[ $1 == -h || $1 == --help ]] && usage

    local s out=''
    local -a sel
    IFS=', ' read -r -a sel <<<"${SERVERS:-etcd,rabbit,postgres,mariadb,ironic,keystone,redis,placement}"
    for s in "${sel[@]}"; do
        case $s in
        etcd) ;;
        rabbit | rabbitmq) s=rabbit ;;
        postgres | postgresql | pg) s=postgres ;;
        mariadb | mysql) s=mariadb ;;
        ironic | keystone | redis | placement) ;;
        '') continue ;;
        *)
            rf_die "SERVERS: unknown server '$s'" \
                "(etcd, rabbit, postgres, mariadb, ironic, keystone, redis, placement)"
            ;;
        esac
        out+=,$s
    done
    RF_SERVERS=${out#,}
    [[ -n $RF_SERVERS ]] || rf_die "SERVERS is empty"

    local pyver
    pyver=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    RF_IRONIC_VENV=${RINGFLEET_IRONIC_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ringfleet/ironic-$RF_IRONIC_VERSION-py$pyver}
    RF_IRONIC_DEPLOY_DELAY=${RINGFLEET_TEST_IRONIC_DEPLOY_DELAY:-1,2}
    RF_KEYSTONE_VENV=${RINGFLEET_KEYSTONE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ringfleet/keystone-$RF_KEYSTONE_VERSION-py$pyver}
    RF_PLACEMENT_VENV=${RINGFLEET_PLACEMENT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ringfleet/placement-$RF_PLACEMENT_VERSION-py$pyver}
    # A fresh one each run: the tests read it from RINGFLEET_TEST_KEYSTONE_ADMIN_PASSWORD.
    RF_KEYSTONE_ADMIN_PASSWORD=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')

    trap cleanup EXIT
    trap 'on_signal INT 130' INT
    trap 'on_signal TERM 143' TERM

    ensure_packages
    if [[ $1 == --install ]]; then
        install_venvs
        exit 0
    fi

    RF_DIR=$(mktemp -d "${TMPDIR:-/tmp}/ringfleet-servers.XXXXXX")
    chmod 711 "$RF_DIR" # the postgres and mysql users must reach $RF_DIR/pg, /mariadb
    rf_paths

    local t_ironic t_keystone
    if rf_has ironic; then
        t_ironic=$(rf_now_us)
        mkdir -p "$RF_IRONIC_DIR"
    fi
    if rf_has keystone; then
        t_keystone=$(rf_now_us)
        mkdir -p "$RF_KEYSTONE_DIR"
    fi
    local t_placement
    if rf_has placement; then
        t_placement=$(rf_now_us)
        mkdir -p "$RF_PLACEMENT_DIR"
    fi

    RF_ETCD_PORT='' RF_ETCD_PEER_PORT='' RF_AMQP_PORT='' RF_DIST_PORT='' RF_EPMD_PORT=''
    RF_PG_PORT='' RF_PG_BIN='' RF_PG_OSUSER='' RF_MARIA_PORT='' RF_MARIA_OSUSER=''
    RF_IRONIC_PORT='' RF_KEYSTONE_PORT='' RF_REDIS_PORT='' RF_PLACEMENT_PORT=''
    RF_RABBIT_NODE="ringfleet-ci-$$@localhost"
    RF_DB_USER=ringfleet RF_DB_PASS=ringfleet RF_DB_NAME=ringfleet
    local -a want=()
    if rf_has etcd; then want+=(RF_ETCD_PORT=23790 RF_ETCD_PEER_PORT=23800); fi
    if rf_has rabbit; then want+=(RF_AMQP_PORT=25672 RF_DIST_PORT=25673 RF_EPMD_PORT=24369); fi
    if rf_has postgres; then
        want+=(RF_PG_PORT=25432)
        RF_PG_BIN=$(pg_bin_dir)
        if ((EUID == 0)); then RF_PG_OSUSER=postgres; else RF_PG_OSUSER=$(id -un); fi
    fi
    if rf_has mariadb; then
        want+=(RF_MARIA_PORT=23306)
        if ((EUID == 0)); then RF_MARIA_OSUSER=mysql; else RF_MARIA_OSUSER=$(id -un); fi
    fi
    if rf_has ironic; then want+=(RF_IRONIC_PORT=26385); fi
    if rf_has keystone; then want+=(RF_KEYSTONE_PORT=25000); fi
    if rf_has redis; then want+=(RF_REDIS_PORT=26390); fi
    if rf_has placement; then want+=(RF_PLACEMENT_PORT=28778); fi
    # Concurrent runs: pick ports and publish them in state.env under a lock.
    local lockfd='' v
    { : >>"$RF_LOCK"; } 2>/dev/null || true
    if [[ -r $RF_LOCK ]] && exec {lockfd}<"$RF_LOCK"; then
        flock -w 60 "$lockfd" || rf_msg "could not lock $RF_LOCK in 60 s, going on"
    fi
    pick_ports "${want[@]}"
    for v in RF_SERVERS RF_ETCD_PORT RF_ETCD_PEER_PORT RF_AMQP_PORT RF_DIST_PORT \
        RF_EPMD_PORT RF_PG_PORT RF_PG_BIN RF_PG_OSUSER RF_MARIA_PORT RF_MARIA_OSUSER \
        RF_RABBIT_NODE \
        RF_DB_USER RF_DB_PASS RF_DB_NAME RF_IRONIC_PORT RF_IRONIC_VENV \
        RF_IRONIC_DEPLOY_DELAY RF_KEYSTONE_PORT RF_KEYSTONE_VENV RF_KEYSTONE_ADMIN_PASSWORD \
        RF_REDIS_PORT RF_PLACEMENT_PORT RF_PLACEMENT_VENV; do
        printf '%s=%q\n' "$v" "${!v}"
    done >"$RF_STATE"
    if [[ -n $lockfd ]]; then exec {lockfd}<&-; fi

    # Start everything, slowest first, then wait for each.
    local t_rabbit t_etcd t_pg t_maria
    if rf_has rabbit; then
        rf_rabbit_init
        t_rabbit=$(rf_now_us)
        # (servers must not hold our saved stdin/stderr open)
        { rf_epmd_start_bg && rf_rabbit_start_bg; } {RF_STDERR}>&- {RF_STDIN}<&-
    fi
    local t_redis
    if rf_has redis; then
        t_redis=$(rf_now_us)
        rf_redis_start_bg {RF_STDERR}>&- {RF_STDIN}<&-
    fi
    if rf_has etcd; then
        mkdir -p "$RF_ETCD_DIR"
        rf_etcd_write_cmd
        t_etcd=$(rf_now_us)
        rf_etcd_start_bg {RF_STDERR}>&- {RF_STDIN}<&-
    fi
    if rf_has ironic; then
        # Install (~30 s when not cached), schema (~1.5 s) and start overlap
        # the others' startup.
        {
            install_ironic "$RF_IRONIC_DIR/install.log" && rf_ironic_init && rf_ironic_start_bg
        } {RF_STDERR}>&- {RF_STDIN}<&- &
        RF_IRONIC_STARTER=$!
    fi
    if rf_has keystone; then
        # Install (~20-35 s when not cached), bootstrap (~2.5 s) and start
        # (~2 s) overlap the others' startup too.
        {
            install_keystone "$RF_KEYSTONE_DIR/install.log" &&
                rf_keystone_init && rf_keystone_start_bg
        } {RF_STDERR}>&- {RF_STDIN}<&- &
        RF_KEYSTONE_STARTER=$!
    fi
    if rf_has placement; then
        # Install (~18 s when not cached), schema (~1 s) and start (~1 s)
        # overlap the others' startup too.
        {
            install_placement "$RF_PLACEMENT_DIR/install.log" &&
                rf_placement_init && rf_placement_start_bg
        } {RF_STDERR}>&- {RF_STDIN}<&- &
        RF_PLACEMENT_STARTER=$!
    fi
    if rf_has postgres; then
        t_pg=$(rf_now_us)
        # initdb takes a second or two: overlap it with waiting for etcd.
        { rf_pg_init && rf_pg_start_bg; } {RF_STDERR}>&- {RF_STDIN}<&- &
        RF_PG_STARTER=$!
    fi
    if rf_has mariadb; then
        t_maria=$(rf_now_us)
        # mariadb-install-db takes about half a second: overlap it too.
        { rf_maria_init && rf_maria_start_bg; } {RF_STDERR}>&- {RF_STDIN}<&- &
        RF_MARIA_STARTER=$!
    fi

    if rf_has etcd; then
        rf_etcd_wait "$RF_TIMEOUT" || fail_start etcd
        up etcd "etcd3+$(rf_etcd_url)" "$t_etcd"
    fi
    if rf_has redis; then
        rf_redis_wait "$RF_TIMEOUT" || fail_start redis
        up redis "$(rf_redis_url)" "$t_redis"
    fi
    if rf_has postgres; then
        wait "$RF_PG_STARTER" || { rf_tail "$RF_PG_LOG"; fail_start postgres; }
        rf_pg_wait "$RF_TIMEOUT" || fail_start postgres
        up postgres "$(rf_pg_url)" "$t_pg"
    fi
    if rf_has mariadb; then
        wait "$RF_MARIA_STARTER" || { rf_tail "$RF_MARIA_LOG"; fail_start mariadb; }
        rf_maria_wait "$RF_TIMEOUT" || fail_start mariadb
        up mariadb "$(rf_maria_url)" "$t_maria"
    fi
    if rf_has rabbit; then
        rf_rabbit_wait "$RF_TIMEOUT" || fail_start rabbit
        up rabbit "$(rf_rabbit_url)" "$t_rabbit"
    fi
    if rf_has ironic; then
        wait "$RF_IRONIC_STARTER" || fail_start ironic
        RF_IRONIC_STARTER=''
        rf_ironic_wait "$RF_TIMEOUT" || fail_start ironic
        up ironic "$(rf_ironic_url)" "$t_ironic"
    fi
    if rf_has keystone; then
        wait "$RF_KEYSTONE_STARTER" || fail_start keystone
        RF_KEYSTONE_STARTER=''
        rf_keystone_wait "$RF_TIMEOUT" || fail_start keystone
        up keystone "$(rf_keystone_url)" "$t_keystone"
    fi
    if rf_has placement; then
        wait "$RF_PLACEMENT_STARTER" || fail_start placement
        RF_PLACEMENT_STARTER=''
        rf_placement_wait "$RF_TIMEOUT" || fail_start placement
        up placement "$(rf_placement_url)" "$t_placement"
    fi

    local line
    while IFS= read -r line; do
        export "${line?}"
    done < <(rf_print_env)
    export RINGFLEET_TEST_CTL="$RF_TOOLS/test-servers-ctl.sh"

    # Not exec: we must clean up. Undo what bash does to background jobs
    # (SIGINT/SIGQUIT ignored, stdin from /dev/null) so the command behaves
    # as in the foreground.
    local rc=0
    (
        trap - INT QUIT TERM
        exec "$@" {RF_STDERR}>&- {RF_STDIN}<&-
    ) <&"$RF_STDIN" &
    RF_CHILD=$!
    wait "$RF_CHILD" || rc=$?
    RF_CHILD=''
    if ((rc != 0)); then rf_msg "command exited with status $rc"; fi
    exit "$rc"
}

main "$@"
