# SPDX-License-Identifier: Apache-2.0
"""The served OpenAPI document is exact: every schemathesis check, every operation.

schemathesis generates requests from ``/v1/openapi.json`` as the API
serves it and sends them to ringfleet-api under gunicorn, behind a real
Keystone (keystonemiddleware checks every token) and in front of a real
conductor over real RabbitMQ, PostgreSQL and etcd, as an admin of a
Keystone project.  Every
built-in check runs on every answer: no 5xx, the reply matches its schema
and content type, its status and headers are documented, and a request the
document allows is taken (no 400), one it does not is refused.  Stateless
at the latest microversion (the main run, as an admin: valid requests,
then invalid ones; valid ones as a project member too) and at the first
one (routes of later ones answer their documented 404; the fields of
later ones left out, as their ``x-min-version`` says), then stateful:
schemathesis' state machine follows the document's OpenAPI links (create a
flavor, then show and delete it; build an instance, then act on it...).
The fleet holds instances with actions and network data, so that replies
have content.

What the test does to a valid case: it keeps the document's ``x-rules``
(the rules no JSON Schema says), and it makes the linked calls' creations
new each time.  What it excuses: a 400 by the fleet's state, not by the
request (:data:`STATE_REFUSALS`), and an invalid query schemathesis loses
on the wire.  Anything else fails the test, naming each check, operation
and a sample request.

Bounded for CI: derandomized, a fixed number of cases per operation.
"""

from __future__ import annotations

import base64
import collections
import itertools
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
import schemathesis
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test
from schemathesis.core.failures import Failure, FailureGroup
from schemathesis.core.parameters import ParameterLocation
from schemathesis.generation.modes import GenerationMode

from conductor.api.v1 import ROUTES
from tests.functional.api_harness import ApiServer
from tests.functional.fleet_harness import Fleet, running_fleet
from tests.functional.keystone_harness import make_identity

#: Cases per operation at the latest microversion: 47 operations, about
#: 700 requests (about 1,800 in the whole file; 30 cases took two minutes
#: of CI's 25 beside the other functional tests).
CASES = 15
#: Cases per operation at the first microversion (most answer 404 there).
FIRST_CASES = 5
#: Cases per operation as a member.
MEMBER_CASES = 5
#: Invalid requests per operation (every check; the server must refuse them).
NEGATIVE_CASES = 10
#: Sequences of linked calls (each of up to 8 steps).
STATEFUL_CASES = 40
VERSION_HEADER = "OpenStack-API-Version"
#: The Keystone tokens of the test's project, by role (the ``server`` fixture's).
TOKENS: dict[str, str] = {}
#: The callers, by the role whose token :func:`_headers` sends.
LATEST = {"X-Auth-Token": "admin", VERSION_HEADER: "baremetal-fleet latest"}
FIRST = {"X-Auth-Token": "admin", VERSION_HEADER: "baremetal-fleet 1.0"}
#: A project member, not an admin: the fleet's operations are 403 to it.
MEMBER = {"X-Auth-Token": "member", VERSION_HEADER: "baremetal-fleet latest"}


def _public_key(seed: int) -> str:
    private = ed25519.Ed25519PrivateKey.from_private_bytes(bytes([seed]) * 32)
    line = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return line.decode() + f" fuzz{seed}@host"


# The document's formats that are no JSON Schema formats: a key that parses,
# and user_data's base64 of text (without control characters: the text rule).
schemathesis.openapi.format("ssh-public-key", st.sampled_from([_public_key(s) for s in (1, 2, 3)]))
schemathesis.openapi.format(
    "base64-text",
    st.text(st.characters(exclude_categories=("Cc", "Cs")), max_size=64).map(
        lambda text: base64.b64encode(text.encode()).decode()
    ),
)


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory,
    database_url: str,
    transport_url: str,
    etcd_url: str,
) -> Iterator[Fleet]:
    # A conductor and no agent: nothing is built, every build fails.
    with running_fleet(
        tmp_path_factory.mktemp("api-schema"),
        database_url=database_url,
        db_prefix="rf_api_schema",
        transport_url=transport_url,
        etcd_url=etcd_url,
    ) as f:
        yield f


@pytest.fixture(scope="module")
def server(fleet: Fleet, transport_url: str, keystone_url: str) -> Iterator[ApiServer]:
    """ringfleet-api behind Keystone's ``auth_token``; an admin's and a
    member's token of a project of the test's own in :data:`TOKENS`."""
    identity = make_identity(keystone_url)
    TOKENS.update(identity.tokens)
    # Tokens cached for the run, as deployed (the default 300 s): Keystone is
    # asked once per token, not at each of the 2,700 requests.
    config = identity.authtoken_config().replace("token_cache_time = -1", "token_cache_time = 300")
    api = ApiServer(
        fleet.workdir, transport_url, name="api-schema", auth="keystone", debug=False, extra=config
    ).start()
    try:
        _content(api.url)
        yield api
    finally:
        api.stop()


@pytest.fixture(scope="module")
def schema(server: ApiServer) -> Any:
    return schemathesis.openapi.from_url(f"{server.url}/v1/openapi.json")


def _content(url: str) -> None:
    """Instances with network data and actions (no node: their builds fail)."""
    session = requests.Session()
    session.headers.update(_sent(LATEST))
    flavor = {"name": "fuzz", "resource_class": "baremetal"}
    assert session.post(f"{url}/v1/flavors", json=flavor, timeout=30).status_code == 201
    network_data = {
        "links": [{"id": "eth0", "ethernet_mac_address": "52:54:00:00:00:01"}],
        "networks": [{"id": "n0", "type": "ipv4", "link": "eth0", "ip_address": "10.0.0.1"}],
    }
    body: dict[str, Any] = {"flavor": "fuzz", "count": 3, "network_data": network_data}
    built = session.post(f"{url}/v1/instances", json=body, timeout=30)
    assert built.status_code == 202, built.text
    time.sleep(1)
    first = built.json()["instances"][0]["uuid"]
    assert session.delete(f"{url}/v1/instances/{first}", timeout=30).status_code == 202


def _within_rules(case: schemathesis.Case) -> None:
    """The case made to keep the rules no JSON Schema says (each named in its
    operation's ``x-rules``); every other rule is the document's own."""
    body = case.body if isinstance(case.body, dict) else None
    operation = case.operation.definition.raw["operationId"]
    if body is None:
        return
    if operation == "setInstanceMetadataItem" and isinstance(body.get("meta"), dict):
        # One item (the document says so); its key becomes the path's.
        values = list(body["meta"].values())
        if values:
            # The path's key as sent is percent-encoded.
            body["meta"] = {urllib.parse.unquote(case.path_parameters["key"]): values[0]}
    elif operation == "buildInstances" and isinstance(body.get("instance_uuids"), list):
        if body["instance_uuids"]:
            body["count"] = len(body["instance_uuids"])
        else:
            del body["instance_uuids"]
    elif operation == "setNode":
        _disjoint(body, "add_traits", "remove_traits")
        if isinstance(body.get("properties"), dict):
            _disjoint({"p": list(body["properties"]), **body}, "p", "remove_properties")
    elif operation == "createFlavor":
        _disjoint(body, "required_traits", "forbidden_traits")
        if isinstance(body.get("extra_specs"), dict):
            for key in [k for k in body["extra_specs"] if k.startswith("resources:")]:
                del body["extra_specs"][key]
    elif operation == "importNodes" and isinstance(body.get("nodes"), list):
        _unique_nodes(body["nodes"])


def _sent(headers: dict[str, str]) -> dict[str, str]:
    """*headers* with the Keystone token of the role they name."""
    return {**headers, "X-Auth-Token": TOKENS[headers["X-Auth-Token"]]}


def _headers(case: schemathesis.Case, headers: dict[str, str]) -> dict[str, str]:
    """The test's token and microversion, unless the case is one of a bad
    OpenStack-API-Version header: then the case's own (the server must refuse it)."""
    meta = case._meta
    if meta is not None and meta.is_negative_at(ParameterLocation.HEADER):
        return {key: value for key, value in _sent(headers).items() if key != VERSION_HEADER}
    return _sent(headers)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _at_first_version(case: schemathesis.Case) -> None:
    """The case as a 1.0 client sends it: without the query parameters and
    body fields the document says later microversions add."""
    raw = case.operation.definition.raw
    for parameter in raw.get("parameters", []):
        since = parameter.get("x-min-version")
        if since and _version(since) > (1, 0) and case.query:
            case.query.pop(parameter["name"], None)
    if isinstance(case.body, dict):
        for field, since in raw.get("x-fields-min-version", {}).items():
            if _version(since) > (1, 0):
                case.body.pop(field, None)


def _disjoint(body: dict[str, Any], keep: str, drop_from: str) -> None:
    if isinstance(body.get(keep), list) and isinstance(body.get(drop_from), list):
        body[drop_from][:] = [item for item in body[drop_from] if item not in body[keep]]


def _unique_nodes(nodes: list[Any]) -> None:
    seen: set[str] = set()
    kept = []
    for node in nodes:
        idents = {str(node.get("name")), str(node.get("uuid") or "").lower().replace("-", "")}
        idents.discard("")
        if not idents & seen:
            kept.append(node)
            seen |= idents
    nodes[:] = kept


#: The refusals of a schema-valid request by what the fleet holds, not by the
#: request (each in its operation's ``x-rules``): operation -> (field, reason).
STATE_REFUSALS = {
    # A node stored already, named by a dry_run or every_clash import.
    "importNodes": ("", "exists already"),
    # A key pair the caller does not have (Nova's 400), to build or rebuild with.
    "buildInstances": ("key_name", "no key pair of yours has this name"),
    "instanceAction": ("key_name", "no key pair of yours has this name"),
    # A marker not in the list (Nova's 400): an instance by sort_key, an action, a key pair.
    "listInstances": ("marker", "not found in this list"),
    "listInstanceActions": ("marker", "not found in this list"),
    "listKeyPairs": ("marker", "not found in this list"),
}


def _valid(case: schemathesis.Case) -> bool:
    """Whether the case is a valid request (an invalid one is sent as generated)."""
    meta = case._meta
    return meta is None or not meta.generation.mode.is_negative


def _excused(case: schemathesis.Case, operation: str, failure: Failure, response: Any) -> bool:
    """A failure that is none of the server's or the document's: a refusal by
    the fleet's state, or an invalid query that never reached the server."""
    return (
        _refused_by_state(operation, failure, response)
        or _negation_not_sent(case, failure)
        or _token_put_back(case, failure)
    )


def _token_put_back(case: schemathesis.Case, failure: Failure) -> bool:
    """An invalid case whose bad headers include a missing X-Auth-Token: the
    test sends its own token with every call (:func:`_headers`), so that
    negation never reached the server."""
    meta = case._meta
    return (
        type(failure).__name__ == "AcceptedNegativeData"
        and meta is not None
        and meta.is_negative_at(ParameterLocation.HEADER)
        and "X-Auth-Token" not in (case.headers or {})
    )


def _negation_not_sent(case: schemathesis.Case, failure: Failure) -> bool:
    """An invalid query parameter sent as nothing: an unknown name whose value
    is an empty list or null (schemathesis' mutation, lost on the wire)."""
    if type(failure).__name__ != "AcceptedNegativeData" or not case.query:
        return False
    known = {p["name"] for p in case.operation.definition.raw.get("parameters", []) if "name" in p}
    unknown = {key: value for key, value in case.query.items() if key not in known}
    return bool(unknown) and all(value in ([], None) for value in unknown.values())


def _refused_by_state(operation: str, failure: Failure, response: Any) -> bool:
    """A 400 whose every error is the operation's refusal by the fleet's state."""
    if operation not in STATE_REFUSALS or type(failure).__name__ != "RejectedPositiveData":
        return False
    field, reason = STATE_REFUSALS[operation]
    errors = response.json().get("errors", [])
    return bool(errors) and all(
        e.get("reason") == reason and str(e.get("field")).endswith(field) for e in errors
    )


class Findings:
    """Failures by check and operation, and how many cases ran."""

    def __init__(self) -> None:
        self.failures: collections.Counter[tuple[str, str]] = collections.Counter()
        self.samples: dict[tuple[str, str], str] = {}
        self.cases = 0
        self.operations: set[str] = set()

    def run(self, case: schemathesis.Case, url: str, headers: dict[str, str]) -> None:
        operation = case.operation.definition.raw["operationId"]
        self.cases += 1
        self.operations.add(operation)
        if _valid(case):
            _within_rules(case)
        if headers is FIRST:
            _at_first_version(case)
        headers = _headers(case, headers)
        response = case.call(base_url=url, headers=headers, timeout=30)
        try:
            case.validate_response(
                response, headers=headers, transport_kwargs={"base_url": url, "headers": headers}
            )
        except FailureGroup as group:
            for failure in group.exceptions:
                if not _excused(case, operation, failure, response):
                    self.add(operation, failure, case, response)

    def add(self, operation: str, failure: Failure, case: schemathesis.Case, response: Any) -> None:
        key = (type(failure).__name__, operation)
        self.failures[key] += 1
        self.samples.setdefault(
            key,
            f"{case.method} {case.formatted_path} {case.query or ''} {str(case.body)[:300]} "
            f"-> {response.status_code} {response.text[:300]}: {failure.title}: "
            f"{failure.message[-400:]}",
        )

    def report(self, what: str, seconds: float) -> list[str]:
        print(
            f"\n{what}: {len(self.operations)} operations, {self.cases} cases in "
            f"{seconds:.1f} s, failures by check: "
            f"{dict(collections.Counter(k[0] for k in self.failures.elements()))}"
        )
        failures = [
            f"{check} {op} x{n}: {self.samples[(check, op)]}"
            for (check, op), n in sorted(self.failures.items())
        ]
        for failure in failures:
            print("  " + failure[:1000])
        return failures


def _every_operation(
    schema: Any,
    cases: int,
    check: Callable[[schemathesis.Case], None],
    mode: GenerationMode = GenerationMode.POSITIVE,
) -> None:
    for result in schema.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=cases,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def one(case: schemathesis.Case) -> None:
            check(case)

        one()


def test_every_operation_passes_every_check_at_the_latest_microversion(
    server: ApiServer, schema: Any
) -> None:
    findings = Findings()
    started = time.monotonic()
    _every_operation(schema, CASES, lambda case: findings.run(case, server.url, LATEST))
    failures = findings.report("latest", time.monotonic() - started)
    assert len(findings.operations) == len(ROUTES)
    assert failures == []


def test_every_operation_refuses_what_the_document_does_not_allow(
    server: ApiServer, schema: Any
) -> None:
    findings = Findings()
    started = time.monotonic()
    _every_operation(
        schema,
        NEGATIVE_CASES,
        lambda case: findings.run(case, server.url, LATEST),
        GenerationMode.NEGATIVE,
    )
    failures = findings.report("latest, invalid requests", time.monotonic() - started)
    assert len(findings.operations) == len(ROUTES)
    assert failures == []


def test_every_operation_passes_every_check_at_the_first_microversion(
    server: ApiServer, schema: Any
) -> None:
    findings = Findings()
    started = time.monotonic()
    _every_operation(schema, FIRST_CASES, lambda case: findings.run(case, server.url, FIRST))
    failures = findings.report("1.0", time.monotonic() - started)
    assert len(findings.operations) == len(ROUTES)
    assert failures == []


#: A serial number for what the linked calls create (see :func:`_fresh`).
_SERIAL = itertools.count()


def _fresh(case: schemathesis.Case) -> None:
    """A creation made new each time: a replayed sequence of calls must meet
    the same answers (hypothesis replays them), not the clash with what its
    first run stored; a build of the flavor the fleet holds, one instance."""
    operation = case.operation.definition.raw["operationId"]
    body = case.body if isinstance(case.body, dict) else None
    if body is None:
        return
    serial = next(_SERIAL)
    if operation in ("createFlavor", "createNode"):
        body["name"] = f"s{serial}-{body.get('name', '')}"[:255]
        body.pop("uuid", None)
    elif operation == "createKeyPair" and isinstance(body.get("keypair"), dict):
        body["keypair"]["name"] = f"s{serial}-{body['keypair'].get('name', '')}"[:255]
    elif operation == "importNodes" and isinstance(body.get("nodes"), list):
        for index, node in enumerate(body["nodes"]):
            if isinstance(node, dict):
                node["name"] = f"s{serial}-{index}-{node.get('name', '')}"[:255]
                node.pop("uuid", None)
    elif operation == "buildInstances":
        body.update(flavor="fuzz", count=1)
        for key in ("key_name", "instance_uuids"):
            body.pop(key, None)


def run_linked_calls(schema: Any, url: str, findings: Findings, steps: int = 8) -> None:
    """schemathesis' state machine over the document's links, every check on every answer."""

    class Machine(schema.as_state_machine()):  # type: ignore[misc]
        def get_call_kwargs(self, case: schemathesis.Case) -> dict[str, Any]:
            return {"base_url": url, "headers": _headers(case, LATEST), "timeout": 30}

        def before_call(self, case: schemathesis.Case) -> None:
            if _valid(case):
                _within_rules(case)
                _fresh(case)

        def validate_response(self, response: Any, case: schemathesis.Case, **kwargs: Any) -> None:
            findings.cases += 1
            operation = case.operation.definition.raw["operationId"]
            findings.operations.add(operation)
            try:
                sent = _sent(LATEST)
                case.validate_response(
                    response, headers=sent, transport_kwargs={"base_url": url, "headers": sent}
                )
            except FailureGroup as group:
                for failure in group.exceptions:
                    if not _excused(case, operation, failure, response):
                        findings.add(operation, failure, case, response)

    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=STATEFUL_CASES,
            stateful_step_count=steps,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        ),
    )


def test_every_operation_passes_every_check_as_a_member(server: ApiServer, schema: Any) -> None:
    findings = Findings()
    started = time.monotonic()
    _every_operation(schema, MEMBER_CASES, lambda case: findings.run(case, server.url, MEMBER))
    failures = findings.report("latest, a member", time.monotonic() - started)
    assert len(findings.operations) == len(ROUTES)
    assert failures == []


#: The operations on one instance, named by its uuid (the links from a build).
ON_AN_INSTANCE = frozenset(
    {
        "showInstance",
        "deleteInstance",
        "instanceAction",
        "listInstanceActions",
        "showInstanceAction",
        "listInstanceMetadata",
        "updateInstanceMetadata",
        "replaceInstanceMetadata",
        "deleteInstanceMetadataItem",
        "showInstanceMetadataItem",
        "setInstanceMetadataItem",
        "deleteInstanceTags",
        "listInstanceTags",
        "replaceInstanceTags",
        "deleteInstanceTag",
        "checkInstanceTag",
        "addInstanceTag",
    }
)


def test_linked_calls_pass_every_check(server: ApiServer, schema: Any) -> None:
    findings = Findings()
    started = time.monotonic()
    run_linked_calls(schema, server.url, findings)
    failures = findings.report("stateful", time.monotonic() - started)
    # The links were followed: what a creation named was used (which call
    # on the instance built, the state machine's walk decides).
    assert {"createFlavor", "buildInstances"} <= findings.operations
    assert findings.operations & ON_AN_INSTANCE, sorted(findings.operations)
    assert failures == []
