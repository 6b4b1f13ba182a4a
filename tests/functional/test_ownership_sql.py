# SPDX-License-Identifier: Apache-2.0
"""Ownership compare-and-swap rules on real PostgreSQL and MariaDB, races included."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conductor.db.engine import Database
from tests.dbutil import migrated
from tests.ownership_cases import CASES


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_ownership_on_sql_servers(sql_url: str, case: Callable[[Database], None]) -> None:
    db = migrated(sql_url)
    try:
        case(db)
    finally:
        db.dispose()
