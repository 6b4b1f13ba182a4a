# SPDX-License-Identifier: Apache-2.0
"""Authorization: oslo.policy rules with their defaults in code.

Three roles, as Keystone's default roles: ``reader`` (looks), ``member``
(builds and deletes instances), ``admin`` (operator calls: node changes,
moves, drains, flavors).  ``admin`` implies ``member`` implies ``reader``.
Operators override any rule in a policy file (oslo.policy's ``[oslo_policy]
policy_file``); ``oslopolicy-sample-generator --namespace ringfleet.api``
writes the defaults (entry point ``oslo.policy.policies``);
``oslopolicy-policy-generator``, ``oslopolicy-list-redundant`` and
``oslopolicy-validator`` with ``--namespace ringfleet.api`` read the policy
file the API would (entry point ``oslo.policy.enforcer``, :func:`get_enforcer`).

Every rule declares its ``scope_types`` and oslo.policy enforces them: the
instance and quota rules are project-scoped (as Nova's with
``enforce_scope``: a system-scoped token gets 403 there, whatever its
roles); the operator's rules (nodes, flavors, the fleet, agents,
``context_is_admin``) take a project-scoped token or a system-scoped one
(:data:`SYSTEM_OR_PROJECT`), so that the *system admin* (the ``admin`` role on
the system, as Keystone's and Ironic's) runs the fleet without reaching any
project's instances.  A domain-scoped token passes no rule.
The role rules say who may call; *which* instances a call reaches is the
conductor's business (invariant 12): a reader or member reaches their own
project's, an admin (``context_is_admin``, sent to the conductor as the
context's ``is_admin``) any project's.  Quota rules compare the path's
project with the caller's (``project_id:%(project_id)s``).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from oslo_config import cfg
from oslo_policy import policy

from conductor.common import verbs
from conductor.common.instance_states import Event

__all__ = [
    "ADMIN",
    "CONTEXT_IS_ADMIN",
    "MEMBER",
    "READER",
    "SYSTEM_OR_PROJECT",
    "SYSTEM_RULES",
    "Enforcer",
    "get_enforcer",
    "list_rules",
    "scope_types",
]

ADMIN = "role:admin"
MEMBER = "role:member or " + ADMIN
READER = "role:reader or " + MEMBER
#: A reader of the project named in the path, or an admin.
PROJECT_READER_OR_ADMIN = "(role:reader and project_id:%(project_id)s) or " + ADMIN

#: Whether a caller is an admin to the conductor: reaches every project's
#: instances (the RPC context's ``is_admin``).
CONTEXT_IS_ADMIN = "context_is_admin"

#: The scopes of the operator's rules; every other rule is project-scoped.
SYSTEM_OR_PROJECT = ["system", "project"]
#: The rules a system-scoped token may pass (with the roles they ask for).
SYSTEM_RULES = frozenset(
    {
        CONTEXT_IS_ADMIN,
        "ringfleet:node:list",
        "ringfleet:node:get",
        "ringfleet:node:create",
        "ringfleet:node:update",
        "ringfleet:node:sync",
        "ringfleet:node:power",
        "ringfleet:node:delete",
        "ringfleet:node:move",
        "ringfleet:flavor:list",
        "ringfleet:flavor:create",
        "ringfleet:flavor:delete",
        "ringfleet:fleet:get",
        "ringfleet:fleet:check",
        "ringfleet:agent:drain",
    }
)


def scope_types(rule: str) -> list[str]:
    """The token scopes ``rule`` accepts."""
    return list(SYSTEM_OR_PROJECT) if rule in SYSTEM_RULES else ["project"]


#: The delete verb's row (its rule, method and path).
_DELETE = verbs.BY_EVENT[Event.DELETE]

_RULES: list[tuple[str, str, str, list[tuple[str, str]]]] = [
    # name, check, description, operations
    # The inventory is the operator's, as Nova's hypervisors and hosts.
    ("ringfleet:node:list", ADMIN, "List nodes.", [("GET", "/v1/nodes")]),
    (
        "ringfleet:node:get",
        ADMIN,
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
        "List and show instances (of the caller's project; an admin's of any project).",
        [("GET", "/v1/instances"), ("GET", "/v1/instances/{instance}")],
    ),
    (
        "ringfleet:instance:list:all_projects",
        ADMIN,
        "List every project's instances, or another project's (all_projects, project_id).",
        [("GET", "/v1/instances")],
    ),
    (
        "ringfleet:instance:show:host",
        ADMIN,
        "See an instance's host, node_uuid and tried_nodes (left out for others, as Nova's "
        "extended server attributes), and filter instance lists by host.",
        [
            ("GET", "/v1/instances"),
            ("GET", "/v1/instances/{instance}"),
            ("POST", "/v1/instances"),
            (_DELETE.http.method, _DELETE.http.path),
            *sorted({(verb.http.method, verb.http.path) for verb in verbs.ACTIONS}),
        ],
    ),
    (
        "ringfleet:instance:create",
        MEMBER,
        "Build instances (for the caller's project, within its quotas).",
        [("POST", "/v1/instances")],
    ),
    (
        verbs.DELETE_RULE,
        MEMBER,
        "Delete an instance (of the caller's project; an admin's of any project).",
        [(_DELETE.http.method, _DELETE.http.path)],
    ),
    (
        "ringfleet:instance:metadata:list",
        READER,
        "Show an instance's metadata (Nova's server metadata; of the caller's project, an "
        "admin's of any project).",
        [
            ("GET", "/v1/instances/{instance}/metadata"),
            ("GET", "/v1/instances/{instance}/metadata/{key}"),
        ],
    ),
    (
        "ringfleet:instance:metadata:update",
        MEMBER,
        "Set, replace or delete an instance's metadata (of the caller's project).",
        [
            ("PUT", "/v1/instances/{instance}/metadata"),
            ("POST", "/v1/instances/{instance}/metadata"),
            ("PUT", "/v1/instances/{instance}/metadata/{key}"),
            ("DELETE", "/v1/instances/{instance}/metadata/{key}"),
        ],
    ),
    (
        "ringfleet:instance:tags:list",
        READER,
        "List an instance's tags, check one (Nova's server tags).",
        [("GET", "/v1/instances/{instance}/tags"), ("GET", "/v1/instances/{instance}/tags/{tag}")],
    ),
    (
        "ringfleet:instance:tags:update",
        MEMBER,
        "Add, replace or delete an instance's tags (of the caller's project).",
        [
            ("PUT", "/v1/instances/{instance}/tags"),
            ("DELETE", "/v1/instances/{instance}/tags"),
            ("PUT", "/v1/instances/{instance}/tags/{tag}"),
            ("DELETE", "/v1/instances/{instance}/tags/{tag}"),
        ],
    ),
    (
        "ringfleet:keypair:list",
        READER,
        "List and show the caller's key pairs (Nova's os-keypairs: a user's own).",
        [("GET", "/v1/keypairs"), ("GET", "/v1/keypairs/{keypair}")],
    ),
    (
        "ringfleet:keypair:create",
        MEMBER,
        "Create (import or generate) a key pair of the caller's.",
        [("POST", "/v1/keypairs")],
    ),
    (
        "ringfleet:keypair:delete",
        MEMBER,
        "Delete a key pair of the caller's.",
        [("DELETE", "/v1/keypairs/{keypair}")],
    ),
    (
        "ringfleet:keypair:other_user",
        ADMIN,
        "List, show, create or delete another user's key pairs (user_id, 1.14; Nova's "
        "os-keypairs rules let only an admin name another user).",
        [
            ("GET", "/v1/keypairs"),
            ("POST", "/v1/keypairs"),
            ("GET", "/v1/keypairs/{keypair}"),
            ("DELETE", "/v1/keypairs/{keypair}"),
        ],
    ),
    (
        "ringfleet:instance:actions:list",
        READER,
        "List an instance's actions (Nova's os-instance-actions:list).",
        [("GET", "/v1/instances/{instance}/actions")],
    ),
    (
        "ringfleet:instance:actions:show",
        READER,
        "Show an instance's action and its events (Nova's os-instance-actions:show).",
        [("GET", "/v1/instances/{instance}/actions/{request_id}")],
    ),
    ("ringfleet:quota:list", ADMIN, "List projects' own quotas.", [("GET", "/v1/quotas")]),
    (
        "ringfleet:quota:get",
        PROJECT_READER_OR_ADMIN,
        "Show a project's quotas and usage.",
        [("GET", "/v1/quotas/{project_id}")],
    ),
    (
        "ringfleet:limits:get",
        READER,
        "Show the caller's project's limits and usage (Nova's /limits).",
        [("GET", "/v1/limits")],
    ),
    (
        "ringfleet:limits:other_project",
        ADMIN,
        "Show another project's limits (tenant_id; Nova's os_compute_api:limits:other_project).",
        [("GET", "/v1/limits")],
    ),
    (
        "ringfleet:quota:update",
        ADMIN,
        "Set or drop a project's own quotas.",
        [("PUT", "/v1/quotas/{project_id}"), ("DELETE", "/v1/quotas/{project_id}")],
    ),
    (
        verbs.ACTION_RULE,
        # Whoever may delete an instance may reboot, stop or start it: the
        # delete rule itself, so that overriding it covers both.
        f"rule:{verbs.DELETE_RULE}",
        f"{verbs.action_names()} an instance.",
        sorted({(verb.http.method, verb.http.path) for verb in verbs.ACTIONS}),
    ),
    (
        "ringfleet:fleet:get",
        READER,
        "Fleet status and ring.",
        [("GET", "/v1/fleet/status"), ("GET", "/v1/fleet/ring")],
    ),
    (
        "ringfleet:fleet:check",
        ADMIN,
        "Fleet check (its problems name every project's instances).",
        [("GET", "/v1/fleet/check")],
    ),
    ("ringfleet:agent:drain", ADMIN, "Drain an agent.", [("POST", "/v1/agents/{host}/drain")]),
]


def list_rules() -> list[policy.RuleDefault]:
    """Every rule with its default (entry point ``oslo.policy.policies``, ``ringfleet.api``)."""
    return [
        policy.RuleDefault(
            name=CONTEXT_IS_ADMIN,
            check_str=ADMIN,
            description="Who is an admin to the conductors: sees and acts on every project's "
            "instances (a system-scoped token reaches none: the instance rules are "
            "project-scoped).",
            scope_types=scope_types(CONTEXT_IS_ADMIN),
        ),
        *(
            policy.DocumentedRuleDefault(
                name=name,
                check_str=check,
                description=description,
                operations=[{"method": m, "path": p} for m, p in operations],
                scope_types=scope_types(name),
            )
            for name, check, description, operations in _RULES
        ),
    ]


def get_enforcer() -> policy.Enforcer:
    """The API's enforcer for the oslopolicy tools (entry point ``oslo.policy.enforcer``).

    It reads the same ``--config-file``/``--config-dir`` as the tool was
    given (else ``/etc/ringfleet/ringfleet.conf``), so ``[oslo_policy]
    policy_file`` is the one ringfleet-api reads.
    """
    # The tools parse their options into oslo.config's global object, and
    # oslopolicy-validator reads [oslo_policy] policy_file from it: the
    # enforcer must be built on that object (only here; the services never
    # use it).  Parsed again with the project's name for its default files.
    conf = cfg.CONF
    conf(sys.argv[1:], project="ringfleet")
    enforcer = policy.Enforcer(conf)
    enforcer.register_defaults(list_rules())
    return enforcer


RULE_NAMES = frozenset([CONTEXT_IS_ADMIN, *(name for name, *_ in _RULES)])


class Enforcer:
    """The rules of one ``ConfigOpts`` (policy file overrides read by oslo.policy).

    Decisions are cached per (rule, roles, project, user, token scope,
    target): they depend on nothing else.  oslo.policy looks for a
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

    def allowed(
        self, rule: str, credentials: dict[str, Any], target: dict[str, str] | None = None
    ) -> bool:
        """Whether ``credentials`` (``roles``, ``project_id``...) pass ``rule``
        on ``target`` (the path's variables)."""
        if rule not in RULE_NAMES:
            raise KeyError(rule)
        target = target or {}
        key = (
            rule,
            tuple(sorted(credentials.get("roles") or ())),
            credentials.get("project_id"),
            credentials.get("user_id"),
            # The token's scope: the same roles pass or not by it.
            credentials.get("system_scope"),
            credentials.get("domain_id"),
            tuple(sorted(target.items())),
        )
        now = time.monotonic()
        with self._lock:
            if now >= self._expires or len(self._cache) >= self._MAX_CACHED:
                self._cache.clear()
                self._expires = now + self.RELOAD_SECONDS
            cached = self._cache.get(key)
        if cached is not None:
            return cached
        decision = bool(self._enforcer.enforce(rule, dict(target), credentials))
        with self._lock:
            self._cache[key] = decision
        return decision
