# SPDX-License-Identifier: Apache-2.0
"""API v1's flavors: create, list, show and delete them."""

from __future__ import annotations

import urllib.parse

from conductor.api import microversion
from conductor.api.app import E400, E404, E409, E503, ApiError, Call, Reply, Route
from conductor.api.microversion import ANY_EXTRA_SPECS
from conductor.common.schemas import CAPABILITIES_SCOPE, TRAIT_SCOPE

__all__ = ["FLAVOR_ROUTES"]


def _quote(value: str) -> str:
    return urllib.parse.quote(value, safe="")


def list_flavors(call: Call) -> Reply:
    return Reply(200, {"flavors": call.api.list_flavors()})


def show_flavor(call: Call) -> Reply:
    return Reply(200, call.api.show_flavor(call.path["flavor"]))


def create_flavor(call: Call) -> Reply:
    if call.version < ANY_EXTRA_SPECS:
        _refuse_other_extra_specs(call)
    flavor = call.api.create_flavor(call.body)
    location = f"{call.base_url}/v1/flavors/{_quote(flavor['name'])}"
    return Reply(201, flavor, {"Location": location})


def _refuse_other_extra_specs(call: Call) -> None:
    """Before 1.5 a flavor's extra specs are ``capabilities:`` and ``trait:`` ones only."""
    body = call.body
    specs = body.get("extra_specs") if isinstance(body, dict) else None
    if not isinstance(specs, dict):
        return  # the conductor's validation names what is wrong with it
    for key in sorted(k for k in specs if isinstance(k, str)):
        if not key.startswith((CAPABILITIES_SCOPE, TRAIT_SCOPE)):
            raise ApiError.invalid(
                f"extra_specs.{key[:100]}",
                "unknown extra spec (use 'capabilities:<key>' or 'trait:<TRAIT>'); "
                f"other namespaces need microversion {ANY_EXTRA_SPECS} or later "
                f"(this request is {call.version})",
            )


def delete_flavor(call: Call) -> Reply:
    call.api.delete_flavor(call.path["flavor"])
    return Reply(204)


FLAVOR_ROUTES: tuple[Route, ...] = (
    Route(
        "GET",
        "/v1/flavors",
        list_flavors,
        "ringfleet:flavor:list",
        "listFlavors",
        "List flavors.",
        response="FlavorList",
        errors=(E503,),
        tag="flavors",
    ),
    Route(
        "POST",
        "/v1/flavors",
        create_flavor,
        "ringfleet:flavor:create",
        "createFlavor",
        "Create a flavor.",
        status=201,
        body="FlavorSpec",
        response="Flavor",
        errors=(E400, E409, E503),
        tag="flavors",
        fields_since={"default_image": microversion.IMAGES},
    ),
    Route(
        "GET",
        "/v1/flavors/{flavor}",
        show_flavor,
        "ringfleet:flavor:list",
        "showFlavor",
        "Show a flavor.",
        response="Flavor",
        errors=(E400, E404, E503),
        tag="flavors",
    ),
    Route(
        "DELETE",
        "/v1/flavors/{flavor}",
        delete_flavor,
        "ringfleet:flavor:delete",
        "deleteFlavor",
        "Delete a flavor.",
        status=204,
        errors=(E400, E404, E409, E503),
        tag="flavors",
    ),
)
