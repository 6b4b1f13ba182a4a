# SPDX-License-Identifier: Apache-2.0
"""Which configuration files a ``ConfigOpts`` read, and what each sets, as written.

oslo.config answers for registered options only; these read the files
themselves, for checks about options as an operator wrote them (deprecated
names, another project's groups pasted in).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable

from oslo_config import cfg

__all__ = ["config_files", "set_in"]


def config_files(conf: cfg.ConfigOpts) -> list[str]:
    """The files ``conf`` was read from, in order (``--config-dir``'s too).

    None for a ``ConfigOpts`` never parsed from a command line (a service
    embedded in a process, its options set by code).
    """
    try:
        files = list(conf.config_file or [])
        directories = list(conf.config_dir or [])
    except cfg.NoSuchOptError:
        return []
    for directory in directories:
        files.extend(sorted(glob.glob(os.path.join(directory, "*.conf"))))
    return files


def set_in(files: Iterable[str]) -> dict[tuple[str, str], str]:
    """(section, option) -> the file that sets it, option names with ``_``."""
    found: dict[tuple[str, str], str] = {}
    for path in files:
        sections: dict[str, dict[str, list[str]]] = {}
        cfg.ConfigParser(path, sections).parse()
        for section, options in sections.items():
            for name in options:
                found.setdefault((section, name.replace("-", "_")), path)
    return found
