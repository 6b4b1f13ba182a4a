# SPDX-License-Identifier: Apache-2.0
"""Every item of a paged list call of the conductor API, page after page.

It needs neither oslo.messaging nor HTTP: the same loop reads the RPC client
(:class:`conductor.rpcapi.ConductorAPI`, which re-exports :func:`pages`) and
the CLI's HTTP client, so it lives apart from both and a command importing
it starts without oslo.messaging.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["pages"]


def pages(
    fetch: Callable[[int, str | None], list[dict[str, Any]]],
    limit: int | None = None,
    page_size: int = 1000,
) -> Iterator[dict[str, Any]]:
    """Every item of a paged list call, in pages of ``page_size``, at most ``limit``.

    ``fetch(limit, marker)`` is one call, e.g.
    ``lambda n, m: api.list_nodes(limit=n, marker=m)``; the marker is the
    last item's uuid.
    """
    marker: str | None = None
    left = limit
    while left is None or left > 0:
        size = page_size if left is None else min(page_size, left)
        page = fetch(size, marker)
        yield from page
        if len(page) < size:
            return
        if left is not None:
            left -= len(page)
        marker = page[-1]["uuid"]
