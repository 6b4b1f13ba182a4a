"""Authorization: oslo.policy rules with their defaults in code.

Three roles, as Keystone's default roles: ``reader`` (looks), ``member``
(builds and deletes instances), ``admin`` (operator calls: node changes,
moves, drains, flavors).  ``admin`` implies ``member`` implies ``reader``.
Operators override any rule in a policy file (oslo.policy's ``[oslo_policy]
policy_file``); ``oslopolicy-sample-generator --namespace ringfleet.api``
writes the defaults (entry point ``oslo.policies``).
"""

from __future__ import annotations

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
        "ringfleet:fleet:get",
        READER,
        "Fleet status, check and ring.",
        [("GET", "/v1/fleet/status"), ("GET", "/v1/fleet/check"), ("GET", "/v1/fleet/ring")],
    ),
    ("ringfleet:agent:drain", ADMIN, "Drain an agent.", [("POST", "/v1/agents/{host}/drain")]),
]


def list_rules() -> list[policy.DocumentedRuleDefault]:
    """Every rule with its default (entry point ``oslo.policies``, ``ringfleet.api``)."""
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
    """The rules of one ``ConfigOpts`` (policy file overrides read by oslo.policy)."""

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self._enforcer = policy.Enforcer(conf)
        self._enforcer.register_defaults(list_rules())

    def allowed(self, rule: str, credentials: dict[str, Any]) -> bool:
        """Whether ``credentials`` (``roles``, ``project_id``...) pass ``rule``."""
        if rule not in RULE_NAMES:
            raise KeyError(rule)
        return bool(self._enforcer.enforce(rule, {}, credentials))
