#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Prove the install a user does, not the project's virtualenv (which has
# every extra, so a missing runtime dependency never shows in it):
#
#  1. the sdist and the wheel, built as a packager would (tools/check-sdist.sh);
#  2. the wheel alone in a fresh virtualenv, no extras (constraints.txt's
#     versions), and `pip check` clean;
#  3. every console script's --help exits 0, and `ringfleet demo` exits 0
#     with its invariants held;
#  4. every product module imports, but for those of an extra, whose error
#     names it (tools/check_imports.py);
#  5. the files of etc/ land in PREFIX/share/ringfleet, as they are in git;
#  6. the README's first command, ./tools/demo.sh, from a fresh clone of
#     this repository's HEAD (what was committed, not the work tree).
#
# Usage: tools/check-install.sh   (from anywhere; needs python3 with venv, git, PyPI)
# PYTHON: the interpreter of the virtualenvs (python3).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

step() { printf -- '--- %s\n' "$*"; }
fail() { printf 'check-install: %s\n' "$*" >&2; exit 1; }

# The README's first command, ./tools/demo.sh, from a fresh clone: its own
# install and demo, beside the checks below (it mostly waits for pip and
# the demo's TTLs).
git clone -q "$repo" "$tmp/clone"
(unset RINGFLEET_VENV && exec "$tmp/clone/tools/demo.sh") >"$tmp/clone-demo.out" 2>&1 &
clone_demo=$!
trap 'kill "$clone_demo" 2>/dev/null || true; wait; rm -rf "$tmp"' EXIT

step "sdist and wheel with the oldest build requirements pyproject.toml allows"
"$repo/tools/check-sdist.sh" "$tmp/dist"
wheel=$(echo "$tmp"/dist/*.whl)

step "the wheel alone in a fresh virtualenv (no extras)"
venv=$tmp/plain
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
"$venv/bin/python" -m pip install -q --disable-pip-version-check -c "$repo/constraints.txt" "$wheel"
"$venv/bin/python" -m pip check

# Outside the repository: the installed modules, not the work tree's.
cd "$tmp"
step "every console script's --help"
mapfile -t scripts < <("$venv/bin/python" -c '
from importlib import metadata
for ep in metadata.distribution("ringfleet").entry_points.select(group="console_scripts"):
    print(ep.name)
')
((${#scripts[@]})) || fail "the wheel declares no console script"
for script in "${scripts[@]}"; do
    rc=0
    "$venv/bin/$script" --help >"$tmp/help.out" 2>"$tmp/help.err" || rc=$?
    ((rc == 0)) || { cat "$tmp/help.err" >&2; fail "$script --help exited $rc"; }
    ! grep -q Traceback "$tmp/help.err" || { cat "$tmp/help.err" >&2; fail "$script --help: a traceback"; }
    # cliff lists a command whose class it cannot load as "Could not load".
    ! grep -h "Could not" "$tmp/help.out" "$tmp/help.err" || fail "$script --help: a command did not load"
    echo "$script --help: ok"
done

step "every product module imports (those of an extra name it)"
"$venv/bin/python" "$repo/tools/check_imports.py" "$repo/pyproject.toml"

step "etc/ in share/ringfleet"
share=$venv/share/ringfleet
for pair in ringfleet/ringfleet.conf.sample:. ringfleet/api-paste.ini:. \
    ringfleet/policy.yaml.sample:. ringfleet/ringfleet-config-generator.conf:. \
    ringfleet/ringfleet-policy-generator.conf:. prometheus/ringfleet-rules.yml:prometheus \
    grafana/ringfleet.json:grafana; do
    source=${pair%%:*} dir=${pair##*:}
    cmp "$repo/etc/$source" "$share/$dir/${source##*/}" || fail "share/ringfleet/$dir: ${source##*/}"
done
for unit in "$repo"/etc/systemd/*.service; do
    cmp "$unit" "$share/systemd/${unit##*/}" || fail "share/ringfleet/systemd/${unit##*/}"
done
echo "$(find "$share" -type f | wc -l) files in $share"

step "ringfleet demo (the wheel's, no extras)"
rc=0
"$venv/bin/ringfleet" demo >"$tmp/demo.out" 2>&1 || rc=$?
((rc == 0)) || { cat "$tmp/demo.out" >&2; fail "ringfleet demo exited $rc"; }
tail -n 5 "$tmp/demo.out"

step "an extra's feature without it: one line naming the extra"
rc=0
"$venv/bin/ringfleet" demo --backend redis >"$tmp/extra.out" 2>"$tmp/extra.err" || rc=$?
if ((rc != 1)) || [[ -s $tmp/extra.out ]] || [[ $(wc -l <"$tmp/extra.err") != 1 ]] \
    || ! grep -q "pip install 'ringfleet\[demo-redis\]'" "$tmp/extra.err"; then
    cat "$tmp/extra.out" "$tmp/extra.err" >&2
    fail "ringfleet demo --backend redis (exit $rc): not one line naming the demo-redis extra"
fi
cat "$tmp/extra.err"

step "./tools/demo.sh from a fresh clone (started above)"
rc=0
wait "$clone_demo" || rc=$?
((rc == 0)) || { cat "$tmp/clone-demo.out" >&2; fail "./tools/demo.sh in a fresh clone exited $rc"; }
tail -n 5 "$tmp/clone-demo.out"
