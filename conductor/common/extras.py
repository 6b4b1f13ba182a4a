# SPDX-License-Identifier: Apache-2.0
"""Optional features and the extras that install them.

A plain ``pip install ringfleet`` runs every service and command with the
default back ends.  An optional feature -- Keystone tokens in front of the
API, MariaDB, the in-process Redis of ``ringfleet demo --backend redis``,
Nova's filters -- needs the libraries of its extra (pyproject.toml's
``[project.optional-dependencies]``).  Such a library is imported only where
the feature is used, and its absence raises :class:`MissingExtra`: one
line naming the extra to install, never a traceback or a command that
silently vanishes from the CLI.

A module that cannot be imported at all without its extra is declared in
pyproject.toml's ``[tool.ringfleet.extra-modules]`` (what
``tools/check_imports.py`` accepts from a plain install).
"""

from __future__ import annotations

__all__ = ["MissingExtra", "install_hint"]


def install_hint(extra: str) -> str:
    """How to install ``extra``, as every message about it says it."""
    return f"pip install 'ringfleet[{extra}]'"


class MissingExtra(ImportError):
    """A library of an optional feature is not installed.

    An :class:`ImportError`, so callers that already treat a missing
    library as such keep doing so.

    :ivar extra: the extra that installs it (``"keystone"``)
    :ivar feature: what needs it, in the operator's words
    :ivar missing: the module that could not be imported
    """

    def __init__(self, extra: str, feature: str, missing: str) -> None:
        self.extra = extra
        self.feature = feature
        self.missing = missing
        super().__init__(
            f"{feature} needs the {extra!r} extra ({missing} is not installed): "
            f"{install_hint(extra)}",
            name=missing,
        )
