# SPDX-License-Identifier: Apache-2.0
"""The routes of API v1: each handler calls the conductors over RPC.

:data:`ROUTES` is the one table the application dispatches on, checks
policy with and generates the OpenAPI document from.  The routes and their
handlers are in one module per resource: :mod:`conductor.api.v1_nodes`,
:mod:`~conductor.api.v1_flavors`, :mod:`~conductor.api.v1_instances`
(with the instance actions), instances' metadata and tags
(:mod:`~conductor.api.v1_instance_labels`), key pairs
(:mod:`~conductor.api.v1_keypairs`), the action history
(:mod:`~conductor.api.v1_instance_actions`), :mod:`~conductor.api.v1_quotas`,
Nova's limits (:mod:`~conductor.api.v1_limits`) and
:mod:`~conductor.api.v1_fleet`; lists page with :mod:`~conductor.api.v1_paging`.
"""

from __future__ import annotations

from conductor.api.app import Route
from conductor.api.v1_flavors import FLAVOR_ROUTES
from conductor.api.v1_fleet import FLEET_ROUTES
from conductor.api.v1_instance_actions import ACTION_ROUTES
from conductor.api.v1_instance_labels import LABEL_ROUTES
from conductor.api.v1_instances import (
    ALL_PROJECTS_RULE,
    HOST_RULE,
    INSTANCE_ACTION,
    INSTANCE_ROUTES,
)
from conductor.api.v1_keypairs import KEYPAIR_OTHER_USER_RULE, KEYPAIR_ROUTES
from conductor.api.v1_limits import LIMITS_OTHER_RULE, LIMITS_ROUTES
from conductor.api.v1_nodes import NODE_ROUTES
from conductor.api.v1_quotas import QUOTA_ROUTES

__all__ = [
    "ALL_PROJECTS_RULE",
    "HOST_RULE",
    "INSTANCE_ACTION",
    "KEYPAIR_OTHER_USER_RULE",
    "LIMITS_OTHER_RULE",
    "ROUTES",
]

ROUTES: tuple[Route, ...] = (
    *NODE_ROUTES,
    *FLAVOR_ROUTES,
    *INSTANCE_ROUTES,
    *LABEL_ROUTES,
    *KEYPAIR_ROUTES,
    *ACTION_ROUTES,
    *QUOTA_ROUTES,
    *LIMITS_ROUTES,
    *FLEET_ROUTES,
)
