# SPDX-License-Identifier: Apache-2.0
"""Bulk node creation on SQLite (see tests/node_import_cases.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from conductor.db.engine import Database
from tests.dbutil import migrated
from tests.node_import_cases import CASES


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_node_import_on_sqlite(tmp_path: Path, case: Callable[[Database], None]) -> None:
    db = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    try:
        case(db)
    finally:
        db.dispose()
