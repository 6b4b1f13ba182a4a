#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The project's test command (README.rst): lint, type-check, then unit and
# functional tests against real etcd, Redis, RabbitMQ, PostgreSQL, MariaDB,
# Ironic, Keystone and Placement.
#
# Usage: tools/run-tests.sh [PYTEST ARGS...]
#
# Installs what it needs on a fresh Debian machine with Python 3.11: a
# virtualenv in .venv with the pinned versions of constraints.txt, and (via
# tools/with-test-servers.sh) the Debian server packages and Ironic's,
# Keystone's and Placement's own cached virtualenvs. The servers are
# started on 127.0.0.1 in a private directory and stopped by PID afterwards.
# PYTHON and RINGFLEET_VENV: see tools/venv.sh.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# shellcheck source=tools/venv.sh
. "$repo/tools/venv.sh"

step() { printf '\n==> %s\n' "$*"; }

# The test extra includes nova-filters: the tests run Nova's real filters.
step "installing ringfleet and its test dependencies (constraints.txt, Nova included) in .venv"
ensure_venv "$repo" "[test]"

step "ruff"
ruff check .
ruff format --check .
step "mypy"
mypy
step "shell scripts"
for script in tools/*.sh .ci/run devstack/plugin.sh devstack/settings; do
    bash -n "$script"  # one at a time: further names would be the script's arguments
done
if ! command -v shellcheck >/dev/null && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q shellcheck >/dev/null 2>&1 \
        || echo "shellcheck could not be installed; skipping it" >&2
fi
if command -v shellcheck >/dev/null; then
    shellcheck tools/*.sh .ci/run
    shellcheck -s bash devstack/plugin.sh devstack/settings
fi

step "docs: HTML and man pages (sphinx-build -W), release notes (reno lint)"
docs_out=$(mktemp -d)
# One doctree cache: the man pages reuse what the HTML build read (about 1 s, not 5).
sphinx-build -W -q -d "$docs_out/doctrees" -b html docs "$docs_out/html"
sphinx-build -W -q -d "$docs_out/doctrees" -b man docs "$docs_out/man"
rm -rf "$docs_out"
reno -q lint
step "Prometheus rules (promtool check rules, promtool test rules)"
install_promtool() {
    # Debian's prometheus package is where promtool comes from (the server is
    # not started: there is no systemd here).
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q \
        --no-install-recommends prometheus >/dev/null 2>&1
}
if ! command -v promtool >/dev/null && command -v apt-get >/dev/null; then
    install_promtool || { apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null 2>&1 && install_promtool; } \
        || echo "prometheus (promtool) could not be installed; skipping the rules checks" >&2
fi
if command -v promtool >/dev/null; then
    promtool check rules etc/prometheus/ringfleet-rules.yml
    promtool test rules tests/prometheus/ringfleet-rules-test.yml
fi

# --durations: the slowest tests in every log, to keep CI under its 25 minutes.
if (($#)); then
    step "tests: $* (real etcd, Redis, RabbitMQ, PostgreSQL, MariaDB, Ironic, Keystone, Placement)"
    tools/with-test-servers.sh python -m pytest -p no:cacheprovider -ra --durations=20 "$@"
    exit
fi
# The unit tests need no server: one worker per core, each test module on
# one worker, in its order.
# The functional tests share their servers (and stop, freeze and restart
# them): one at a time on a set of servers.  They mostly wait (for leases,
# deploys, timeouts), so two streams run side by side, each on servers of
# its own; the first takes the membership, chaos and gray-failure faults
# (and Placement's agents' report, for balance), the second the rest,
# Ironic's, Keystone's and the Placement server's tests among them (about
# half the time each).
# The servers' packages and virtualenvs (Ironic's, Keystone's, Placement's)
# install in the background, once (two apt-get runs would race, and both
# streams would build the same virtualenvs): mostly network and disk, while
# the plain install and the unit tests below use the CPU.
servers_log=$(mktemp)
tools/with-test-servers.sh --install >"$servers_log" 2>&1 &
servers_pid=$!
# The install a user does: the wheel alone, without extras, and the README's
# first command from a fresh clone (the sdist and wheel built on the way).
step "a plain install: the wheel without extras, its scripts, modules and demo; ./tools/demo.sh from a fresh clone"
tools/check-install.sh
step "unit tests (one worker per core)"
python -m pytest -p no:cacheprovider -ra -q -n auto --dist loadfile --durations=5 tests/unit
step "functional tests (real etcd, Redis, RabbitMQ, PostgreSQL, MariaDB, Ironic, Keystone, Placement), two streams"
faults=(
    tests/functional/test_chaos.py tests/functional/test_chaos_redis.py
    tests/functional/test_membership.py tests/functional/test_db_reconnect.py
    tests/functional/test_agents.py tests/functional/test_dependency_down.py
    tests/functional/test_etcd_cluster.py tests/functional/test_slow_deploys.py
    tests/functional/test_scale_bench.py
    tests/functional/test_conductor_peers.py tests/functional/test_placement.py
    tests/functional/test_gray_failures.py
)
rest=()
for file in tests/functional/test_*.py; do
    [[ " ${faults[*]} " == *" $file "* ]] || rest+=("$file")
done
step "the servers' install (run in the background since the plain install)"
servers_status=0
wait "$servers_pid" || servers_status=$?
cat "$servers_log"
rm -f "$servers_log"
((servers_status == 0)) || exit "$servers_status"
logs=$(mktemp -d)
pytest_args=(-p no:cacheprovider -ra --durations=25)
tools/with-test-servers.sh python -m pytest "${pytest_args[@]}" "${faults[@]}" >"$logs/faults" 2>&1 &
faults_pid=$!
tools/with-test-servers.sh python -m pytest "${pytest_args[@]}" "${rest[@]}" >"$logs/rest" 2>&1 &
rest_pid=$!
# Interrupted: stop both (each stops its servers when TERMed).
trap 'kill -TERM "$faults_pid" "$rest_pid" 2>/dev/null; wait' INT TERM
status=0
wait "$faults_pid" || status=1
wait "$rest_pid" || status=1
printf '\n--- stream 1: membership and chaos faults\n'
cat "$logs/faults"
printf '\n--- stream 2: the other functional tests\n'
cat "$logs/rest"
rm -rf "$logs"
exit "$status"
