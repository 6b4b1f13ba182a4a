# SPDX-License-Identifier: Apache-2.0
"""Allocation rules on SQLite (see tests/allocation_cases.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from conductor.db.engine import Database
from tests.allocation_cases import CASES
from tests.dbutil import migrated


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_allocations_on_sqlite(tmp_path: Path, case: Callable[[Database], None]) -> None:
    db = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    try:
        case(db)
    finally:
        db.dispose()
