#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's main command: install ringfleet in .venv and run the embedded
# demo (no servers). Arguments go to `ringfleet demo` (try --help).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=tools/venv.sh
. "$repo/tools/venv.sh"
ensure_venv "$repo" ""
exec ringfleet demo "$@"
