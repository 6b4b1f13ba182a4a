# SPDX-License-Identifier: Apache-2.0
"""Allocation rules on real PostgreSQL and MariaDB (see tests/allocation_cases.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conductor.db.engine import Database
from tests.allocation_cases import CASES
from tests.dbutil import migrated


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_allocations_on_sql_servers(sql_url: str, case: Callable[[Database], None]) -> None:
    db = migrated(sql_url)
    try:
        case(db)
    finally:
        db.dispose()
