# SPDX-License-Identifier: Apache-2.0
"""``ringfleet --os-endpoint``: the API's JSON errors rebuilt as the RPC API's exceptions."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests
from keystoneauth1.session import Session

from conductor.cli import http_client
from conductor.cli.command import describe_error
from conductor.cli.login import Login
from conductor.common import exception


def response(status: int, errors: list[dict[str, Any]] | None, raw: bytes | None = None) -> Any:
    reply = requests.Response()
    reply.status_code = status
    reply._content = raw if raw is not None else json.dumps({"errors": errors}).encode()
    return reply


def test_invalid_input_keeps_every_field() -> None:
    exc = http_client._error(
        response(
            400,
            [
                {
                    "code": "ringfleet.invalid_input",
                    "field": "node.name",
                    "reason": "required",
                    "value": None,
                },
                {
                    "code": "ringfleet.invalid_input",
                    "field": "node.traits[1]",
                    "reason": "bad",
                    "value": "'x'",
                },
            ],
        ),
        "/v1/nodes",
    )
    assert isinstance(exc, exception.InvalidInput)
    assert describe_error(exc) == ["node.name: required", "node.traits[1]: bad (got 'x')"]


@pytest.mark.parametrize(
    ("path", "cls"),
    [
        ("/v1/nodes/n9", exception.NodeNotFound),
        ("/v1/flavors/f", exception.FlavorNotFound),
        ("/v1/instances/i", exception.InstanceNotFound),
    ],
)
def test_not_found_is_the_rpc_apis_class(path: str, cls: type[Exception]) -> None:
    exc = http_client._error(
        response(404, [{"code": "ringfleet.not_found", "field": None, "value": "n9"}]), path
    )
    assert type(exc) is cls
    assert describe_error(exc) == [f"{cls.kind} 'n9' not found"]  # type: ignore[attr-defined]


def test_conflicts_and_unavailable() -> None:
    dup = http_client._error(
        response(
            409,
            [
                {
                    "code": "ringfleet.conflict",
                    "field": "name",
                    "value": "small",
                    "index": None,
                    "reason": "exists",
                }
            ],
        ),
        "/v1/flavors",
    )
    assert isinstance(dup, exception.DuplicateFlavor) and dup.field == "name"
    moved = http_client._error(
        response(
            409,
            [{"code": "ringfleet.conflict", "field": "owner", "value": "a1", "reason": "alive"}],
        ),
        "/v1/nodes/n1/move",
    )
    assert type(moved) is exception.Conflict
    down = http_client._error(
        response(503, [{"code": "ringfleet.service_unavailable", "detail": "membership is lost"}]),
        "/v1/nodes",
    )
    assert isinstance(down, exception.ServiceUnavailable)


@pytest.mark.parametrize(
    ("status", "errors", "raw"),
    [
        (401, [{"code": "ringfleet.unauthorized", "detail": "authentication required"}], None),
        (403, [{"code": "ringfleet.forbidden", "detail": "policy does not allow x"}], None),
        (502, None, b"<html>bad gateway</html>"),
    ],
)
def test_anything_else_is_an_http_error_with_its_status(
    status: int, errors: list[dict[str, Any]] | None, raw: bytes | None
) -> None:
    exc = http_client._error(response(status, errors, raw), "/v1/nodes")
    assert isinstance(exc, http_client.HttpError)
    assert describe_error(exc)[0].startswith(f"HTTP {status}")


def test_an_unreachable_endpoint_is_an_http_error() -> None:
    endpoint = "http://127.0.0.1:9"
    client = http_client.HttpConductorAPI(Login(endpoint, Session()), timeout=2)
    with pytest.raises(http_client.HttpError, match=r"no answer from http://127\.0\.0\.1:9"):
        client.show_node("n1")
    with pytest.raises(http_client.HttpError, match=r"no answer from http://127\.0\.0\.1:9"):
        client.sync_ironic_nodes()
