# SPDX-License-Identifier: Apache-2.0
"""Fixtures for functional tests: the real servers started by the test script.

``tools/with-test-servers.sh`` starts etcd, RabbitMQ, PostgreSQL, MariaDB,
Ironic, Keystone, Redis and Placement and passes their URLs in ``RINGFLEET_TEST_*``
variables.
Outside CI a test whose server is missing is skipped; with ``CI=true`` it
fails, so a broken server start can never turn into a silently green run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dbutil import fresh_database
from tests.functional.fleet_harness import Fleet, ironic_fleet
from tests.harness.ironic import IronicHarness, unique_shard


def _require(variable: str, what: str) -> str:
    value = os.environ.get(variable)
    if value:
        return value
    message = (
        f"{what} is not running: {variable} is unset "
        "(run the tests through tools/with-test-servers.sh)"
    )
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def etcd_url() -> str:
    """``etcd3+http://127.0.0.1:PORT`` of the test etcd."""
    return _require("RINGFLEET_TEST_ETCD_URL", "etcd")


@pytest.fixture(scope="session")
def transport_url() -> str:
    """``rabbit://...`` of the test RabbitMQ."""
    return _require("RINGFLEET_TEST_TRANSPORT_URL", "RabbitMQ")


@pytest.fixture(scope="session")
def database_url() -> str:
    """SQLAlchemy URL of the test PostgreSQL database."""
    return _require("RINGFLEET_TEST_DB_URL", "PostgreSQL")


@pytest.fixture(scope="session")
def mysql_server_url() -> str:
    """SQLAlchemy URL (``mysql+pymysql://``) of the test MariaDB database."""
    return _require("RINGFLEET_TEST_MYSQL_URL", "MariaDB")


@pytest.fixture(scope="session")
def ironic_url() -> str:
    """``http://127.0.0.1:PORT`` of the test Ironic (noauth, fake hardware)."""
    return _require("RINGFLEET_TEST_IRONIC_URL", "Ironic")


@pytest.fixture(scope="session")
def redis_url() -> str:
    """``redis://127.0.0.1:PORT`` of the test redis-server (tooz URL, no options)."""
    return _require("RINGFLEET_TEST_REDIS_URL", "Redis")


@pytest.fixture(scope="session")
def keystone_url() -> str:
    """``http://127.0.0.1:PORT/v3`` of the test Keystone (its identity endpoint)."""
    return _require("RINGFLEET_TEST_KEYSTONE_URL", "Keystone")


@pytest.fixture(scope="session")
def placement_url() -> str:
    """``http://127.0.0.1:PORT`` of the test Placement (noauth2: send
    ``X-Auth-Token: admin``; microversions up to 1.39)."""
    return _require("RINGFLEET_TEST_PLACEMENT_URL", "Placement")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/functional/" in str(item.path):
            item.add_marker(pytest.mark.functional)


@pytest.fixture
def pg_url(database_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test, dropped afterwards."""
    with fresh_database(database_url) as url:
        yield url


@pytest.fixture
def mysql_url(mysql_server_url: str) -> Iterator[str]:
    """A fresh, empty MariaDB database for one test, dropped afterwards."""
    with fresh_database(mysql_server_url) as url:
        yield url


@pytest.fixture(params=["postgres", "mariadb"])
def sql_url(request: pytest.FixtureRequest) -> str:
    """A fresh, empty database for one test, on each SQL server in turn."""
    fixture = "pg_url" if request.param == "postgres" else "mysql_url"
    return str(request.getfixturevalue(fixture))


@pytest.fixture
def ironic(ironic_url: str) -> Iterator[IronicHarness]:
    """A client of the test Ironic (plain HTTP: Ironic's own records)."""
    with IronicHarness(ironic_url) as harness:
        yield harness


@pytest.fixture
def shard() -> str:
    """An Ironic shard of the test's own: tests sharing one Ironic never see
    each other's nodes."""
    return unique_shard()


@pytest.fixture
def ironic_shards(shard: str) -> list[str]:
    """The Ironic shards :func:`fleet_on_ironic` imports: the test's own
    :func:`shard` (a module needing more overrides this fixture)."""
    return [shard]


@pytest.fixture
def fleet_on_ironic(
    tmp_path: Path,
    pg_url: str,
    transport_url: str,
    etcd_url: str,
    ironic_url: str,
    ironic_shards: list[str],
) -> Iterator[Fleet]:
    """A :class:`Fleet` of the ``ironic`` driver on the test Ironic, importing
    the nodes of :func:`ironic_shards` (:func:`ironic_fleet`); no process started."""
    with ironic_fleet(
        tmp_path,
        db_url=pg_url,
        transport_url=transport_url,
        etcd_url=etcd_url,
        ironic_url=ironic_url,
        shards=ironic_shards,
    ) as fleet:
        yield fleet
