#!/usr/bin/env bash
# The project's test command (README.rst): lint, type-check, then unit and
# functional tests against real etcd, RabbitMQ and PostgreSQL.
#
# Usage: tools/run-tests.sh [PYTEST ARGS...]
#
# Installs what it needs on a fresh Debian machine with Python 3.11: a
# virtualenv in .venv with the pinned versions of constraints.txt, and (via
# tools/with-test-servers.sh) the Debian server packages. The servers are
# started on 127.0.0.1 in a private directory and stopped by PID afterwards.
#
# Environment:
#   PYTHON=python3        interpreter to build the virtualenv from
#   RINGFLEET_VENV=.venv  where the virtualenv lives
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
python=${PYTHON:-python3}
venv=${RINGFLEET_VENV:-$repo/.venv}

step() { printf '\n==> %s\n' "$*"; }

if [[ ! -x $venv/bin/python ]]; then
    step "creating virtualenv $venv"
    if ! "$python" -m venv "$venv" 2>/dev/null; then
        # Debian splits venv out of the interpreter package.
        ver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "python$ver-venv" >/dev/null \
            || { apt-get update -q >/dev/null && \
                 DEBIAN_FRONTEND=noninteractive apt-get install -y -q "python$ver-venv" >/dev/null; }
        rm -rf "$venv"
        "$python" -m venv "$venv"
    fi
fi
step "installing ringfleet and its test dependencies (constraints.txt)"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
"$venv/bin/python" -m pip install -q --disable-pip-version-check \
    -c constraints.txt -e ".[test]"

export PATH="$venv/bin:$PATH"

step "ruff"
ruff check .
ruff format --check .
step "mypy"
mypy
step "shell scripts"
bash -n tools/*.sh .ci/run
if command -v shellcheck >/dev/null; then shellcheck tools/*.sh .ci/run; fi

step "unit and functional tests (real etcd, RabbitMQ, PostgreSQL)"
tools/with-test-servers.sh python -m pytest -p no:cacheprovider -ra "$@"
