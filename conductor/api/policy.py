"""Authorization: oslo.policy rules with their defaults in code.

Three roles, as Keystone's default roles: ``reader`` (looks), ``member``
(builds and deletes instances), ``admin`` (operator calls: node changes,
moves, drains, flavors).  ``admin`` implies ``member`` implies ``reader``.
Operators override any rule in a policy file (oslo.policy's ``[oslo_policy]
policy_file``); ``oslopolicy-sample-generator --namespace ringfleet.api``
writes the defaults (entry point ``oslo.policy.policies``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from oslo_config import cfg
from oslo_policy import policy

__all__ = ["ADMIN", "MEMBER", "READER", "Enforcer", "list_rules"]

ADMIN = "role:admin"
MEMBER = "role:member or " + ADMIN
READER = "role:reader or " + MEMBER

_RULES: list[tuple[str, str, str, list[tuple[str, str]]]] = [
    # name, check, description, operations
    ("ringfleet:node:list", READER, "List nodes.", [("GET", "/v1/nodes")]),
    (
        "ringfleet:node:get",
        READER,
        "Show a node and its owner.",
        [("GET", "/v1/nodes/{node}"), ("GET", "/v1/nodes/{node}/owner")],
    ),
    (
        "ringfleet:node:create",
        ADMIN,
        "Enroll nodes (one, or an import).",
        [("POST", "/v1/nodes"), ("POST", "/v1/nodes/import")],
    ),
    (
        "ringfleet:node:update",
        ADMIN,
        "Change a node, its maintenance.",
        [("PATCH", "/v1/nodes/{node}"), ("PUT", "/v1/nodes/{node}/maintenance")],
    ),
    (
        "ringfleet:node:sync",
        ADMIN,
        "Import OpenStack Ironic's inventory now.",
        [("POST", "/v1/nodes/sync")],
    ),
    (
        "ringfleet:node:power",
        ADMIN,
        "Power a node on or off, or reboot it.",
        [("PUT", "/v1/nodes/{node}/states/power")],
    ),
    (
        "ringfleet:node:delete",
        ADMIN,
        "Forget a node (never deleted in Ironic).",
        [("DELETE", "/v1/nodes/{node}")],
    ),
    (
        "ringfleet:node:move",
        ADMIN,
        "Move a node to another agent.",
        [("POST", "/v1/nodes/{node}/move")],
    ),
    (
        "ringfleet:flavor:list",
        READER,
        "List and show flavors.",
        [("GET", "/v1/flavors"), ("GET", "/v1/flavors/{flavor}")],
    ),
    ("ringfleet:flavor:create", ADMIN, "Create a flavor.", [("POST", "/v1/flavors")]),
    ("ringfleet:flavor:delete", ADMIN, "Delete a flavor.", [("DELETE", "/v1/flavors/{flavor}")]),
    (
        "ringfleet:instance:list",
        READER,
        "List and show instances.",
        [("GET", "/v1/instances"), ("GET", "/v1/instances/{instance}")],
    ),
    ("ringfleet:instance:create", MEMBER, "Build instances.", [("POST", "/v1/instances")]),
    (
        "ringfleet:instance:delete",
        MEMBER,
        "Delete an instance.",
        [("DELETE", "/v1/instances/{instance}")],
    ),
    (
        "ringfleet:instance:action",
        # Whoever may delete an instance may reboot, stop or start it: the
        # delete rule itself, so that overriding it covers both.
        "rule:ringfleet:instance:delete",
        "Reboot, stop, start or rebuild an instance.",
        [("POST", "/v1/instances/{instance}/action")],
    ),
    (
        "ringfleet:fleet:get",
        READER,
        "Fleet status, check and ring.",
        [("GET", "/v1/fleet/status"), ("GET", "/v1/fleet/check"), ("GET", "/v1/fleet/ring")],
    ),
    ("ringfleet:agent:drain", ADMIN, "Drain an agent.", [("POST", "/v1/agents/{host}/drain")]),
]


def list_rules() -> list[policy.DocumentedRuleDefault]:
    """Every rule with its default (entry point ``oslo.policy.policies``, ``ringfleet.api``)."""
    return [
        policy.DocumentedRuleDefault(
            name=name,
            check_str=check,
            description=description,
            operations=[{"method": m, "path": p} for m, p in operations],
        )
        for name, check, description, operations in _RULES
    ]


RULE_NAMES = frozenset(name for name, *_ in _RULES)


class Enforcer:
    """The rules of one ``ConfigOpts`` (policy file overrides read by oslo.policy).

    Decisions are cached per (rule, roles, project, user): the API checks
    no target, so they depend on nothing else.  oslo.policy looks for a
    changed policy file on every ``enforce`` (stat calls on each config
    directory: about half of a request's CPU time); here the cache is
    dropped and the file looked for every :data:`RELOAD_SECONDS`, so an
    edited policy file applies within that time.
    """

    RELOAD_SECONDS = 5.0
    _MAX_CACHED = 4096

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self._enforcer = policy.Enforcer(conf)
        self._enforcer.register_defaults(list_rules())
        self._lock = threading.Lock()
        self._cache: dict[tuple[Any, ...], bool] = {}
        self._expires = 0.0

    def allowed(self, rule: str, credentials: dict[str, Any]) -> bool:
        """Whether ``credentials`` (``roles``, ``project_id``...) pass ``rule``."""
        if rule not in RULE_NAMES:
            raise KeyError(rule)
        key = (
            rule,
            tuple(sorted(credentials.get("roles") or ())),
            credentials.get("project_id"),
            credentials.get("user_id"),
        )
        now = time.monotonic()
        with self._lock:
            if now >= self._expires or len(self._cache) >= self._MAX_CACHED:
                self._cache.clear()
                self._expires = now + self.RELOAD_SECONDS
            cached = self._cache.get(key)
        if cached is not None:
            return cached
        decision = bool(self._enforcer.enforce(rule, {}, credentials))
        with self._lock:
            self._cache[key] = decision
        return decision
