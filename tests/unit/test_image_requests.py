# SPDX-License-Identifier: Apache-2.0
"""What a client may ask of a build's image and config drive, over RPC and HTTP.

Validation (:mod:`conductor.validation.deploy`) names every bad field, never
shows user data; HTTP serves the new fields from microversion 1.1 only and
refuses them, named, under 1.0; the CLI turns its options into the request.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from keystoneauth1.session import Session

from conductor.api import microversion
from conductor.cli.http_client import HttpConductorAPI
from conductor.cli.login import Login
from conductor.common.exception import InvalidInput
from conductor.common.schemas import IMAGE_SCHEMA, MAX_USER_DATA
from conductor.validation import validate_build_request, validate_flavor_spec
from conductor.validation.deploy import _IMAGE_FIELDS
from tests.unit.test_api import call, errors, make_app

IMAGE = {"source": "http://images.test/u.raw", "checksum": "A" * 32}
SECRET = "password: hunter2"


def _refused(request: dict[str, Any]) -> InvalidInput:
    with pytest.raises(InvalidInput) as refused:
        validate_build_request({"flavor": "small", **request})
    return refused.value


def test_validation_knows_the_image_schemas_fields() -> None:
    assert frozenset(IMAGE_SCHEMA["properties"]) == _IMAGE_FIELDS


def test_a_valid_image_is_normalized() -> None:
    request = validate_build_request(
        {
            "flavor": "small",
            "image": {
                **IMAGE,
                "os_hash_algo": "sha256",
                "os_hash_value": "AB" * 32,
                "disk_format": None,  # null is absent
            },
        }
    )
    assert request.image == {
        "source": IMAGE["source"],
        "checksum": "a" * 32,
        "os_hash_algo": "sha256",
        "os_hash_value": "ab" * 32,
    }
    assert request.config_drive is None


@pytest.mark.parametrize(
    ("image", "fields"),
    [
        ({**IMAGE, "checksum": "a" * 31}, ["image.checksum"]),
        ({**IMAGE, "checksum": "g" * 32}, ["image.checksum"]),
        ({**IMAGE, "os_hash_algo": "sha1", "os_hash_value": "a" * 40}, ["image.os_hash_algo"]),
        ({**IMAGE, "os_hash_algo": "sha256", "os_hash_value": "a" * 128}, ["image.os_hash_value"]),
        ({**IMAGE, "os_hash_algo": "sha512"}, ["image.os_hash_value"]),
        ({"source": IMAGE["source"]}, ["image.os_hash_value"]),
        ({**IMAGE, "source": "file:///etc/shadow"}, ["image.source"]),
        ({**IMAGE, "source": "ftp://images.test/u.raw"}, ["image.source"]),
        ({**IMAGE, "source": "http:///no-host"}, ["image.source"]),
        ({**IMAGE, "source": "http://h/" + "a" * 2048}, ["image.source"]),
        ({"checksum": "a" * 32}, ["image.source"]),
        ({**IMAGE, "disk_format": "exe"}, ["image.disk_format"]),
        ({**IMAGE, "kernel": "http://h/k"}, ["image.ramdisk"]),
        ({**IMAGE, "kernel": "http://h/k", "ramdisk": "file:///r"}, ["image.ramdisk"]),
        ({**IMAGE, "colour": "red"}, ["image.colour"]),
        ("http://images.test/u.raw", ["image"]),
    ],
)
def test_a_bad_image_is_refused_naming_the_field(image: Any, fields: list[str]) -> None:
    assert _refused({"image": image}).fields == fields


def test_user_data_is_bounded_and_never_shown() -> None:
    at_limit = validate_build_request({"flavor": "small", "user_data": "é" * (MAX_USER_DATA // 2)})
    assert at_limit.config_drive == {"user_data": "é" * (MAX_USER_DATA // 2)}
    over = _refused({"user_data": SECRET + "é" * (MAX_USER_DATA // 2)})
    assert over.fields == ["user_data"]
    assert "bytes" in str(over) and "hunter2" not in str(over)
    not_text = _refused({"user_data": {"password": "hunter2"}})
    assert not_text.fields == ["user_data"] and "hunter2" not in str(not_text)


@pytest.mark.parametrize(
    ("request_", "fields"),
    [
        ({"meta_data": ["a"]}, ["meta_data"]),
        ({"meta_data": {"a": float("nan")}}, ["meta_data"]),
        ({"meta_data": {"a": {1: "b"}}}, ["meta_data"]),
        ({"meta_data": {"a": {"b", "c"}}}, ["meta_data"]),
        ({"meta_data": {"big": "x" * 70000}}, ["meta_data"]),
        ({"meta_data": {"uuid": "mine", "name": "n"}}, ["meta_data.uuid", "meta_data.name"]),
        ({"meta_data": {"public_keys": {"k": 7}}}, ["meta_data.public_keys.k"]),
        ({"meta_data": {"public_keys": "ssh-rsa AAAA"}}, ["meta_data.public_keys"]),
        ({"meta_data": {"meta": {"k": "v" * 256}}}, ["meta_data.meta.k"]),
        ({"network_data": "eth0"}, ["network_data"]),
        ({"network_data": {"links": {"id": "eth0"}}}, ["network_data.links"]),
    ],
)
def test_a_config_drive_that_is_not_json_objects_is_refused(
    request_: dict[str, Any], fields: list[str]
) -> None:
    assert _refused(request_).fields == fields


def test_every_problem_is_named_at_once() -> None:
    refused = _refused(
        {"image": {**IMAGE, "checksum": "x"}, "user_data": 5, "network_data": [], "count": 0}
    )
    assert refused.fields == ["count", "image.checksum", "user_data", "network_data"]


def test_a_flavors_default_image_is_validated_as_a_builds() -> None:
    spec = validate_flavor_spec({"name": "f", "resource_class": "rc", "default_image": IMAGE})
    assert spec.default_image == {"source": IMAGE["source"], "checksum": "a" * 32}
    assert spec.to_dict()["default_image"] == spec.default_image
    with pytest.raises(InvalidInput) as refused:
        validate_flavor_spec(
            {"name": "f", "resource_class": "rc", "default_image": {"source": "ftp://x/y"}}
        )
    assert refused.value.fields == ["default_image.source", "default_image.os_hash_value"]


# -- HTTP: microversion 1.1 -------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/instances", {"flavor": "small", "image": IMAGE}, "image"),
        ("/v1/instances", {"flavor": "small", "user_data": SECRET}, "user_data"),
        ("/v1/instances", {"flavor": "small", "meta_data": {}}, "meta_data"),
        ("/v1/instances", {"flavor": "small", "network_data": {}}, "network_data"),
        (
            "/v1/flavors",
            {"name": "f", "resource_class": "rc", "default_image": IMAGE},
            "default_image",
        ),
    ],
)
def test_the_new_fields_need_microversion_1_1(
    tmp_path: Path, path: str, body: dict[str, Any], field: str
) -> None:
    application, fake = make_app(tmp_path)
    old = call(application, "POST", path, body)  # no header: 1.0
    assert old.status_code == 400
    [error] = errors(old)
    assert error["field"] == field and "needs microversion 1.1" in error["reason"]
    assert "hunter2" not in old.text
    assert fake.calls == []  # refused before any conductor call
    new = call(application, "POST", path, body, OpenStack_API_Version="baremetal-fleet 1.1")
    assert new.status_code in (201, 202), new.text
    assert len(fake.calls) == 1
    # The fields of 1.0 stay served at 1.0.
    plain = {k: v for k, v in body.items() if k != field}
    assert call(application, "POST", path, plain).status_code in (201, 202)


def test_the_cli_asks_for_a_microversion_that_takes_images(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[str | None] = []

    class Response:
        status_code = 202
        content = b"{}"

        @staticmethod
        def json() -> dict[str, Any]:
            return {"instances": []}

    def request(url: str, method: str, **kwargs: Any) -> Response:
        headers = kwargs["headers"]
        sent.append(headers.get("OpenStack-API-Version"))
        return Response()

    client = HttpConductorAPI(Login("http://api.test", Session()), 1.0)
    monkeypatch.setattr(client.session, "request", request)
    client.build_instances({"flavor": "small"})
    client.build_instances({"flavor": "small", "image": IMAGE})
    client.build_instances({"flavor": "small", "user_data": SECRET})
    assert len(sent) == 3
    for header in sent:
        assert header is not None and header.startswith("baremetal-fleet ")
        asked = microversion.requested(header)
        assert microversion.IMAGES <= asked <= microversion.MAX_VERSION, header


def test_the_http_cli_sends_a_rebuilds_new_fields_at_1_4(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[str | None, Any]] = []

    class Response:
        status_code = 202
        content = b"{}"

        @staticmethod
        def json() -> dict[str, Any]:
            return {}

    def request(url: str, method: str, **kwargs: Any) -> Response:
        headers = kwargs["headers"]
        sent.append((headers.get("OpenStack-API-Version"), kwargs.get("json")))
        return Response()

    client = HttpConductorAPI(Login("http://api.test", Session()), 1.0)
    monkeypatch.setattr(client.session, "request", request)
    client.rebuild_instance("i-1")
    client.rebuild_instance("i-1", image=IMAGE, user_data=SECRET, network_data=None)
    assert [body for _header, body in sent] == [
        {"rebuild": {}},
        # user_data base64-encoded, as the microversion the CLI speaks (1.7 on) takes it
        {"rebuild": {"image": IMAGE, "user_data": base64.b64encode(SECRET.encode()).decode()}},
    ]
    header = sent[1][0]
    assert header is not None and microversion.requested(header) >= microversion.REBUILD_IMAGE
