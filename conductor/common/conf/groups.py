# SPDX-License-Identifier: Apache-2.0
"""One option group as data, and the one way every group is registered.

Each module of :mod:`conductor.common.conf` defines its group's options and
ends with a :class:`GroupOptions` naming them; registering and listing (for
oslo-config-generator) are done here, once, for every group.

Each ``ConfigOpts`` gets its own ``OptGroup`` object: oslo.config's
``ConfigOpts.register_group`` keeps a *shallow* copy of the ``OptGroup`` it is
given, and the copy shares the group's option table, which is where
``set_override`` and ``set_default`` store their values, with every other
``ConfigOpts`` that registered the same ``OptGroup`` object.  The groups are
defined at module level (the config generator lists them), so registering
those objects directly would let an override made on one ``ConfigOpts`` show
through all the others of the process: the services of the embedded fleet
(one process, one ``ConfigOpts`` per service) and tests would see each
other's settings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from oslo_config import cfg

from conductor.common.conf import keystoneauth

__all__ = ["GroupOptions", "ListedOpts"]

#: What an ``oslo.config.opts`` entry point returns: (group, options) pairs.
ListedOpts = list[tuple[str | cfg.OptGroup, list[cfg.Opt]]]


@dataclass(frozen=True)
class GroupOptions:
    """The options of one group, and what registering the group brings along."""

    #: The group; None for ``[DEFAULT]``.
    group: cfg.OptGroup | None
    opts: Sequence[cfg.Opt]
    #: The OpenStack service type of a group that configures a client of that
    #: service (found in the catalog by it): keystoneauth's session, adapter
    #: and auth options are registered in the group and listed with it.
    service_type: str | None = None
    #: Seconds a request to that service may take (keystoneauth's session
    #: ``timeout``, which has no default of its own).
    request_timeout: float | None = None
    #: Registers, before the group, the library options its readers use
    #: beside ringfleet's own (listed by the library's own namespace).
    prepare: Callable[[cfg.ConfigOpts], None] | None = None

    @property
    def name(self) -> str:
        return "DEFAULT" if self.group is None else self.group.name

    def register(self, conf: cfg.ConfigOpts) -> None:
        """Register the group's options on ``conf`` (idempotent)."""
        if self.prepare is not None:
            self.prepare(conf)
        if self.group is None:
            conf.register_opts(self.opts)
            return
        group = self.group
        if group.name not in conf:
            conf.register_group(cfg.OptGroup(group.name, title=group.title, help=group.help))
        conf.register_opts(self.opts, group=group.name)
        if self.service_type is not None:
            keystoneauth.register_opts(conf, group.name, self.service_type, self.request_timeout)

    def listing(self) -> tuple[str | cfg.OptGroup, list[cfg.Opt]]:
        """The group and its options as oslo-config-generator lists them."""
        listed = list(self.opts)
        if self.service_type is not None:
            listed += keystoneauth.list_opts(self.request_timeout)
        return (self.group if self.group is not None else "DEFAULT", listed)
