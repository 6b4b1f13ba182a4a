#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Sourced by tools/run-tests.sh and tools/demo.sh: make sure the project's
# virtualenv exists with ringfleet installed at the pinned versions.
#
# Environment:
#   PYTHON=python3        interpreter to build the virtualenv from
#   RINGFLEET_VENV=.venv  where the virtualenv lives

# ensure_venv REPO EXTRAS: create/refresh the venv, put it first on PATH.
ensure_venv() {
    local repo=$1 extras=$2
    local python=${PYTHON:-python3}
    local venv=${RINGFLEET_VENV:-$repo/.venv}
    if [[ ! -x $venv/bin/python ]]; then
        if ! "$python" -m venv "$venv" >/dev/null 2>&1; then
            # Debian splits venv (and ensurepip) out of the interpreter package.
            local ver
            ver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
            rm -rf "$venv"
            apt-get update -q >/dev/null
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q "python$ver-venv" >/dev/null
            "$python" -m venv "$venv"
        fi
    fi
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
    "$venv/bin/python" -m pip install -q --disable-pip-version-check \
        -c "$repo/constraints.txt" -e "$repo$extras"
    export PATH="$venv/bin:$PATH"
}
