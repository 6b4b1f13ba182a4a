# SPDX-License-Identifier: Apache-2.0
"""Listings that print each page as it arrives (``ringfleet node list`` of a large fleet).

A listing of 100,000 nodes is a hundred RPC calls; printing nothing until
the last one answered (and then formatting every row at once) kept an
operator waiting for minutes.  :func:`prefetched_pages` asks for the next
page while the caller prints the current one, and :class:`StreamingLister`
hands cliff a generator of rows and flushes stdout after each page:

* ``-f value`` and ``-f csv``: cliff's own formatters write row by row;
* ``-f json``: written here item by item, the same text cliff's formatter
  writes for the whole list (``--noindent`` too);
* ``-f table`` and ``-f yaml`` need every row before the first line (the
  column widths, one document): the rows are collected as before, and a
  listing of more than one page says so on stderr, naming the formats that
  stream.  ``--sort-column`` needs every row too, whatever the format.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

from cliff.columns import FormattableColumn
from cliff.lister import Lister

from conductor.cli.command import command_line

__all__ = ["STREAMED_FORMATS", "StreamingLister", "prefetched_pages", "write_json_list"]

#: output formats printed page by page
STREAMED_FORMATS = ("value", "csv", "json")

Page = list[dict[str, Any]]


def prefetched_pages(
    fetch: Callable[[int, str | None], Page], limit: int | None, page_size: int
) -> Iterator[Page]:
    """The pages of a paged list call, the next one asked for while the
    caller handles this one (one call in flight at most).

    ``fetch(size, marker)`` is one call; the marker is the last item's
    ``uuid``; at most ``limit`` items in all (``None``: every one).
    """

    def size_after(fetched: int) -> int:
        return page_size if limit is None else min(page_size, limit - fetched)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="page") as pool:
        fetched, size = 0, size_after(0)
        pending = pool.submit(fetch, size, None) if size > 0 else None
        while pending is not None:
            page = pending.result()
            fetched += len(page)
            following = size_after(fetched)
            pending = None
            if len(page) == size and following > 0:
                pending = pool.submit(fetch, following, page[-1]["uuid"])
                size = following
            yield page


def write_json_list(stream: IO[str], items: Iterable[dict[str, Any]], indent: int | None) -> None:
    """``json.dump(list(items), stream, indent=indent)`` and a newline, item by item."""
    pad = " " * (indent or 0)
    count = 0
    stream.write("[")
    for count, item in enumerate(items, 1):
        if indent is None:
            stream.write((", " if count > 1 else "") + json.dumps(item))
        else:
            text = json.dumps(item, indent=indent).replace("\n", "\n" + pad)
            stream.write(("," if count > 1 else "") + "\n" + pad + text)
    stream.write("\n]\n" if count and indent is not None else "]\n")


class StreamingLister(Lister):
    """A cliff Lister whose ``take_action`` may return rows as a generator
    of pages' rows (see :meth:`rows`); JSON output is streamed too."""

    app: Any

    def rows(
        self,
        pages: Iterable[Page],
        row: Callable[[dict[str, Any]], tuple[Any, ...]],
        parsed_args: argparse.Namespace,
    ) -> Iterator[tuple[Any, ...]]:
        """The rows of ``pages``, stdout flushed after each page, so what a
        page printed is out before the next page is waited for."""
        streamed = parsed_args.formatter in STREAMED_FORMATS and not parsed_args.sort_columns
        for number, page in enumerate(pages):
            if number == 1 and not streamed:
                self.app.stderr.write(
                    f"{command_line(self)}: more than one page: "
                    f"the output starts when every page has arrived "
                    f"(-f {', -f '.join(STREAMED_FORMATS)} print each page as it arrives)\n"
                )
                self.app.stderr.flush()
            for item in page:
                yield row(item)
            if streamed:
                self.app.stdout.flush()

    def produce_output(
        self,
        parsed_args: argparse.Namespace,
        column_names: Sequence[str],
        data: Iterable[Sequence[Any]],
    ) -> int:
        if parsed_args.formatter != "json" or parsed_args.sort_columns:
            return int(super().produce_output(parsed_args, column_names, data))
        # cliff's JSON formatter builds the whole list before writing any
        # of it: the same text, one item at a time.
        columns, selector = self._generate_columns_and_selector(parsed_args, column_names)
        if selector:
            data = (list(self._compress_iterable(row, selector)) for row in data)
        items = (
            {
                name: value.machine_readable() if isinstance(value, FormattableColumn) else value
                for name, value in zip(columns, row, strict=True)
            }
            for row in data
        )
        write_json_list(self.app.stdout, items, None if parsed_args.noindent else 2)
        return 0
