# SPDX-License-Identifier: Apache-2.0
"""The ``ironic`` compute driver: bare metal through OpenStack Ironic (:class:`IronicDriver`).

The driver's client, its ``[ironic]`` options and Ironic's states are shared
with the conductors' inventory sync, in :mod:`conductor.common.ironic`.
"""

from __future__ import annotations

from compute_agent.drivers.ironic.driver import IronicDriver

__all__ = ["IronicDriver"]
