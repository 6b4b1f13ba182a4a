# SPDX-License-Identifier: Apache-2.0
"""Sphinx configuration: the HTML documentation and the man pages.

Build (from the repository root, with the ``test`` extra installed)::

    sphinx-build -W -b html docs docs/_build/html
    sphinx-build -W -b man docs docs/_build/man

The command-line and configuration references are generated from the
installed code (cliff's and oslo.config's Sphinx extensions), so ringfleet
must be installed (``pip install -e .``) for the build to find them.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

project = "ringfleet"
author = "ringfleet developers"
copyright = "ringfleet developers"
try:
    release = _version("ringfleet")
except PackageNotFoundError:  # building from a tree that was never installed
    release = "unknown"
version = release

extensions = [
    "cliff.sphinxext",
    "oslo_config.sphinxext",
    "oslo_policy.sphinxext",
]

# rpc-reference.rst is included by rpc-api.rst, notification-reference.rst by
# notifications.rst: not pages of their own.
exclude_patterns = ["_build", "rpc-reference.rst", "notification-reference.rst"]
# Each notification's JSON schema, published beside the pages
# (tools/gen_notification_doc.py writes it).
html_extra_path = ["notification-schemas.json"]
# Literal blocks in the hand-written pages are shell sessions, config files
# and JSON, not Python: no guessing of a lexer (and no warning when one fails).
highlight_language = "none"

html_theme = "alabaster"
html_title = f"ringfleet {release}"

# The commands' examples (the end of each one's --help) as literal blocks:
# cliff's extension reads a command's epilog as reStructuredText.
from conductor.cli.command import Examples  # noqa: E402 -- after the version

Examples.rst = True

# ringfleet(1): the command, its global options and every command in the
# ``ringfleet.cli`` entry-point namespace (cliff.sphinxext).
autoprogram_cliff_application = "ringfleet"
# -h/--help is on every command; the reference need not repeat it.
autoprogram_cliff_ignored = ["--help"]

# One man page per console script of pyproject.toml ([project.scripts]);
# tests/unit/test_docs_build.py checks that none is missing.
man_pages = [
    ("man/ringfleet", "ringfleet", "operate a ringfleet bare-metal fleet", [author], 1),
    ("man/ringfleet-conductor", "ringfleet-conductor", "the ringfleet conductor", [author], 8),
    (
        "man/ringfleet-compute-agent",
        "ringfleet-compute-agent",
        "a ringfleet compute agent",
        [author],
        8,
    ),
    ("man/ringfleet-api", "ringfleet-api", "the ringfleet HTTP API service", [author], 8),
    (
        "man/ringfleet-dbsync",
        "ringfleet-dbsync",
        "create, upgrade or check the ringfleet database schema",
        [author],
        8,
    ),
    (
        "man/ringfleet-status",
        "ringfleet-status",
        "check that a ringfleet host is ready for an upgrade, or done with it",
        [author],
        8,
    ),
]
man_show_urls = False
# man1/, man8/: the output directory is a MANPATH entry as it is.
man_make_section_directory = True
