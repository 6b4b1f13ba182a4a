# SPDX-License-Identifier: Apache-2.0
"""API v1's lists, a page at a time: the ``limit`` and ``marker`` parameters
and the ``next`` link of a full page."""

from __future__ import annotations

import urllib.parse
from typing import Any

from conductor.api.app import Call, Param, Reply

__all__ = ["LIMIT", "MARKER", "page", "page_limit"]

LIMIT = Param(
    "limit",
    "integer",
    "At most this many items (capped to [api] max_limit).",
    minimum=1,
    # Nine digits at most (the query's own check).
    maximum=999_999_999,
)

MARKER = Param("marker", "string", "The uuid of the last item of the previous page.", format="uuid")


def page(
    call: Call, key: str, items: list[dict[str, Any]], limit: int, marker_key: str = "uuid"
) -> Reply:
    """A list reply with a ``next`` link when the page is full (its marker
    the last item's ``marker_key``)."""
    body: dict[str, Any] = {key: items}
    if len(items) >= limit and items:
        query = {k: _text(v) for k, v in call.query.items() if k != "marker"}
        query["limit"] = str(limit)
        query["marker"] = items[-1][marker_key]
        body["next"] = f"{call.base_url}{call.request.path_info}?{urllib.parse.urlencode(query)}"
    return Reply(200, body)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def page_limit(call: Call) -> int:
    return min(int(call.query.get("limit", call.max_limit)), call.max_limit)
