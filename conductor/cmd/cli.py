"""The operator CLI ``ringfleet``.

Today it has the ``demo`` command; the OpenStack-client style commands
(``fleet``, ``ring``, ``node``, ``flavor``, ``instance``, ``agent``) arrive
with the conductor's RPC API.
"""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from collections.abc import Sequence

# tooz imports eventlet (never monkey-patched here), which warns on import:
# not the operator's concern.
warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")

from conductor import demo  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ringfleet", description="Operate a ringfleet bare-metal fleet."
    )
    parser.add_argument("--debug", action="store_true", help="log debug messages")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo_parser = commands.add_parser(
        "demo",
        help="run a whole fleet in this process, no servers, and show it at work",
        description=demo.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_arguments(demo_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command == "demo":
        try:
            result = demo.run_demo(args)
        except ValueError as exc:
            print(f"ringfleet demo: error: {exc}", file=sys.stderr)
            return 2
        return 1 if result.violations else 0
    return 2  # pragma: no cover - argparse refuses unknown commands


if __name__ == "__main__":
    sys.exit(main())
