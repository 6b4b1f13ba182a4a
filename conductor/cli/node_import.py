# SPDX-License-Identifier: Apache-2.0
"""``ringfleet node import``: a YAML, JSON or CSV file of nodes, every row or none.

The conductor validates each row, once: the CLI reads the file
(:mod:`conductor.cli.node_files`), sends the rows as they are written and
turns the conductor's ``nodes[i]`` problems into file lines.  A file of up
to ``--batch-size`` rows (100,000, the conductor's limit per call) goes in
one call that checks it, against the stored nodes too, and writes it in
one transaction (conductor API 1.18, ``every_clash``).  A larger file is
checked in dry-run calls first (so a bad row anywhere imports nothing) and
then imported a batch per call: sent twice.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import IO, Any

from cliff.command import Command

from conductor.cli import node_files
from conductor.cli.command import ConductorCommand, command_line, describe_error
from conductor.common.exception import Conflict, FieldError, InvalidInput
from conductor.common.schemas import MAX_BATCH

__all__ = ["NodeImport"]

_INDEX = re.compile(r"nodes\[(\d+)\]\.?")

#: ``(line, message)`` of one problem (line 0: of the whole file).
Problem = tuple[int, str]


class _Progress:
    """Progress lines on stderr: rewritten in place on a terminal."""

    def __init__(self, stream: IO[str], enabled: bool) -> None:
        self._stream = stream
        self._enabled = enabled
        self._tty = enabled and stream.isatty()

    def update(self, text: str) -> None:
        if not self._enabled:
            return
        if self._tty:
            self._stream.write(f"\r{text}\x1b[K")
        else:
            self._stream.write(f"{text}\n")
        self._stream.flush()

    def done(self) -> None:
        if self._tty:
            self._stream.write("\n")
            self._stream.flush()


def _label(path: str) -> str:
    """How messages name the imported file."""
    return "<stdin>" if path == "-" else path


def _in_file(path: str, error: FieldError) -> FieldError:
    """A problem of the file itself (field '' or 'line N'), naming the file."""
    where = f"{_label(path)}: {error.field}" if error.field else _label(path)
    return FieldError(where, error.reason, error.value)


def _row_errors(errors: Sequence[FieldError], lines: Sequence[int]) -> list[Problem]:
    """``(line, message)`` for validation errors on ``nodes[i]`` paths."""

    def line_of(match: re.Match[str]) -> str:
        return f"line {lines[int(match.group(1))]} "

    out: list[Problem] = []
    for error in errors:
        match = _INDEX.match(error.field)
        if match is None:
            out.append((0, str(error)))
            continue
        field = error.field[match.end() :]
        # "duplicate of nodes[3].name" -> "duplicate of line 5 name"
        reason = _INDEX.sub(line_of, error.reason)
        where = f"{field}: " if field else ""
        got = f" (got {error.value})" if error.value is not None else ""
        out.append((lines[int(match.group(1))], f"{where}{reason}{got}"))
    return out


def _conflict(exc: Conflict, lines: Sequence[int]) -> Problem:
    """A conductor's ``DuplicateNode`` (one clash) as a problem of its row."""
    line = lines[exc.index] if exc.index is not None and exc.index < len(lines) else 0
    return line, describe_error(exc)[0]


def _across_batches(payloads: Sequence[Any], lines: Sequence[int], size: int) -> list[Problem]:
    """Names and uuids repeated in different batches (the conductor sees
    one batch per call, and reports the repeats within it)."""
    problems: list[Problem] = []
    for field in ("name", "uuid"):
        first: dict[str, int] = {}
        for i, payload in enumerate(payloads):
            value = payload.get(field) if isinstance(payload, dict) else None
            if not isinstance(value, str):
                continue
            earlier = first.setdefault(value, i)
            if earlier // size != i // size:
                reason = f"{field}: duplicate of line {lines[earlier]} {field} (got {value!r})"
                problems.append((lines[i], reason))
    return problems


class NodeImport(ConductorCommand, Command):
    """Import nodes from a YAML, JSON or CSV file: every row, or none.

    The conductor checks every row, and against the nodes stored already;
    bad rows are reported with their line and field (the first
    --max-problems of them, then how many more), and then nothing is
    imported.  A file of up to --batch-size rows (100000) is sent once,
    checked and written in one transaction.  A larger file is checked
    whole first, then imported in batches (each all or nothing; a
    concurrent import of the same names can still make a later batch fail,
    and the message says what was imported).  One summary line is printed.
    YAML and JSON files hold a list of node specs (or a mapping whose
    'nodes' is that list); see 'ringfleet node create' for the fields.
    CSV columns: name, uuid, resource_class, traits (space/comma/semicolon
    separated), group, maintenance, maintenance_reason, provision_state,
    power_state, capabilities, and properties.<name> for any other property.
    """

    examples = (
        ("import nodes from a YAML file", "nodes.yaml"),
        ("from CSV, 500 a call", "--input-format csv --batch-size 500 nodes.csv"),
    )

    # --format was this command's first spelling of --input-format; it is
    # still read (with a warning) because the command has no -f/--format of
    # its own to clash with.
    _DEPRECATED_FORMAT = "--format"

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.add_argument("file", metavar="FILE", help="the file ('-' reads stdin)")
        parser.add_argument(
            "--input-format",
            dest="file_format",
            choices=node_files.FORMATS,
            help="the file's format (default: from its extension)",
        )
        parser.add_argument(
            self._DEPRECATED_FORMAT,
            dest="deprecated_file_format",
            choices=node_files.FORMATS,
            help="deprecated spelling of --input-format",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=MAX_BATCH,
            metavar="N",
            help=f"nodes per import call (1..{MAX_BATCH}, default {MAX_BATCH}); a file of "
            "more rows is checked whole first, then imported in batches",
        )
        parser.add_argument(
            "--max-problems",
            type=int,
            default=20,
            metavar="N",
            help="print the first N problems of a bad file, then how many more (0: all; 20)",
        )
        parser.add_argument(
            "--progress",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="show progress on stderr (default: only when stderr is a terminal)",
        )
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        size = parsed_args.batch_size
        if not 1 <= size <= MAX_BATCH:
            raise InvalidInput([FieldError.about("--batch-size", f"must be 1..{MAX_BATCH}", size)])
        if parsed_args.max_problems < 0:
            raise InvalidInput(
                [FieldError.about("--max-problems", "must be 0 or more", parsed_args.max_problems)]
            )
        fmt = self._input_format(parsed_args)
        path = parsed_args.file
        try:
            fmt = node_files.detect_format("" if path == "-" else path, fmt)
            rows, bad_rows = node_files.read_nodes(self._read(path), fmt)
        except InvalidInput as exc:
            # The file itself is unusable: name it in every problem.
            raise InvalidInput([_in_file(path, error) for error in exc.errors]) from None
        enabled = parsed_args.progress
        progress = _Progress(
            self.app.stderr, self.app.stderr.isatty() if enabled is None else enabled
        )
        progress.update(f"read {len(rows)} rows from {path}")
        lines = [line for line, _ in rows]
        payloads = [spec for _, spec in rows]
        problems = [(int(e.field.split()[1]), e.reason) for e in bad_rows]
        if problems or len(payloads) > size:
            # Checked whole before anything is written: with rows the file
            # could not give (nothing is then written), or over several calls.
            problems += self._check(payloads, lines, size, progress)
        elif payloads:
            problems = self._import_one(payloads, lines, progress)
        if problems:
            progress.done()
            self._report(path, sorted(problems, key=lambda p: p[0]), parsed_args.max_problems)
            bad = len({line for line, _ in problems})
            raise InvalidInput(
                [
                    FieldError(
                        _label(path),
                        f"{bad} of {len(rows) + len(bad_rows)} rows are bad; nothing imported",
                    )
                ]
            )
        if len(payloads) > size:
            self._import_batches(payloads, lines, size, progress, path)
        progress.done()
        batches = (len(payloads) + size - 1) // size
        self.app.stdout.write(
            f"Imported {len(payloads)} nodes from {_label(path)} ({fmt}) in {batches} batches\n"
        )
        return 0

    def _input_format(self, parsed_args: argparse.Namespace) -> str | None:
        old = parsed_args.deprecated_file_format
        if old is None:
            return parsed_args.file_format  # type: ignore[no-any-return]
        if parsed_args.file_format not in (None, old):
            raise InvalidInput(
                [
                    FieldError.about(
                        self._DEPRECATED_FORMAT,
                        f"contradicts --input-format {parsed_args.file_format}",
                        old,
                    )
                ]
            )
        self.app.stderr.write(
            f"{command_line(self)}: warning: {self._DEPRECATED_FORMAT} is deprecated, "
            "use --input-format\n"
        )
        return old  # type: ignore[no-any-return]

    def _report(self, path: str, problems: Sequence[Problem], most: int) -> None:
        """The first ``most`` problems (0: all), then how many more: a
        re-imported 100,000-row file has 100,000 or more."""
        shown = problems[:most] if most else problems
        for line, message in shown:
            where = f"line {line}: " if line else ""
            self.app.stderr.write(f"{_label(path)}: {where}{message}\n")
        if len(shown) < len(problems):
            self.app.stderr.write(
                f"{_label(path)}: ... and {len(problems) - len(shown):,} more problems "
                "(--max-problems 0 prints every one)\n"
            )

    def _read(self, path: str) -> str:
        if path == "-":
            return sys.stdin.read()
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInput([FieldError("", f"cannot read: {exc}")]) from None

    def _import_one(
        self, payloads: list[Any], lines: Sequence[int], progress: _Progress
    ) -> list[Problem]:
        """The whole file in one call, checked and written there; its problems."""
        progress.update(f"importing {len(payloads)} nodes")
        try:
            self.client.import_nodes(payloads, every_clash=True)
        except InvalidInput as exc:
            return _row_errors(exc.errors, lines)
        except Conflict as exc:  # a conductor before 1.18: the first clash only
            return [_conflict(exc, lines)]
        progress.update(f"imported {len(payloads)}/{len(payloads)} nodes")
        return []

    def _check(
        self, payloads: Sequence[Any], lines: Sequence[int], size: int, progress: _Progress
    ) -> list[Problem]:
        """``(line, message)`` for every bad row, or one whose name or uuid
        is stored already: dry-run calls of ``size`` rows, nothing written."""
        problems = _across_batches(payloads, lines, size)
        for start in range(0, len(payloads), size):
            batch = payloads[start : start + size]
            try:
                self.client.import_nodes(list(batch), dry_run=True)
            except InvalidInput as exc:
                problems.extend(_row_errors(exc.errors, lines[start : start + size]))
            progress.update(f"checked {start + len(batch)}/{len(payloads)} nodes")
        return problems

    def _import_batches(
        self,
        payloads: Sequence[Any],
        lines: Sequence[int],
        size: int,
        progress: _Progress,
        path: str,
    ) -> None:
        imported = 0
        for start in range(0, len(payloads), size):
            batch = payloads[start : start + size]
            try:
                self.client.import_nodes(list(batch))
            except Conflict as exc:
                # Checked rows can still clash with nodes a concurrent import stored.
                progress.done()
                line, message = _conflict(exc, lines[start : start + size])
                where = f"line {line}: " if line else ""
                self.app.stderr.write(f"{_label(path)}: {where}{message}\n")
                raise InvalidInput(
                    [
                        FieldError(
                            _label(path),
                            f"{imported} nodes imported, before the batch starting at "
                            f"line {lines[start]}; that batch and the rest were not",
                        )
                    ]
                ) from None
            imported += len(batch)
            progress.update(f"imported {imported}/{len(payloads)} nodes")
