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

from conductor.api.app import E400, E404, E409, E503, ApiError, Call, Reply, Route
from conductor.api.microversion import KEY_PAIRS
from conductor.common.schemas import KEY_NAME_SCHEMA, Resource

__all__ = ["KEYPAIR_CREATE", "KEYPAIR_ROUTES"]

#: What a creation's ``keypair`` may hold: Nova's fields (``type`` ssh only).
_CREATE_FIELDS = ("name", "public_key", "type")

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
    for key in sorted(keypair):
        if key not in _CREATE_FIELDS:
            raise ApiError.invalid(
                f"keypair.{key[:100]}", "unknown field; use " + ", ".join(_CREATE_FIELDS)
            )
    if keypair.get("type", "ssh") != "ssh":
        # Nova's x509 keys are for Windows guests' certificates: not served.
        raise ApiError.invalid("keypair.type", "must be ssh", keypair.get("type"))
    return keypair


def create_keypair(call: Call) -> Reply:
    keypair = _keypair_body(call)
    # A missing name is the conductor's to refuse (named, with the other fields' problems).
    created = call.api.create_keypair(keypair.get("name", ""), keypair.get("public_key"))
    location = f"{call.base_url}/v1/keypairs/{urllib.parse.quote(created['name'], safe='')}"
    return Reply(201, {"keypair": created}, {"Location": location})


def list_keypairs(call: Call) -> Reply:
    return Reply(200, {"keypairs": [{"keypair": k} for k in call.api.list_keypairs()]})


def show_keypair(call: Call) -> Reply:
    return Reply(200, {"keypair": call.api.show_keypair(call.path["keypair"])})


def delete_keypair(call: Call) -> Reply:
    call.api.delete_keypair(call.path["keypair"])
    return Reply(204)


_KEYS_DESCRIPTION = (
    "Key pairs are the caller's user's own, as Nova keys them: another user's, even of "
    "the same project, is not seen (404)."
)

KEYPAIR_ROUTES: tuple[Route, ...] = (
    Route(
        "GET",
        "/v1/keypairs",
        list_keypairs,
        "ringfleet:keypair:list",
        "listKeyPairs",
        "List the caller's key pairs (Nova's os-keypairs).",
        response="KeyPairList",
        errors=(E400, E404, E503),
        min_version=KEY_PAIRS,
        tag="keypairs",
        description=_KEYS_DESCRIPTION,
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
        status=204,
        errors=(E400, E404, E503),
        min_version=KEY_PAIRS,
        tag="keypairs",
        description=_KEYS_DESCRIPTION,
    ),
)
