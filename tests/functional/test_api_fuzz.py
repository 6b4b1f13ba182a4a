# SPDX-License-Identifier: Apache-2.0
"""Every route of the served OpenAPI document fuzzed: never a 5xx.

schemathesis generates requests from ``/v1/openapi.json`` as the API
serves it (valid bodies and parameters, and invalid ones: wrong types,
missing fields, strange strings) and sends them to ringfleet-api under
gunicorn, in front of a real conductor over real RabbitMQ, PostgreSQL and
etcd, as an admin.  A 5xx is a bug: bad input must be a 4xx naming what is
wrong.  Bounded (a fixed number of cases per operation, derandomized) to
stay fast enough for every CI run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from conductor.api.v1 import ROUTES
from tests.functional.api_harness import ApiServer
from tests.functional.fleet_harness import Fleet, running_fleet

#: Cases per operation: 28 operations, about 1,100 requests in all (about
#: 20 s on a 2-core machine).
CASES = 40


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory,
    database_url: str,
    transport_url: str,
    etcd_url: str,
) -> Iterator[Fleet]:
    # A conductor and no agent: the API's refusals and the conductor's are
    # what is fuzzed; nothing is built.
    with running_fleet(
        tmp_path_factory.mktemp("api-fuzz"),
        database_url=database_url,
        db_prefix="rf_fuzz",
        transport_url=transport_url,
        etcd_url=etcd_url,
    ) as f:
        yield f


@pytest.fixture(scope="module")
def server(fleet: Fleet, transport_url: str) -> Iterator[ApiServer]:
    api = ApiServer(fleet.workdir, transport_url, name="api-fuzz", debug=False).start()
    try:
        yield api
    finally:
        api.stop()


def test_no_route_answers_a_server_error(server: ApiServer) -> None:
    # The operations driven one by one with their hypothesis strategies
    # (schemathesis' pytest integration does not work with pytest 9).
    schema = schemathesis.openapi.from_url(f"{server.url}/v1/openapi.json")
    headers = {"X-Auth-Token": "admin-token", "OpenStack-API-Version": "baremetal-fleet latest"}
    failures: list[str] = []
    cases = 0
    operations = 0
    started = time.monotonic()
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1

        @given(case=operation.as_strategy())
        @settings(
            max_examples=CASES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case: schemathesis.Case) -> None:
            nonlocal cases
            cases += 1
            response = case.call(headers=headers, timeout=30)
            if response.status_code >= 500:
                failures.append(
                    f"{case.method} {case.formatted_path} {case.query or ''} "
                    f"{str(case.body)[:200]} -> {response.status_code}: {response.text[:300]}"
                )

        check()
    seconds = time.monotonic() - started
    print(f"\nfuzzed {operations} operations, {cases} cases in {seconds:.1f} s")
    assert operations == len(ROUTES)
    assert failures == []
