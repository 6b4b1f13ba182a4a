# SPDX-License-Identifier: Apache-2.0
"""Every source file of the project names its licence (SPDX), as packagers expect."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINE = "SPDX-License-Identifier: Apache-2.0"
#: shell scripts without a .sh suffix
SCRIPTS = (".ci/run", "devstack/plugin.sh", "devstack/settings")


def _sources() -> list[Path]:
    try:
        listed = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout (an unpacked sdist): the files are not listed")
    return [
        ROOT / name
        for name in listed
        if (name.endswith((".py", ".sh")) or name in SCRIPTS) and (ROOT / name).is_file()
    ]


def test_every_source_file_has_an_spdx_licence_line() -> None:
    sources = _sources()
    assert len(sources) > 100
    missing = [
        str(path.relative_to(ROOT))
        for path in sources
        if LINE not in "".join(path.read_text(encoding="utf-8").splitlines(keepends=True)[:3])
    ]
    assert not missing, f"no '# {LINE}' in the first 3 lines of: {missing}"
