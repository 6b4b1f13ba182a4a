#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build the sdist and a wheel from it as a packager would, with the oldest
# setuptools and setuptools-scm pyproject.toml's [build-system] allows (its
# floors, read from the file), in a throwaway virtualenv; then check that the
# sdist holds every tracked file (tools/check_sdist.py) and list it.
#
# Usage: tools/check-sdist.sh [OUTDIR]   (from anywhere; needs python3 with
#        venv, git, PyPI).  OUTDIR: keep the sdist and the wheel there
#        (tools/check-install.sh installs that wheel); default: thrown away.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
outdir=${1:+$(mkdir -p "$1" && cd "$1" && pwd)}
cd "$repo"
python=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# "setuptools>=77.0.3" -> "setuptools==77.0.3": each floor exactly.
mapfile -t floors < <("$python" -c '
import re, tomllib
with open("pyproject.toml", "rb") as f:
    for req in tomllib.load(f)["build-system"]["requires"]:
        name, op, ver = re.fullmatch(r"([\w.-]+)\s*(>=)\s*([\w.]+)", req).groups()
        print(f"{name}=={ver}")
')
"$python" -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --disable-pip-version-check "${floors[@]}" build
echo "build requirements at their floors: ${floors[*]}"
# --no-isolation: build with the floors just installed, not the newest releases.
# Without --sdist/--wheel, build makes the sdist and then the wheel from it.
"$tmp/venv/bin/python" -m build --no-isolation --outdir "$tmp/dist" . >"$tmp/build.log" 2>&1 \
    || { cat "$tmp/build.log" >&2; exit 1; }
ls "$tmp"/dist/*.whl >/dev/null
"$python" -m tools.check_sdist "$tmp"/dist/*.tar.gz
if [[ -n $outdir ]]; then
    cp "$tmp"/dist/*.tar.gz "$tmp"/dist/*.whl "$outdir"/
fi
