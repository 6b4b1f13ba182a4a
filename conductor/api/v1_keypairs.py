# SPDX-License-Identifier: Apache-2.0
"""API v1's key pairs (microversion 1.8): Nova's ``os-keypairs``, the caller's user's own.

The bodies are Nova's: ``{"keypair": {"name": ..., "public_key": ...}}`` to
create (without ``public_key`` a key is generated, and the reply's
``private_key`` is the only copy), ``{"keypair": {...}}`` shown,
``{"keypairs": [{"keypair": {...}}, ...]}`` listed.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from conductor.api import auth
from conductor.api.app import E400, E404, E409, E503, ApiError, Call, Param, Reply, Route
from conductor.api.microversion import KEY_PAIRS, NOVA_ANSWERS
from conductor.api.v1_paging import page, page_limit
from conductor.common.schemas import KEY_NAME_SCHEMA, PROJECT_ID_PATTERN, Resource

__all__ = ["KEYPAIR_CREATE", "KEYPAIR_OTHER_USER_RULE", "KEYPAIR_ROUTES"]

#: What a creation's ``keypair`` may hold: Nova's fields (``type`` ssh only),
#: and since 1.14 ``user_id``.
_CREATE_FIELDS = ("name", "public_key", "type")
_USER_ID = "user_id"

#: Who may reach another user's key pairs (``user_id``; Nova's 2.10, whose
#: rules let an admin, or the user named, through).
KEYPAIR_OTHER_USER_RULE = "ringfleet:keypair:other_user"

_USER_PARAM = Param(
    _USER_ID,
    "string",
    "Another user's key pairs (admins: policy ringfleet:keypair:other_user); the "
    "caller's own user id is always taken.",
    min_version=NOVA_ANSWERS,
    pattern=PROJECT_ID_PATTERN,
)
_PAGING = (
    Param(
        "limit",
        "integer",
        "At most this many key pairs (capped to [api] max_limit); a full page has a next link.",
        minimum=1,
        maximum=999_999_999,
        min_version=NOVA_ANSWERS,
    ),
    Param(
        "marker",
        "string",
        "The name of the previous page's last key pair (one the user does not have: 400).",
        min_version=NOVA_ANSWERS,
        # KEY_NAME_SCHEMA's names: 1 to 255 characters, no space first or last.
        pattern=r"^[_\-@.a-zA-Z0-9]([_\-@. a-zA-Z0-9]{0,253}[_\-@.a-zA-Z0-9])?$",
    ),
)

KEYPAIR_CREATE = Resource(
    name="KeyPairCreate",
    description="Nova's os-keypairs creation: a name and an OpenSSH public key, or no "
    "public_key to have one generated (its private_key is in the reply, and kept nowhere).",
    properties={
        "keypair": {
            "type": "object",
            "properties": {
                "name": KEY_NAME_SCHEMA,
                "public_key": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 16384,
                    # Not a JSON Schema format: the key must parse (x-rules).
                    "format": "ssh-public-key",
                    "description": "An OpenSSH public key line: 'ssh-ed25519 AAAA... me@host'.",
                },
                "type": {"type": "string", "enum": ["ssh"]},
                _USER_ID: {
                    "type": "string",
                    "pattern": PROJECT_ID_PATTERN,
                    "x-min-version": str(NOVA_ANSWERS),
                    "description": "The user the key pair is for (admins: policy "
                    "ringfleet:keypair:other_user; Nova's 2.10).",
                },
            },
            "required": ["name"],
            "additionalProperties": False,
        }
    },
    required=frozenset({"keypair"}),
    null_means_absent=False,
)


def _keypair_body(call: Call) -> dict[str, Any]:
    """The body's ``keypair``, its keys checked (its values are the conductor's)."""
    keypair = call.body["keypair"]
    if not isinstance(keypair, dict):
        raise ApiError.invalid("keypair", "must be an object")
    fields = (*_CREATE_FIELDS, _USER_ID) if call.version >= NOVA_ANSWERS else _CREATE_FIELDS
    for key in sorted(keypair):
        if key not in fields:
            raise ApiError.invalid(
                f"keypair.{key[:100]}", "unknown field; use " + ", ".join(fields)
            )
    if keypair.get("type", "ssh") != "ssh":
        # Nova's x509 keys are for Windows guests' certificates: not served.
        raise ApiError.invalid("keypair.type", "must be ssh", keypair.get("type"))
    return keypair


def _user(call: Call, user_id: Any, field: str) -> dict[str, Any]:
    """The ``user_id`` keyword of a key pair call: none for the caller's own
    key pairs, another user's only if the policy allows it (403 naming
    *field* otherwise, before any conductor call)."""
    if user_id is None:
        return {}
    credentials = call.request.environ.get(auth.CREDENTIALS)
    if user_id != getattr(credentials, "user_id", None) and not call.allowed(
        KEYPAIR_OTHER_USER_RULE
    ):
        reason = f"policy does not allow {KEYPAIR_OTHER_USER_RULE}"
        raise ApiError(
            403,
            "ringfleet.forbidden",
            f"{field}: {reason}",
            fields=[{"field": field, "reason": reason}],
        )
    return {_USER_ID: user_id}


def _location(call: Call, keypair: dict[str, Any], user: dict[str, Any]) -> str:
    path = f"{call.base_url}/v1/keypairs/{urllib.parse.quote(keypair['name'], safe='')}"
    return f"{path}?{urllib.parse.urlencode(user)}" if user else path


def create_keypair(call: Call) -> Reply:
    keypair = _keypair_body(call)
    user = _user(call, keypair.get(_USER_ID), f"keypair.{_USER_ID}")
    # A missing name is the conductor's to refuse (named, with the other fields' problems).
    created = call.api.create_keypair(keypair.get("name", ""), keypair.get("public_key"), **user)
    return Reply(201, {"keypair": created}, {"Location": _location(call, created, user)})


def list_keypairs(call: Call) -> Reply:
    if call.version < NOVA_ANSWERS:
        return Reply(200, {"keypairs": [{"keypair": k} for k in call.api.list_keypairs()]})
    limit = page_limit(call)
    listed = call.api.list_keypairs(
        limit=limit,
        marker=call.query.get("marker"),
        **_user(call, call.query.get(_USER_ID), _USER_ID),
    )
    reply = page(call, "keypairs", listed, limit, marker_key="name")
    reply.body["keypairs"] = [{"keypair": k} for k in listed]
    return reply


def show_keypair(call: Call) -> Reply:
    user = _user(call, call.query.get(_USER_ID), _USER_ID)
    return Reply(200, {"keypair": call.api.show_keypair(call.path["keypair"], **user)})


def delete_keypair(call: Call) -> Reply:
    call.api.delete_keypair(call.path["keypair"], **_user(call, call.query.get(_USER_ID), _USER_ID))
    return Reply(204)


_KEYS_DESCRIPTION = (
    "Key pairs are the caller's user's own, as Nova keys them: another user's, even of "
    "the same project, is not seen (404). Since 1.14 an admin reaches another user's "
    "with user_id (Nova's 2.10; policy ringfleet:keypair:other_user)."
)

KEYPAIR_ROUTES: tuple[Route, ...] = (
    Route(
        "GET",
        "/v1/keypairs",
        list_keypairs,
        "ringfleet:keypair:list",
        "listKeyPairs",
        "List the caller's key pairs (Nova's os-keypairs), by name.",
        query=(_USER_PARAM, *_PAGING),
        response="KeyPairList",
        errors=(E400, E404, E503),
        min_version=KEY_PAIRS,
        tag="keypairs",
        description=_KEYS_DESCRIPTION + " Since 1.14 a page at a time, as Nova's 2.35: "
        "limit, marker (the previous page's last name; a name the user does not have is "
        "400); a full page has next, the link to the following one.",
    ),
    Route(
        "POST",
        "/v1/keypairs",
        create_keypair,
        "ringfleet:keypair:create",
        "createKeyPair",
        "Create (import or generate) a key pair of the caller's.",
        status=201,
        body=KEYPAIR_CREATE.name,
        response="KeyPairCreated",
        envelope=KEYPAIR_CREATE,
        errors=(E400, E404, E409, E503),
        min_version=KEY_PAIRS,
        tag="keypairs",
        description="With public_key (an OpenSSH line) the key is imported; without it an "
        "RSA 2048 key is generated and its private_key is in this reply only. A name the "
        "caller uses already is 409; a user's 101st key pair is 403 "
        "ringfleet.quota_exceeded (Nova's key_pairs quota, 100). " + _KEYS_DESCRIPTION,
    ),
    Route(
        "GET",
        "/v1/keypairs/{keypair}",
        show_keypair,
        "ringfleet:keypair:list",
        "showKeyPair",
        "Show a key pair of the caller's.",
        query=(_USER_PARAM,),
        response="KeyPairShown",
        errors=(E400, E404, E503),
        min_version=KEY_PAIRS,
        tag="keypairs",
        description=_KEYS_DESCRIPTION,
    ),
    Route(
        "DELETE",
        "/v1/keypairs/{keypair}",
        delete_keypair,
        "ringfleet:keypair:delete",
        "deleteKeyPair",
        "Delete a key pair of the caller's (instances built with it keep the key).",
        query=(_USER_PARAM,),
        status=204,
        errors=(E400, E404, E503),
        min_version=KEY_PAIRS,
        tag="keypairs",
        description=_KEYS_DESCRIPTION,
    ),
)
