# SPDX-License-Identifier: Apache-2.0
"""API v1's instances: build, list, show and delete them, and their actions.

The actions (reboot, stop, start, rebuild) and the delete are the verb
table's (:mod:`conductor.common.verbs`): their routes, rules, body keys and
conductor methods are read from it.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from conductor.api import microversion
from conductor.api.app import E400, E404, E409, E503, ApiError, Call, Param, Reply, Route
from conductor.api.microversion import (
    KEY_PAIRS,
    LABELS,
    NOVA_HABITS,
    NOVA_LISTING,
    REBUILD_IMAGE,
    TENANCY,
    USER_DATA_BASE64,
    VERBS_VERSION,
)
from conductor.api.v1_paging import LIMIT, MARKER, marker_in_list, page, page_limit
from conductor.common import schemas, verbs
from conductor.common.exception import InstanceNotFound
from conductor.common.instance_states import TRANSITIONS, Event
from conductor.common.list_filters import SORT_DIRS, SORT_KEYS, TAG_FILTERS, check_list_filters
from conductor.common.nova_status import STATUSES, addresses_of, status_of
from conductor.common.objects import VmState
from conductor.common.schemas import PROJECT_ID_PATTERN, Resource

__all__ = [
    "ALL_PROJECTS_RULE",
    "HOST_PATTERN",
    "HOST_RULE",
    "INSTANCE_ACTION",
    "INSTANCE_ROUTES",
    "PROJECT_PATTERN",
]

#: The host names documented (a node or agent name: conductor.common.checks.validate_name).
HOST_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._:-]{0,254}$"
#: The project ids taken (Keystone's are hex): the conductor's own rule.
PROJECT_PATTERN = PROJECT_ID_PATTERN

INSTANCE_FILTERS = (
    Param(
        "vm_state",
        "string",
        ", ".join(state.value for state in list(VmState)[:-1])
        + f" or {list(VmState)[-1].value} (without it, deleted instances are left out).",
        enum=tuple(state.value for state in VmState),
    ),
    Param(
        "host",
        "string",
        "Only instances on this agent (admins: policy ringfleet:instance:show:host).",
        pattern=HOST_PATTERN,
    ),
    Param(
        "all_projects",
        "boolean",
        "Every project's instances, not only the caller's (admins).",
        min_version=TENANCY,
    ),
    Param(
        "project_id",
        "string",
        "Only this project's instances (admins).",
        min_version=TENANCY,
        pattern=PROJECT_PATTERN,
    ),
)

#: Nova's filters and sort order (microversion 1.10).
NOVA_FILTERS = (
    Param(
        "name",
        "string",
        "Only instances whose name matches this regular expression (as Nova's, matched by "
        "the database: PostgreSQL's ~, MySQL's and MariaDB's REGEXP).",
        min_version=NOVA_LISTING,
        format="regex",
        # The text rule: no control character (but tab, line feed, carriage return).
        pattern="^[^\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f]{1,255}$",
    ),
    Param(
        "status",
        "string",
        "Only instances showing this Nova status (any case).",
        min_version=NOVA_LISTING,
        enum=STATUSES,
    ),
    Param(
        "changes-since",
        "string",
        "Only instances changed at or after this instant (ISO 8601; UTC without a zone); "
        "deleted instances included, as Nova lists its recently deleted ones.",
        min_version=NOVA_LISTING,
        format="date-time",
    ),
    Param(
        "sort_key",
        "string",
        "Sort by this key, then by uuid (default: uuid).",
        min_version=NOVA_LISTING,
        enum=tuple(SORT_KEYS),
    ),
    Param(
        "sort_dir",
        "string",
        "asc or desc (default desc with a sort_key, as Nova; asc without).",
        min_version=NOVA_LISTING,
        enum=SORT_DIRS,
    ),
)
#: A tag filter's values: 1 to 50 tags, comma-separated, each of 1 to 60
#: characters without "/" (nor a control character but tab, line feed, carriage return).
_TAG = "[^,/\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f]{1,60}"
TAG_LIST_PATTERN = f"^{_TAG}(,{_TAG}){{0,49}}$"
#: Nova's tag filters (microversion 1.13; Nova's 2.26).
TAG_FILTER_PARAMS = tuple(
    Param(name, "string", what, min_version=NOVA_HABITS, pattern=TAG_LIST_PATTERN)
    for name, what in (
        ("tags", "Only instances with every one of these tags (comma-separated)."),
        ("tags-any", "Only instances with at least one of these tags (comma-separated)."),
        (
            "not-tags",
            "Leave out the instances with every one of these tags (comma-separated): "
            "those without at least one of them are listed.",
        ),
        ("not-tags-any", "Only instances with none of these tags (comma-separated)."),
    )
)
#: The RPC arguments of :data:`NOVA_FILTERS` and the tag filters, by query parameter.
_NOVA_ARGUMENTS = {"changes-since": "changes_since"} | {
    parameter: argument for argument, parameter in TAG_FILTERS.items()
}

#: What an instance shows from 1.2 (TENANCY) on.
_TENANCY_FIELDS = ("project_id", "user_id")
#: What an instance shows from each later microversion on.
_FIELDS_SINCE = ((KEY_PAIRS, ("key_name",)), (LABELS, ("metadata", "tags")))

#: Nova's limit of a base64-encoded ``user_data`` (its schema's maxLength).
MAX_USER_DATA_BASE64 = 65535

ALL_PROJECTS_RULE = "ringfleet:instance:list:all_projects"
#: Who sees where an instance runs (Nova's ``os_compute_api:os-extended-server-attributes``).
HOST_RULE = "ringfleet:instance:show:host"
#: What an instance shows only to those :data:`HOST_RULE` allows: the agent and
#: the nodes are the fleet's, not a project's, as Nova's hosts and hypervisors.
HOST_FIELDS = ("host", "node_uuid", "tried_nodes")

#: What a rebuild may replace (microversion 1.4), as a build request has them.
REBUILD_FIELDS = ("image", "user_data", "meta_data", "network_data")

#: A rebuild's key pair (microversion 1.13; Nova's 2.54): a name, or null for none.
REBUILD_KEY = "key_name"

#: Nova's names for what ringfleet's rebuild takes otherwise: said in the refusal.
_NOVA_REBUILD_NAMES = {
    "imageRef": "image (an object with source, checksum and disk_format)",
    "key_name": "meta_data.public_keys (key_name since microversion 1.13)",
    "metadata": "meta_data.meta",
}

#: The instance actions by their body's key (the verb table's), each with its
#: verbs: one, or one per ``type`` (reboot's SOFT and HARD).
_ACTIONS: Mapping[str, tuple[verbs.Verb, ...]] = {
    key: tuple(verb for verb in verbs.ACTIONS if verb.http.action == key)
    for key in dict.fromkeys(verb.http.action for verb in verbs.ACTIONS if verb.http.action)
}

#: The actions whose body is an object of fields (the others take null, or a type).
_OBJECT_ACTIONS: Mapping[str, dict[str, Any]] = {
    "rebuild": {
        "type": "object",
        "description": "Each field given replaces the instance's stored one (since "
        "microversion 1.4; before it, only {}); the others are kept.",
        "properties": {key: schemas.BUILD_REQUEST.properties[key] for key in REBUILD_FIELDS}
        | {
            REBUILD_KEY: {
                **schemas.KEY_NAME_SCHEMA,
                "type": ["string", "null"],
                "description": "A key pair of the caller's replaces the instance's (its "
                "key_name, and its public key in the config drive's meta_data public_keys), "
                "as Nova's rebuild since its 2.54; null: the instance keeps none. Since "
                "microversion 1.13.",
            }
        },
        "additionalProperties": False,
    }
}


def _types(key: str) -> tuple[str, ...]:
    """The ``type`` values an action takes (none: it takes null or an object)."""
    return tuple(verb.http.action_type for verb in _ACTIONS[key] if verb.http.action_type)


def _action_schema(key: str) -> dict[str, Any]:
    if key in _OBJECT_ACTIONS:
        return _OBJECT_ACTIONS[key]
    if _types(key):
        return {
            "type": "object",
            "properties": {"type": {"type": "string", "enum": list(_types(key))}},
            "required": ["type"],
            "additionalProperties": False,
        }
    return {"type": "null"}


def _action_example(key: str) -> str:
    if key in _OBJECT_ACTIONS:
        return f'{{"{key}": {{...}}}}'
    if _types(key):
        return f'{{"{key}": {{"type": ' + "|".join(f'"{t}"' for t in _types(key)) + "}}"
    return f'{{"{key}": null}}'


_EXAMPLES = [_action_example(key) for key in _ACTIONS]

INSTANCE_ACTION = Resource(
    name="InstanceAction",
    description=(
        f"One action, Nova style: {', '.join(_EXAMPLES[:-1])} or {_EXAMPLES[-1]}: the "
        "instance redeployed on its node, with its own image and config drive, "
        "or (since microversion 1.4) a new image and/or config drive parts."
    ),
    properties={key: _action_schema(key) for key in _ACTIONS},
    null_means_absent=False,
)


def _shown(call: Call, instance: dict[str, Any]) -> dict[str, Any]:
    """An instance as the request's microversion and the caller's policy show it."""
    hidden: tuple[str, ...] = () if call.version >= TENANCY else _TENANCY_FIELDS
    for since, fields in _FIELDS_SINCE:
        if call.version < since:
            hidden = (*hidden, *fields)
    if not call.allowed(HOST_RULE):
        hidden = (*hidden, *HOST_FIELDS)
    hidden = tuple(key for key in hidden if key in instance)
    shown = {k: v for k, v in instance.items() if k not in hidden} if hidden else instance
    if call.version >= NOVA_LISTING and "vm_state" in instance:
        drive = instance.get("config_drive") or {}
        shown = shown | {
            "status": status_of(instance["vm_state"], instance.get("task_state")),
            "addresses": addresses_of(drive.get("network_data")),
        }
    return shown


def build_instances(call: Call) -> Reply:
    """202 with the instances as stored.  With ``instance_uuids`` a retry of
    the same request is safe: the conductor then returns the stored
    instances as they are now (and a different request reusing one of the
    uuids is 409)."""
    body = call.body
    if call.version >= USER_DATA_BASE64 and body.get("user_data") is not None:
        body = {**body, "user_data": decoded_user_data(body["user_data"], "user_data")}
    instances = [_shown(call, i) for i in call.api.build_instances(body)]
    return Reply(202, {"instances": instances}, _location(call, instances))


def decoded_user_data(value: Any, field: str) -> str:
    """The text of a base64-encoded ``user_data`` (microversion 1.7), as Nova
    takes it: line breaks and spaces in the encoding are ignored.

    The config drive carries text (cloud-init's scripts and cloud-config),
    so the decoded bytes must be UTF-8.

    :raises ApiError: 400 naming ``field``; the value is never shown (user
        data may hold secrets)
    """
    if not isinstance(value, str):
        raise ApiError.invalid(field, "must be a base64-encoded string")
    if len(value) > MAX_USER_DATA_BASE64:
        raise ApiError.invalid(
            field, f"must be at most {MAX_USER_DATA_BASE64} characters base64-encoded"
        )
    try:
        raw = base64.b64decode("".join(value.split()), validate=True)
    except (binascii.Error, ValueError):
        raise ApiError.invalid(
            field,
            "is not valid base64 (since microversion 1.7 user_data is base64-encoded, as "
            "in Nova's API)",
        ) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError.invalid(field, "must be UTF-8 text once base64-decoded") from None


def _location(call: Call, instances: list[dict[str, Any]]) -> dict[str, str]:
    if len(instances) != 1:
        return {}
    return {"Location": f"{call.base_url}/v1/instances/{instances[0]['uuid']}"}


def list_instances(call: Call) -> Reply:
    limit = page_limit(call)
    all_projects = call.query.get("all_projects", False)
    project_id = call.query.get("project_id")
    if (all_projects or project_id is not None) and not call.allowed(ALL_PROJECTS_RULE):
        raise ApiError(403, "ringfleet.forbidden", f"policy does not allow {ALL_PROJECTS_RULE}")
    if call.query.get("host") is not None and not call.allowed(HOST_RULE):
        # A filter by host would tell where the caller's instances run.
        raise ApiError(
            403,
            "ringfleet.forbidden",
            f"host: policy does not allow {HOST_RULE}",
            fields=[{"field": "host", "reason": f"policy does not allow {HOST_RULE}"}],
        )
    scope: dict[str, Any] = {}
    if all_projects or project_id is not None:
        scope = {"all_projects": all_projects, "project_id": project_id}
    nova = {
        _NOVA_ARGUMENTS.get(param.name, param.name): call.query[param.name]
        for param in (*NOVA_FILTERS, *TAG_FILTER_PARAMS)
        if param.name in call.query
    }
    # Checked here too: a bad one is named without a conductor call.
    check_list_filters(**nova)
    scope |= nova
    with marker_in_list(call, InstanceNotFound):
        items = call.api.list_instances(
            vm_state=call.query.get("vm_state"),
            host=call.query.get("host"),
            limit=limit,
            marker=call.query.get("marker"),
            **scope,
        )
    return page(call, "instances", [_shown(call, i) for i in items], limit)


def show_instance(call: Call) -> Reply:
    return Reply(200, _shown(call, call.api.show_instance(call.path["instance"])))


#: The delete verb's row: its route's method, path and rule.
_DELETE = verbs.BY_EVENT[Event.DELETE]


def delete_instance(call: Call) -> Reply:
    conductor_method = getattr(call.api, _DELETE.conductor_method)
    return Reply(202, _shown(call, conductor_method(call.path["instance"])))


def _done_state(verb: verbs.Verb) -> str:
    """The ``vm_state`` an instance is in once *verb* is done."""
    state = TRANSITIONS[verb.done].target.vm_state
    if state is None:  # an answer that keeps the state ends no verb
        raise ValueError(f"{verb.done.value} keeps the vm_state")
    return state.value


def instance_action(call: Call) -> Reply:
    """202 with the instance, its task state showing the action in flight.

    The body's one key picks the verb of the table (:mod:`conductor.common.verbs`),
    whose conductor method is called with the instance.
    """
    body = call.body if isinstance(call.body, dict) else {}
    if len(body) != 1:
        raise ApiError.invalid(
            "body", "exactly one action: " + ", ".join(sorted(INSTANCE_ACTION.fields))
        )
    [(action, value)] = body.items()
    arguments: dict[str, Any] = {}
    if action == "rebuild":
        verb, arguments = _ACTIONS[action][0], _rebuild_arguments(call, value)
    elif _types(action):
        verb = _typed_verb(action, value)
    else:
        if value is not None:
            raise ApiError.invalid(action, "must be null", value)
        verb = _ACTIONS[action][0]
    conductor_method = getattr(call.api, verb.conductor_method)
    instance = call.path["instance"]
    shown = conductor_method(instance, **verb.conductor_arguments, **arguments)
    return Reply(202, _shown(call, shown))


def _typed_verb(action: str, value: Any) -> verbs.Verb:
    """The verb of an action with a type (``{"reboot": {"type": "HARD"}}``)."""
    if not isinstance(value, dict) or set(value) != {"type"}:
        quoted = " or ".join(f'"{kind}"' for kind in _types(action))
        raise ApiError.invalid(action, f'must be {{"type": {quoted}}}', value)
    kind = value["type"]
    for verb in _ACTIONS[action]:
        if isinstance(kind, str) and kind.upper() == verb.http.action_type:
            return verb
    raise ApiError.invalid(f"{action}.type", "must be " + " or ".join(_types(action)), kind)


def _rebuild_arguments(call: Call, value: Any) -> dict[str, Any]:
    """What a rebuild replaces: the fields given (the conductor checks them as
    a build's, naming e.g. image.source)."""
    if not isinstance(value, dict):
        raise ApiError.invalid("rebuild", "must be an object", value)
    fields = (*REBUILD_FIELDS, REBUILD_KEY) if call.version >= NOVA_HABITS else REBUILD_FIELDS
    for key in sorted(value):
        if key not in fields:
            hint = _NOVA_REBUILD_NAMES.get(key, ", ".join(fields))
            # The value is not shown: an unknown key may be a misspelt user_data.
            raise ApiError.invalid(f"rebuild.{key[:100]}", f"unknown field; use {hint}")
    given = {key: item for key, item in value.items() if item is not None}
    if REBUILD_KEY in value and value[REBUILD_KEY] is None:
        given[REBUILD_KEY] = ""  # Nova's null: no key pair (the conductor's "")
    if call.version >= USER_DATA_BASE64 and "user_data" in given:
        given["user_data"] = decoded_user_data(given["user_data"], "rebuild.user_data")
    if given and call.version < REBUILD_IMAGE:
        # An older client's rebuild redeploys the instance's own image.
        raise ApiError.invalid(
            f"rebuild.{min(given)}",
            f"needs microversion {REBUILD_IMAGE} or later "
            f"(this request is {call.version}); under it a rebuild takes {{}}",
        )
    return given


#: The build request fields of microversion 1.1: an image and a config drive.
_IMAGE_FIELDS = dict.fromkeys(
    ("image", "user_data", "meta_data", "network_data"), microversion.IMAGES
) | {"key_name": KEY_PAIRS, "metadata": LABELS, "tags": LABELS}

INSTANCE_ROUTES: tuple[Route, ...] = (
    Route(
        "GET",
        "/v1/instances",
        list_instances,
        "ringfleet:instance:list",
        "listInstances",
        "List instances, in uuid order (or sort_key's), a page at a time.",
        query=(*INSTANCE_FILTERS, *NOVA_FILTERS, *TAG_FILTER_PARAMS, LIMIT, MARKER),
        response="InstanceList",
        errors=(E400, E404, E503),
        tag="instances",
        description="Since 1.10 instances show Nova's status and addresses, and the list "
        "takes Nova's name, status, changes-since, sort_key and sort_dir; a bad one is 400 "
        "naming it. The marker is the uuid of the previous page's last instance; with a "
        "sort_key it must be an instance of the caller's list (else 400 naming marker, as "
        "Nova's, since 1.14; 404 below), and the next page starts after its (key, uuid). "
        "Since 1.13 Nova's tag filters: tags (every one), tags-any (one at least), "
        "not-tags (not every one), not-tags-any (none), each a comma-separated list; "
        "given together, an instance must pass each.",
    ),
    Route(
        "POST",
        "/v1/instances",
        build_instances,
        "ringfleet:instance:create",
        "buildInstances",
        "Build instances of a flavor; answers at once (202).",
        status=202,
        body="BuildRequest",
        response="InstanceList",
        errors=(E400, E404, E409, E503),
        tag="instances",
        description="Give instance_uuids to make retries safe: a retry of the "
        "same request (same uuids, flavor, group, name, hints) answers 202 with the "
        "stored instances as they are now and builds nothing; another request "
        "reusing one of the uuids is 409, the same answer whoever holds the uuid (another "
        "project's instance is never named nor returned). Location is set when one instance "
        "is built. "
        "Since 1.1 a build may carry an image and a config drive (user_data, meta_data, "
        "network_data); without an image it gets its flavor's default_image, if any. "
        "Since 1.7 user_data is base64-encoded (as in Nova's API; at most 65535 characters "
        "encoded, UTF-8 text once decoded), before it the raw text. Since 1.8 key_name "
        "names a key pair of the caller's (its public key goes into meta_data "
        "public_keys); since 1.9 metadata and tags label the instances. "
        "The instances belong to the caller's project; a build that would take it over "
        "a quota is 403 ringfleet.quota_exceeded ('Quota exceeded for instances: "
        "Requested 3, but already used 9 of 10 instances') and stores nothing.",
        fields_since=_IMAGE_FIELDS,
    ),
    Route(
        "GET",
        "/v1/instances/{instance}",
        show_instance,
        "ringfleet:instance:list",
        "showInstance",
        "Show an instance (poll it until vm_state is active or error).",
        response="Instance",
        errors=(E400, E404, E503),
        tag="instances",
        description="Another project's instance is 404, unless the caller is an admin.",
    ),
    Route(
        _DELETE.http.method,
        _DELETE.http.path,
        delete_instance,
        _DELETE.policy_rule,
        "deleteInstance",
        "Start deleting an instance (idempotent).",
        status=202,
        response="Instance",
        errors=(E400, E404, E503),
        tag="instances",
        description="Another project's instance is 404, unless the caller is an admin. "
        "The instance counts against its project's quotas until it is deleted.",
    ),
    Route(
        "POST",
        verbs.ACTION_PATH,
        instance_action,
        verbs.ACTION_RULE,
        "instanceAction",
        f"{verbs.action_names()} an instance (Nova-style body); answers at once (202).",
        status=202,
        body=INSTANCE_ACTION.name,
        response="Instance",
        envelope=INSTANCE_ACTION,
        errors=(E400, E404, E409, E503),
        min_version=VERBS_VERSION,
        tag="instances",
        description=(
            "The instance's task_state shows the action in flight ("
            + ", ".join(verb.task_state.value for verb in verbs.ACTIONS)
            + "); vm_state is "
            + " or ".join(dict.fromkeys(_done_state(verb) for verb in verbs.ACTIONS))
            + " when it is done. 409 names the state that does not allow the action. "
            "Issuing the same action again while it is in flight routes it anew (the "
            "way out of an action fleet check reports stuck). Since microversion 1.4 a "
            "rebuild takes a new image and/or config drive parts (user_data, meta_data, "
            "network_data), checked as a build's and stored with the rebuild (each "
            "given replaces the stored one, the others are kept); a rebuild in flight "
            "issued again with different ones is a 409 until it is over."
        ),
    ),
)
