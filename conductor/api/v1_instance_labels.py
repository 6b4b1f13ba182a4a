# SPDX-License-Identifier: Apache-2.0
"""API v1's instance metadata and tags (microversion 1.9): Nova's server metadata and tags.

The paths, bodies and answers are Nova's
(``/servers/{id}/metadata[/{key}]``, ``/servers/{id}/tags[/{tag}]``) under
``/v1/instances/{instance}``.  Who sees the instance sees its labels
(another project's instance is 404); they change while it is active or
stopped with no action in flight (otherwise 409, as Nova's).
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from conductor.api.app import E400, E404, E409, E503, ApiError, Call, Reply, Route
from conductor.api.microversion import LABELS
from conductor.common.schemas import METADATA_SCHEMA, TAGS_SCHEMA, Resource

__all__ = ["LABEL_ROUTES", "METADATA_BODY", "META_BODY", "TAGS_BODY"]

_METADATA = "/v1/instances/{instance}/metadata"
_TAGS = "/v1/instances/{instance}/tags"

METADATA_BODY = Resource(
    name="InstanceMetadata",
    description="Nova's server metadata: keys of letters, digits, '-_:.' and spaces "
    "(1 to 255), values strings of at most 255; at most 128 keys.",
    properties={"metadata": METADATA_SCHEMA},
    required=frozenset({"metadata"}),
    null_means_absent=False,
)
META_BODY = Resource(
    name="InstanceMetadataItem",
    description="One metadata key, the one of the path, and its value (Nova's 'meta').",
    properties={"meta": {**METADATA_SCHEMA, "minProperties": 1, "maxProperties": 1}},
    required=frozenset({"meta"}),
    null_means_absent=False,
)
TAGS_BODY = Resource(
    name="InstanceTags",
    description="Nova's server tags: 1 to 60 characters without ',' or '/', at most 50.",
    properties={"tags": TAGS_SCHEMA},
    required=frozenset({"tags"}),
    null_means_absent=False,
)


def _instance(call: Call) -> str:
    return call.path["instance"]


def list_metadata(call: Call) -> Reply:
    return Reply(200, {"metadata": call.api.get_instance_metadata(_instance(call))})


def _set_metadata(call: Call, replace: bool) -> Reply:
    stored = call.api.set_instance_metadata(_instance(call), call.body["metadata"], replace)
    return Reply(200, {"metadata": stored})


def replace_metadata(call: Call) -> Reply:
    return _set_metadata(call, replace=True)


def update_metadata(call: Call) -> Reply:
    return _set_metadata(call, replace=False)


def show_metadata_item(call: Call) -> Reply:
    key = call.path["key"]
    metadata = call.api.get_instance_metadata(_instance(call))
    if key not in metadata:
        raise ApiError(404, "ringfleet.not_found", "metadata item was not found")
    return Reply(200, {"meta": {key: metadata[key]}})


def set_metadata_item(call: Call) -> Reply:
    key = call.path["key"]
    meta: Any = call.body["meta"]
    if not isinstance(meta, dict) or len(meta) != 1:
        raise ApiError.invalid("meta", "must hold exactly one key, the path's")
    if key not in meta:
        # Nova's answer: "Request body and URI mismatch".
        raise ApiError.invalid("meta", "request body and URI mismatch: the key is the path's")
    call.api.set_instance_metadata(_instance(call), meta, False)
    return Reply(200, {"meta": meta})


def delete_metadata_item(call: Call) -> Reply:
    call.api.delete_instance_metadata(_instance(call), call.path["key"])
    return Reply(204)


def list_tags(call: Call) -> Reply:
    return Reply(200, {"tags": call.api.get_instance_tags(_instance(call))})


def replace_tags(call: Call) -> Reply:
    return Reply(200, {"tags": call.api.set_instance_tags(_instance(call), call.body["tags"])})


def delete_tags(call: Call) -> Reply:
    call.api.set_instance_tags(_instance(call), [])
    return Reply(204)


def check_tag(call: Call) -> Reply:
    if call.path["tag"] not in call.api.get_instance_tags(_instance(call)):
        raise ApiError(404, "ringfleet.not_found", "the instance has no such tag")
    return Reply(204)


def add_tag(call: Call) -> Reply:
    """201 with Location when the tag is new, 204 when the instance had it (Nova's)."""
    tag = call.path["tag"]
    if not call.api.add_instance_tag(_instance(call), tag):
        return Reply(204)
    path = f"{_instance(call)}/tags/{urllib.parse.quote(tag, safe='')}"
    return Reply(201, None, {"Location": f"{call.base_url}/v1/instances/{path}"})


def delete_tag(call: Call) -> Reply:
    call.api.delete_instance_tag(_instance(call), call.path["tag"])
    return Reply(204)


_SEES = "Another project's instance is 404, unless the caller is an admin."
_CHANGES = (
    "The instance must be active or stopped with no action in flight (else 409 naming "
    "its state), as Nova's. " + _SEES
)


def _route(  # noqa: PLR0917 -- a table row of Nova's routes, read in order
    method: str, path: str, handler: Any, write: bool, operation: str, summary: str, **extra: Any
) -> Route:
    kind = "tags" if path.startswith(_TAGS) else "metadata"
    return Route(
        method,
        path,
        handler,
        f"ringfleet:instance:{kind}:{'update' if write else 'list'}",
        operation,
        summary,
        errors=(E400, E404, E409, E503) if write else (E400, E404, E503),
        min_version=LABELS,
        tag="instances",
        description=_CHANGES if write else _SEES,
        **extra,
    )


LABEL_ROUTES: tuple[Route, ...] = (
    _route(
        "GET",
        _METADATA,
        list_metadata,
        False,
        "listInstanceMetadata",
        "Show an instance's metadata (Nova's server metadata).",
        response="InstanceMetadata",
    ),
    _route(
        "PUT",
        _METADATA,
        replace_metadata,
        True,
        "replaceInstanceMetadata",
        "Replace all of an instance's metadata.",
        body=METADATA_BODY.name,
        envelope=METADATA_BODY,
        response="InstanceMetadata",
    ),
    _route(
        "POST",
        _METADATA,
        update_metadata,
        True,
        "updateInstanceMetadata",
        "Set some keys of an instance's metadata (the others are kept).",
        body=METADATA_BODY.name,
        envelope=METADATA_BODY,
        response="InstanceMetadata",
    ),
    _route(
        "GET",
        _METADATA + "/{key}",
        show_metadata_item,
        False,
        "showInstanceMetadataItem",
        "Show one key of an instance's metadata.",
        response="InstanceMetadataItem",
    ),
    _route(
        "PUT",
        _METADATA + "/{key}",
        set_metadata_item,
        True,
        "setInstanceMetadataItem",
        "Set one key of an instance's metadata.",
        body=META_BODY.name,
        envelope=META_BODY,
        response="InstanceMetadataItem",
    ),
    _route(
        "DELETE",
        _METADATA + "/{key}",
        delete_metadata_item,
        True,
        "deleteInstanceMetadataItem",
        "Delete one key of an instance's metadata.",
        status=204,
    ),
    _route(
        "GET",
        _TAGS,
        list_tags,
        False,
        "listInstanceTags",
        "List an instance's tags (Nova's server tags).",
        response="InstanceTags",
    ),
    _route(
        "PUT",
        _TAGS,
        replace_tags,
        True,
        "replaceInstanceTags",
        "Replace all of an instance's tags.",
        body=TAGS_BODY.name,
        envelope=TAGS_BODY,
        response="InstanceTags",
    ),
    _route(
        "DELETE",
        _TAGS,
        delete_tags,
        True,
        "deleteInstanceTags",
        "Delete all of an instance's tags.",
        status=204,
    ),
    _route(
        "GET",
        _TAGS + "/{tag}",
        check_tag,
        False,
        "checkInstanceTag",
        "Whether an instance has a tag: 204, or 404.",
        status=204,
    ),
    _route(
        "PUT",
        _TAGS + "/{tag}",
        add_tag,
        True,
        "addInstanceTag",
        "Tag an instance: 201 (with Location) if new, 204 if it had the tag.",
        status=201,
        other_statuses=(204,),
    ),
    _route(
        "DELETE",
        _TAGS + "/{tag}",
        delete_tag,
        True,
        "deleteInstanceTag",
        "Remove a tag from an instance (404 if it has none such).",
        status=204,
    ),
)
