# SPDX-License-Identifier: Apache-2.0
"""Check a built sdist: it holds every file git tracks, and says its version.

A packager builds and tests from the sdist alone, so it must carry what the
repository does (the sample config and systemd units in ``etc/``, ``docs/``,
``devstack/``, ``tests/``, ``tools/``, ``constraints.txt``, the release
notes); setuptools-scm's git file finder puts every tracked file in it, and
this check keeps it so.  Run from the repository root by
``tools/check-sdist.sh``::

    python -m tools.check_sdist dist/ringfleet-VERSION.tar.gz

Prints the version and the members per top-level directory; exits 1 naming
the tracked files the sdist lacks.
"""

from __future__ import annotations

import collections
import subprocess
import sys
import tarfile
from email.parser import HeaderParser
from pathlib import Path


def tracked_files(repo: Path) -> set[str]:
    """The files git tracks in ``repo`` (that exist in the work tree)."""
    out = subprocess.run(  # noqa: S603 - fixed arguments, the work tree's own git
        ["git", "-C", str(repo), "ls-files", "-z"],  # noqa: S607 - git from PATH, as CI runs it
        check=True,
        capture_output=True,
    ).stdout.decode()
    return {name for name in out.split("\0") if name and (repo / name).is_file()}


def sdist_members(sdist: Path) -> tuple[str, set[str]]:
    """The sdist's version (from its PKG-INFO) and its files, without the
    top-level ``NAME-VERSION/`` directory."""
    with tarfile.open(sdist) as tar:
        names = [m.name for m in tar.getmembers() if m.isfile()]
        top = names[0].split("/", 1)[0]
        pkg_info = tar.extractfile(f"{top}/PKG-INFO")
        assert pkg_info is not None
        version = HeaderParser().parsestr(pkg_info.read().decode())["Version"]
    return version, {name.split("/", 1)[1] for name in names if "/" in name}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} SDIST", file=sys.stderr)
        return 2
    version, members = sdist_members(Path(argv[1]))
    missing = sorted(tracked_files(Path.cwd()) - members)
    by_dir = collections.Counter(m.split("/", 1)[0] if "/" in m else "." for m in members)
    print(f"sdist {Path(argv[1]).name}: version {version}, {len(members)} files")
    for top, count in sorted(by_dir.items()):
        print(f"  {top + '/' if top != '.' else '(top level)':<20} {count}")
    if missing:
        print(f"tracked files missing from the sdist ({len(missing)}):", file=sys.stderr)
        for name in missing:
            print(f"  {name}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
