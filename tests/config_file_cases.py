# SPDX-License-Identifier: Apache-2.0
"""Configuration files a command cannot read, and how oslo.config words each.

The commands that read a configuration file (``ringfleet-dbsync``,
``ringfleet-status``) say what is wrong with it in one line; their tests
parametrize over :data:`CASES` and make each file with :func:`make`.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CASES", "make"]

#: (the file's name, the start of what is said of it; ``{path}`` is the file's path)
CASES = [
    ("missing.conf", "Failed to find some config files: {path}"),
    ("a-directory", "cannot read configuration file {path}: Is a directory"),
    ("malformed.conf", "Failed to parse {path}: at {path}:2, No ':' or '=' found"),
]


def make(path: Path) -> None:
    """Make the file of a case at *path*, by its name (a missing one: nothing)."""
    if path.name == "a-directory":
        path.mkdir()
    elif path.name == "malformed.conf":
        path.write_text("[database]\nconnection\n")
