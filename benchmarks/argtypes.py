# SPDX-License-Identifier: Apache-2.0
"""argparse ``type=`` converters shared by the benchmarks (errors name the value)."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def at_least(minimum: int) -> Callable[[str], int]:
    """An integer option that must be >= ``minimum``."""

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return convert


def seconds(*, allow_zero: bool) -> Callable[[str], float]:
    """A duration option: >= 0, or > 0 when zero makes no sense."""

    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
        if not (value >= 0 if allow_zero else value > 0):
            bound = ">= 0" if allow_zero else "> 0"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    return convert


def int_list(minimum: int) -> Callable[[str], list[int]]:
    """Comma-separated integers, each >= ``minimum``, sorted and distinct."""

    def convert(text: str) -> list[int]:
        try:
            values = sorted({int(part) for part in text.split(",") if part.strip()})
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated integers, got {text!r}"
            ) from None
        if not values or values[0] < minimum:
            raise argparse.ArgumentTypeError(f"each must be >= {minimum}, got {text!r}")
        return values

    return convert


def require_servers(parser: argparse.ArgumentParser, args: argparse.Namespace, run_as: str) -> None:
    """Exit with a usage error naming each server URL (``--db-url``,
    ``--transport-url``, ``--etcd-url``) neither given nor in the
    ``RINGFLEET_TEST_*`` variables; ``run_as`` is the command that sets them."""
    missing = [
        name
        for name, value in (
            ("--db-url", args.db_url),
            ("--transport-url", args.transport_url),
            ("--etcd-url", args.etcd_url),
        )
        if not value
    ]
    if missing:
        parser.error(
            f"{', '.join(missing)} not given and RINGFLEET_TEST_* unset: run it as {run_as}"
        )
