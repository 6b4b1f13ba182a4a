# SPDX-License-Identifier: Apache-2.0
"""Bulk node creation on real PostgreSQL (COPY) and MariaDB (multi-row INSERT)
(see tests/node_import_cases.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conductor.db.engine import Database
from tests.dbutil import migrated
from tests.node_import_cases import CASES


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_node_import_on_sql_servers(sql_url: str, case: Callable[[Database], None]) -> None:
    db = migrated(sql_url)
    try:
        case(db)
    finally:
        db.dispose()
