# SPDX-License-Identifier: Apache-2.0
"""A hung or unreachable Ironic is said at once: request timeouts, the agent's
probe of an idle Ironic, and the ``backend`` capability it announces
(:mod:`compute_agent.backend_check`).

The Ironic client is the real :class:`BaremetalClient` over a scripted
openstacksdk proxy raising keystoneauth's real exceptions.
"""

from __future__ import annotations

import logging
import socket
import time
import types
import uuid as uuidlib
from pathlib import Path
from typing import Any

import pytest
from keystoneauth1 import exceptions as ks_exceptions
from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from compute_agent.backend_check import CAPABILITY, BackendCheck
from compute_agent.drivers import ActionContext
from compute_agent.drivers.ironic import driver as ironic_driver
from compute_agent.drivers.ironic.driver import IronicDriver
from conductor.common.conf import ironic as ironic_conf
from conductor.common.conf import placement as placement_conf
from conductor.common.conf.keystoneauth import list_opts
from conductor.common.exception import ServiceUnavailable
from conductor.common.ironic.client import BaremetalClient
from conductor.common.objects import Node
from conductor.common.service_outage import ServiceOutage


class ScriptedProxy:
    """openstacksdk's baremetal proxy: GETs answer, or raise what is queued."""

    def __init__(self) -> None:
        self.errors: list[Exception] = []
        self.gets: list[tuple[str, dict[str, Any]]] = []
        self.timeouts: list[float | None] = []

    def get(
        self,
        path: str,
        *,
        params: dict[str, Any],
        microversion: str,
        raise_exc: bool,
        timeout: float | None = None,
    ) -> Any:
        self.gets.append((path, params))
        self.timeouts.append(timeout)
        if self.errors:
            raise self.errors.pop(0)
        body = {"nodes": []} if path == "/nodes" else {"uuid": path.rsplit("/", 1)[1]}
        return types.SimpleNamespace(status_code=200, json=lambda: body)


class FakeMembership:
    def __init__(self, accepts: bool = True) -> None:
        self.accepts = accepts
        self.announced: list[tuple[str, Any]] = []

    def announce(self, name: str, value: Any) -> bool:
        self.announced.append((name, value))
        return self.accepts


def make_conf(directory: Path, text: str = "") -> cfg.ConfigOpts:
    path = directory / f"{uuidlib.uuid4()}.conf"
    path.write_text(text)
    conf = cfg.ConfigOpts()
    ironic_conf.OPTIONS.register(conf)
    placement_conf.OPTIONS.register(conf)
    conf(["--config-file", str(path)], project="ringfleet", default_config_files=[])
    return conf


def make_driver(directory: Path, proxy: ScriptedProxy, text: str = "") -> IronicDriver:
    client = BaremetalClient(proxy, "http://ironic.test:6385")
    return IronicDriver(make_conf(directory, text), "agent-1", client=client)


# -- request timeouts -----------------------------------------------------------------------


def test_ironic_and_placement_requests_time_out_by_default(tmp_path: Path) -> None:
    """keystoneauth has no timeout: ringfleet gives both services one, which
    the session a client is built from carries."""
    conf = make_conf(tmp_path)
    assert conf.ironic.timeout == conf.placement.timeout == ironic_conf.REQUEST_TIMEOUT
    session = ks_loading.load_session_from_conf_options(conf, "ironic")
    assert session.timeout == ironic_conf.REQUEST_TIMEOUT


def test_an_operators_timeout_wins(tmp_path: Path) -> None:
    conf = make_conf(tmp_path, "[ironic]\ntimeout = 42\n")
    assert (conf.ironic.timeout, conf.placement.timeout) == (42, placement_conf.REQUEST_TIMEOUT)


def test_the_config_reference_lists_the_timeout_default_of_each_group() -> None:
    """The sample config shows what the service uses, not keystoneauth's None;
    keystoneauth's shared option objects are not changed for other groups."""
    _group, listed = ironic_conf.OPTIONS.listing()
    [timeout] = [opt for opt in listed if opt.dest == "timeout"]
    assert timeout.default == ironic_conf.REQUEST_TIMEOUT
    [plain] = [opt for opt in list_opts() if opt.dest == "timeout"]
    assert plain.default is None


# -- the driver's judgement -----------------------------------------------------------------


def test_an_idle_driver_probes_ironic_and_says_why_it_cannot_reach_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    proxy = ScriptedProxy()
    driver = make_driver(tmp_path, proxy, "[ironic]\ntimeout = 0.001\n")
    proxy.errors.append(ks_exceptions.ConnectTimeout("Request to http://ironic.test timed out"))
    with caplog.at_level(logging.INFO):
        problem = driver.backend_problem()
        assert problem is not None and "timed out" in problem
        # Down: the next check probes again and keeps the first reason.
        proxy.errors.append(ks_exceptions.ConnectFailure("refused"))
        time.sleep(0.01)  # idle past the (tiny) timeout again
        assert driver.backend_problem() == problem
        time.sleep(0.01)
        assert driver.backend_problem() is None  # answered: back
    assert [path for path, _ in proxy.gets] == ["/nodes"] * 3
    assert proxy.gets[0][1] == {"fields": "uuid", "limit": 1}
    outage_lines = [r.levelname for r in caplog.records if "Ironic" in r.getMessage()]
    assert outage_lines == ["WARNING", "INFO"]  # one when it goes, one when it is back


def test_a_busy_driver_is_judged_by_its_own_requests_without_a_probe(tmp_path: Path) -> None:
    proxy = ScriptedProxy()
    driver = make_driver(tmp_path, proxy)  # the default timeout: 10 s of idleness
    assert driver.backend_problem() is None
    assert proxy.gets == []  # a request was sent less than the timeout ago (the start)


# -- the announcement -----------------------------------------------------------------------


def test_the_check_announces_each_change_once() -> None:
    problems: list[str | None] = [None, None, "Ironic unreachable", "Ironic unreachable", None]
    membership = FakeMembership()
    check = BackendCheck("agent-1", lambda: problems.pop(0), membership, interval=1.0)  # type: ignore[arg-type]
    for _ in range(5):
        check.check()
    assert membership.announced == [(CAPABILITY, "Ironic unreachable"), (CAPABILITY, None)]


def test_an_announcement_the_group_did_not_take_is_made_again() -> None:
    membership = FakeMembership(accepts=False)
    check = BackendCheck("agent-1", lambda: "down", membership, interval=1.0)  # type: ignore[arg-type]
    check.check()
    membership.accepts = True
    check.check()
    check.check()
    assert membership.announced == [(CAPABILITY, "down")] * 2


def test_a_stopped_check_announces_nothing() -> None:
    membership = FakeMembership()
    check = BackendCheck("agent-1", lambda: "down", membership, interval=1.0)  # type: ignore[arg-type]
    check.stop()
    check.check()
    assert membership.announced == []


def test_a_client_is_made_without_ironic_and_fails_its_requests_as_an_outage(
    tmp_path: Path,
) -> None:
    """Making the client asks Ironic nothing (an agent starts while Ironic is
    away); its first request finds Ironic gone: an outage, retried later."""
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    conf = make_conf(
        tmp_path,
        f"[ironic]\nauth_type = none\nendpoint_override = http://127.0.0.1:{port}\n",
    )
    client = BaremetalClient.from_conf(conf)
    for _ in range(2):  # the failed discovery is tried again, not remembered
        with pytest.raises(ServiceUnavailable):
            client.get_node("n-1", action="inspect")
    assert client.outage.down


def test_a_timeout_of_a_request_sent_during_the_outage_is_no_new_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Requests queued while Ironic hung time out after it answers again:
    that outage is over, and they do not start another (one WARNING, one INFO)."""
    outage = ServiceOutage("Ironic", "http://ironic.test")
    with caplog.at_level(logging.INFO, logger="conductor.common.service_outage"):
        hung_at = time.monotonic()
        outage.unavailable("timed out", hung_at)  # the first request times out
        time.sleep(0.01)
        outage.answered(time.monotonic())  # a request sent now is answered: back
        error = outage.unavailable("timed out", hung_at + 0.001)  # sent while hung
        assert isinstance(error, ServiceUnavailable) and not outage.down
        outage.unavailable("timed out", time.monotonic())  # sent after: a new outage
        assert outage.down
    levels = [r.levelname for r in caplog.records]
    assert levels == ["WARNING", "INFO", "WARNING"]


def test_an_accepts_read_waits_seconds_and_none_while_ironic_is_known_down(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The conductor waits for an accept: its read of the node is bounded
    well below accept_timeout, a slow answer is no outage (the deploy's own
    requests say a real one), and no read is made while Ironic is known down."""
    proxy = ScriptedProxy()
    driver = make_driver(tmp_path, proxy)
    node = Node(uuid="n-1", name="n1", resource_class="baremetal")
    ctx = ActionContext("n-1", "agent-1", 1, "i-1")
    proxy.errors.append(ks_exceptions.ConnectTimeout("Request to /v1/nodes/n-1 timed out"))
    with caplog.at_level(logging.INFO), pytest.raises(ServiceUnavailable, match="within"):
        driver.inspect(ctx, node)
    assert proxy.timeouts == [ironic_driver._INSPECT_WITHIN] and not caplog.records
    assert driver.inspect(ctx, node).instance_uuid is None  # answered: read as usual
    proxy.errors.append(ks_exceptions.ConnectFailure("refused"))
    with pytest.raises(ServiceUnavailable):
        driver.get_power_state(ctx, node)  # an outage, said once
    reads = len(proxy.gets)
    with pytest.raises(ServiceUnavailable, match="refused"):
        driver.inspect(ctx, node)
    assert len(proxy.gets) == reads  # known down: the accept does not wait for it


def test_a_driver_whose_check_fails_is_said_once_not_every_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    membership = FakeMembership()

    def broken() -> str | None:
        raise KeyError("node")

    check = BackendCheck("agent-1", broken, membership, interval=1.0)  # type: ignore[arg-type]
    with caplog.at_level(logging.DEBUG, logger="compute_agent.backend_check"):
        for _ in range(3):
            check.check()
    levels = [r.levelname for r in caplog.records]
    assert levels == ["ERROR", "DEBUG", "DEBUG"] and membership.announced == []
