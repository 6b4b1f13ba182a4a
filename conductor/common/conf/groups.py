# SPDX-License-Identifier: Apache-2.0
"""Registering an option group so that its values stay with one ``ConfigOpts``.

oslo.config's ``ConfigOpts.register_group`` keeps a *shallow* copy of the
``OptGroup`` it is given: the copy shares the group's option table, which is
where ``set_override`` and ``set_default`` store their values, with every
other ``ConfigOpts`` that registered the same ``OptGroup`` object.  Our
option modules define their groups at module level (the config generator
lists them), so registering those objects directly would let an override
made on one ``ConfigOpts`` show through all the others of the process: the
services of the embedded fleet (one process, one ``ConfigOpts`` per
service) and tests would see each other's settings.  Each ``ConfigOpts``
therefore gets its own ``OptGroup`` with the same name, title and help.
"""

from __future__ import annotations

from collections.abc import Sequence

from oslo_config import cfg

__all__ = ["register_group_opts"]


def register_group_opts(conf: cfg.ConfigOpts, group: cfg.OptGroup, opts: Sequence[cfg.Opt]) -> None:
    """Register ``opts`` in ``group`` on ``conf``, under a group object of its own."""
    if group.name not in conf:
        conf.register_group(cfg.OptGroup(group.name, title=group.title, help=group.help))
    conf.register_opts(opts, group=group.name)
