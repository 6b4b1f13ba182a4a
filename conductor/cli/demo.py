"""``ringfleet demo``: the embedded fleet demo as a cliff command."""

from __future__ import annotations

import argparse
import sys

from cliff.command import Command

from conductor import demo

__all__ = ["Demo"]


class Demo(Command):
    """Run a whole fleet in this process, no servers, and show it at work."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.description = demo.__doc__
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        demo.add_arguments(parser)
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        try:
            result = demo.run_demo(parsed_args, self.app.stdout)
        except ValueError as exc:
            print(f"ringfleet demo: error: {exc}", file=sys.stderr)
            return 2
        return 1 if result.violations else 0
