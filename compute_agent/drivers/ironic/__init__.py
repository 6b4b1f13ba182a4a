"""The ``ironic`` compute driver: bare metal through OpenStack Ironic (:class:`IronicDriver`)."""

from __future__ import annotations

from compute_agent.drivers.ironic.driver import IronicDriver

__all__ = ["IronicDriver"]
