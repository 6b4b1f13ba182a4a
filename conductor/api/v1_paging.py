# SPDX-License-Identifier: Apache-2.0
"""API v1's lists, a page at a time: the ``limit`` and ``marker`` parameters
and the ``next`` link of a full page."""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import Iterator
from typing import Any

from conductor.api.app import ApiError, Call, Param, Reply
from conductor.api.microversion import NOVA_ANSWERS
from conductor.common.exception import InvalidInput, NotFound

__all__ = ["LIMIT", "MARKER", "marker_in_list", "page", "page_limit"]

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


@contextlib.contextmanager
def marker_in_list(call: Call, missing: type[NotFound]) -> Iterator[None]:
    """Around a list's conductor call: since 1.14 a ``marker`` the conductor
    finds no *missing* of (not in the caller's list) is 400 naming
    ``marker``, as Nova answers; below 1.14 the conductor's 404 as it is."""
    marker = call.query.get("marker")
    try:
        yield
    except missing as exc:
        if call.version < NOVA_ANSWERS or marker is None or exc.ident != marker:
            raise
        raise ApiError.invalid("marker", InvalidInput.MARKER_NOT_IN_LIST, marker) from None
