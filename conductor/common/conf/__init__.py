# SPDX-License-Identifier: Apache-2.0
"""Every option of ringfleet, one module per option group.

Each group module (``coordination.py`` for ``[coordination]``, ``default.py``
for ``[DEFAULT]``, ...) defines the group, its options and an ``OPTIONS``
(:class:`~conductor.common.conf.groups.GroupOptions`) that registers and
lists them; :mod:`~conductor.common.conf.opts` puts every group in the
namespace of the sample config that lists it.  The package sits in the
shared layer so that each service, the API and the CLI import the options
they read from here, and nothing else defines options.

A process registers only the groups it reads: the shared ones
(``ringfleet.common``: ``[DEFAULT]``, ``[coordination]``, ``[metrics]``,
``[ring]``, ``[upgrade_levels]``) and its own namespace's, with
:func:`register_opts`; a group read only by some processes of a kind
(``[ironic]`` by the agents of the ironic driver) is registered by its user
with its ``OPTIONS.register``.

Nothing here reads configuration at import time: callers build or receive a
``cfg.ConfigOpts`` and register on it before parsing.

Adding an option: add it to its group's module (a new group: a new module
ending with its ``OPTIONS``, added to a namespace in ``opts.py``), then
regenerate the sample (``oslo-config-generator --config-file
etc/ringfleet/ringfleet-config-generator.conf``).
"""

from __future__ import annotations

from oslo_config import cfg

from conductor.common.conf.opts import API, COMMON, COMPUTE_AGENT, CONDUCTOR, Namespace

__all__ = ["API", "COMMON", "COMPUTE_AGENT", "CONDUCTOR", "register_opts"]


def register_opts(conf: cfg.ConfigOpts, *namespaces: Namespace) -> None:
    """Register the shared option groups on ``conf``, and those of ``namespaces``
    (``CONDUCTOR`` for a conductor, ``COMPUTE_AGENT`` for an agent, ...)."""
    COMMON.register(conf)
    for namespace in namespaces:
        namespace.register(conf)
