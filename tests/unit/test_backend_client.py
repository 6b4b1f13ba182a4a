# SPDX-License-Identifier: Apache-2.0
"""The etcd client's environment read once: what every request would have read."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from etcd3gw.client import Etcd3Client
from tooz import coordination

from hashring.backend_client import settle_environment


class Etcd3Coordinator:
    """What :func:`settle_environment` sees of tooz's etcd3gw driver (whose
    constructor asks the server for its version: none here)."""

    __module__ = "tooz.drivers.etcd3gw"

    def __init__(self) -> None:
        self.client = Etcd3Client(host="127.0.0.1", port=2379, api_path="/v3/")


def _settings(session: requests.Session, url: str) -> dict[str, object]:
    return session.merge_environment_settings(url, {}, None, None, None)


@pytest.mark.parametrize(
    "environment",
    [
        {},
        {"HTTP_PROXY": "http://proxy.example:3128", "NO_PROXY": "example.org"},
        {"HTTP_PROXY": "http://proxy.example:3128", "NO_PROXY": "127.0.0.1"},
        {"REQUESTS_CA_BUNDLE": "/etc/ssl/ca.pem"},
        {"CURL_CA_BUNDLE": "/etc/ssl/curl.pem"},
    ],
    ids=["none", "proxied", "proxy-bypassed", "ca-bundle", "curl-bundle"],
)
def test_a_settled_session_sends_what_the_environment_said(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, environment: dict[str, str]
) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc of the machine's
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    coordinator = Etcd3Coordinator()
    url = coordinator.client.get_url("/kv/range")
    before = _settings(coordinator.client.session, url)
    settle_environment(coordinator)
    session = coordinator.client.session
    assert session.trust_env is False
    # Afterwards the environment is not read: changing it changes nothing.
    monkeypatch.setenv("HTTP_PROXY", "http://elsewhere.example:8080")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/elsewhere.pem")
    assert _settings(session, url) == before


def test_other_back_ends_are_left_alone(tmp_path: Path) -> None:
    coordinator = coordination.get_coordinator(f"file://{tmp_path}", b"member")
    settle_environment(coordinator)  # no client session to settle: nothing raised
    assert not hasattr(coordinator, "client")
