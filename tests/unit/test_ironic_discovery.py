# SPDX-License-Identifier: Apache-2.0
"""The Ironic client's first use asks Ironic for its API versions: one attempt
at a time, shared by every thread that needs it, and bounded for a quick read."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from keystoneauth1 import exceptions as ks_exceptions

from conductor.common.exception import ServiceUnavailable
from conductor.common.ironic.client import BaremetalClient, _LazyProxy


class HungDiscovery:
    """openstacksdk's proxy maker against a hung Ironic: each attempt waits
    until released, then fails as keystoneauth does at its timeout."""

    def __init__(self) -> None:
        self.attempts = 0
        self.release = threading.Event()
        self.ended = threading.Event()

    def __call__(self) -> Any:
        self.attempts += 1
        self.release.wait(30)
        self.ended.set()
        raise ks_exceptions.DiscoveryFailure("Unable to find a version discovery document")


def test_threads_needing_the_proxy_meanwhile_share_one_attempt_and_its_failure() -> None:
    make = HungDiscovery()
    client = BaremetalClient(_LazyProxy(make), "http://ironic")
    failures: list[BaseException] = []

    def read() -> None:
        try:
            client.get_node("node-1", action="get_power_state")
        except ServiceUnavailable as exc:
            failures.append(exc)

    readers = [threading.Thread(target=read) for _ in range(3)]
    for reader in readers:
        reader.start()
    time.sleep(0.3)  # every reader waits now
    make.release.set()
    for reader in readers:
        reader.join(10)
    # One attempt, not one per thread in turn (three timeouts for the last).
    assert make.attempts == 1
    assert len(failures) == 3
    assert all("version discovery" in str(failure) for failure in failures)


def test_a_quick_read_waits_no_longer_than_its_bound_for_the_discovery() -> None:
    make = HungDiscovery()
    client = BaremetalClient(_LazyProxy(make), "http://ironic")
    try:
        with pytest.raises(ServiceUnavailable, match=r"did not answer inspect within 0\.2 s"):
            client.get_node("node-1", action="inspect", quick=0.2)
        assert not make.ended.is_set()  # answered while the attempt still waits
        assert not client.outage.down  # a quick read's silence is no outage
    finally:
        make.release.set()


def test_the_next_use_after_a_failed_attempt_tries_again_and_keeps_the_proxy() -> None:
    class Proxy:
        def __init__(self) -> None:
            self.default_microversion = "1.0"

    made: list[Proxy] = []

    def make() -> Proxy:
        if not made:
            made.append(Proxy())
            raise ks_exceptions.ConnectFailure("refused")
        made.append(Proxy())
        return made[-1]

    lazy = _LazyProxy(make)
    with pytest.raises(ks_exceptions.ConnectFailure):
        lazy.made()
    assert lazy.default_microversion == "1.0"
    assert lazy.made() is made[1]
    assert len(made) == 2
