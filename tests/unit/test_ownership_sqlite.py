# SPDX-License-Identifier: Apache-2.0
"""Ownership compare-and-swap rules on SQLite (see tests/ownership_cases.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from conductor.db.engine import Database
from tests.dbutil import migrated
from tests.ownership_cases import CASES


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_ownership_on_sqlite(tmp_path: Path, case: Callable[[Database], None]) -> None:
    db = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    try:
        case(db)
    finally:
        db.dispose()
