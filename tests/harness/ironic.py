# SPDX-License-Identifier: Apache-2.0
"""A tiny client for the test Ironic, to set up and check its nodes from tests.

``tools/with-test-servers.sh`` starts a real standalone Ironic (fake
hardware, no Keystone) at ``RINGFLEET_TEST_IRONIC_URL``.  Tests enroll nodes
with :class:`IronicHarness` and check Ironic's own records with it: it speaks
plain HTTP through ``requests`` rather than openstacksdk, so what it sees does
not depend on the code under test (which talks to Ironic through the SDK).

Each test should use its own shard (:func:`unique_shard`): tests sharing one
Ironic then never see each other's nodes.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import requests

__all__ = [
    "API_VERSION",
    "IronicError",
    "IronicHarness",
    "IronicWatch",
    "Sighting",
    "fleet_config",
    "unique_shard",
]

#: Microversion sent with every request (shards need 1.82).
API_VERSION = "1.82"
#: Nodes created at this version are born ``available`` (no enroll/manage/provide).
_BORN_AVAILABLE_VERSION = "1.10"
_TIMEOUT = 30.0


class IronicError(AssertionError):
    """Ironic answered with an unexpected status."""


def unique_shard(prefix: str = "rf-test") -> str:
    """A shard name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def fleet_config(url: str, shard: str) -> str:
    """The ``[ironic]`` group of a test fleet on this Ironic: noauth, the nodes
    of ``shard`` only (or of several, joined by commas), short polls (a fake
    deploy step takes a second)."""
    return (
        "[ironic]\n"
        "auth_type = none\n"
        f"endpoint_override = {url}\n"
        f"shards = {shard}\n"
        "poll_interval = 0.05\n"
        "poll_max_interval = 0.5\n"
    )


def _check(response: requests.Response, *expected: int) -> requests.Response:
    if response.status_code not in expected:
        raise IronicError(
            f"{response.request.method} {response.url}: {response.status_code} "
            f"(expected {', '.join(map(str, expected))}): {response.text[:500]}"
        )
    return response


def _locked(response: requests.Response) -> bool:
    """SQLite's "database is locked", which Ironic returns as a 500."""
    return response.status_code == 500 and "database is locked" in response.text


class IronicHarness:
    """Enroll, inspect, change and delete fake-hardware nodes of the test Ironic."""

    def __init__(self, url: str, *, api_version: str = API_VERSION) -> None:
        self.url = url.rstrip("/")
        self.api_version = api_version
        self._session = requests.Session()

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> IronicHarness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ requests --

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        version: str | None = None,
        retry_locked: float = 10.0,
        session: requests.Session | None = None,
    ) -> requests.Response:
        """One API call at ``version`` (default :data:`API_VERSION`), unchecked.

        A 500 "database is locked" (SQLite under concurrent writes) is retried
        for up to ``retry_locked`` s.
        """
        headers = {"X-OpenStack-Ironic-API-Version": version or self.api_version}
        deadline = time.monotonic() + retry_locked
        while True:
            response = (session or self._session).request(
                method, f"{self.url}{path}", json=json, headers=headers, timeout=_TIMEOUT
            )
            if not _locked(response) or time.monotonic() > deadline:
                return response
            time.sleep(0.05)

    def _patch(self, node: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = _check(
            self.request("PATCH", f"/v1/nodes/{node}", json=ops), 200
        ).json()
        return result

    # --------------------------------------------------------------- nodes --

    def enroll(
        self,
        count: int,
        *,
        shard: str,
        resource_class: str = "baremetal",
        properties: Mapping[str, Any] | None = None,
        traits: Iterable[str] = (),
        name_prefix: str | None = None,
        timeout: float = 60.0,
    ) -> list[str]:
        """Create ``count`` fake-hardware nodes in ``shard``; their UUIDs.

        They are returned ``available`` and powered on (Ironic and Nova treat a
        node without a power state as unusable).  Created at API 1.10, where
        nodes are born ``available`` (no manage/provide/cleaning), then given
        shard, resource class and properties at :data:`API_VERSION`, traits
        one at a time, and powered on; the power actions overlap, and the
        wait is for all of them at the end.
        """
        prefix = name_prefix or shard
        props = dict(properties or {"cpus": 4, "memory_mb": 8192, "local_gb": 100})
        wanted_traits = list(traits)
        uuids: list[str] = []
        for index in range(count):
            body = {"driver": "fake-hardware", "name": f"{prefix}-{index}"}
            created = _check(
                self.request("POST", "/v1/nodes", json=body, version=_BORN_AVAILABLE_VERSION),
                201,
            ).json()
            node = created["uuid"]
            uuids.append(node)
            self._patch(
                node,
                [
                    {"op": "add", "path": "/shard", "value": shard},
                    {"op": "add", "path": "/resource_class", "value": resource_class},
                    {"op": "add", "path": "/properties", "value": props},
                ],
            )
            # Traits before the power action: while it holds the node's lock
            # a trait PUT waits about a second for it.
            for trait in wanted_traits:
                _check(self.request("PUT", f"/v1/nodes/{node}/traits/{trait}"), 204)
            self.set_power(node, on=True, wait=False)
        for node in uuids:
            self.wait_for(
                node,
                lambda n: n["power_state"] == "power on" and n["target_power_state"] is None,
                timeout,
                what="powered on",
            )
            self.wait_for(node, lambda n: n["provision_state"] == "available", timeout)
        return uuids

    def node(self, node: str) -> dict[str, Any]:
        """The node's full record (``GET /v1/nodes/{node}``)."""
        result: dict[str, Any] = _check(self.request("GET", f"/v1/nodes/{node}"), 200).json()
        return result

    def nodes(self, shard: str) -> list[dict[str, Any]]:
        """Detailed records of all nodes in ``shard``."""
        found: list[dict[str, Any]] = []
        path: str | None = f"/v1/nodes/detail?shard={shard}&limit=1000"
        while path:
            page = _check(self.request("GET", path), 200).json()
            found.extend(page["nodes"])
            following = page.get("next")
            path = following[following.index("/v1/") :] if following else None
        return found

    def update(self, node: str, **fields: Any) -> dict[str, Any]:
        """Set fields of the node (``deploy_interface="custom-agent"``,
        ``automated_clean=False``...); its record afterwards."""
        ops = [{"op": "add", "path": f"/{name}", "value": v} for name, v in fields.items()]
        return self._patch(node, ops)

    def claim(self, node: str, instance_uuid: str) -> dict[str, Any]:
        """Set the node's ``instance_uuid`` as a claimant other than ringfleet would
        (another Nova, an operator); its record afterwards."""
        return self._patch(node, [{"op": "add", "path": "/instance_uuid", "value": instance_uuid}])

    def release(self, node: str) -> dict[str, Any]:
        """Clear the node's ``instance_uuid``; its record afterwards."""
        return self._patch(node, [{"op": "remove", "path": "/instance_uuid"}])

    def set_provision_state(
        self, node: str, target: str, *, until: str, timeout: float = 60
    ) -> dict[str, Any]:
        """Ask for provision ``target`` (``active``: a deploy, which the fake
        deploy interface runs without an image; ``deleted``: a teardown) as
        another Nova or an operator would, and wait until Ironic shows
        ``until`` at rest; the record then."""
        path = f"/v1/nodes/{node}/states/provision"
        _check(self.request("PUT", path, json={"target": target}), 202)
        return self.wait_for(
            node,
            lambda n: n["provision_state"] == until and n["target_provision_state"] is None,
            timeout,
            what=f"{target} -> {until}",
        )

    def set_power(self, node: str, *, on: bool, wait: bool = True, timeout: float = 30) -> None:
        """Power the node on or off (and wait for the new power state)."""
        target = "power on" if on else "power off"
        _check(self.request("PUT", f"/v1/nodes/{node}/states/power", json={"target": target}), 202)
        if wait:
            self.wait_for(
                node,
                lambda n: n["power_state"] == target and n["target_power_state"] is None,
                timeout,
                what=target,
            )

    def set_maintenance(self, node: str, on: bool, reason: str | None = None) -> None:
        """Set or clear maintenance mode (synchronous)."""
        path = f"/v1/nodes/{node}/maintenance"
        if on:
            body = {"reason": reason} if reason else None
            _check(self.request("PUT", path, json=body), 202)
        else:
            _check(self.request("DELETE", path), 202)

    def delete(self, node: str) -> None:
        """Delete the node (it must not be in maintenance-blocking states)."""
        _check(self.request("DELETE", f"/v1/nodes/{node}"), 204)

    def wait_for(
        self,
        node: str,
        predicate: Callable[[dict[str, Any]], object],
        timeout: float,
        *,
        what: str = "condition",
        step: float = 0.05,
    ) -> dict[str, Any]:
        """Poll the node every ``step`` s until ``predicate(record)`` is true; the record.

        :raises AssertionError: when ``timeout`` s passed first (with the last record).
        """
        deadline = time.monotonic() + timeout
        while True:
            record = self.node(node)
            if predicate(record):
                return record
            if time.monotonic() > deadline:
                state = {
                    k: record.get(k)
                    for k in (
                        "provision_state",
                        "target_provision_state",
                        "power_state",
                        "target_power_state",
                        "maintenance",
                        "last_error",
                    )
                }
                raise AssertionError(
                    f"node {node}: not within {timeout:.1f} s: {what}; last seen {state}"
                )
            time.sleep(step)


@dataclasses.dataclass(frozen=True)
class Sighting:
    """One node as :class:`IronicWatch` saw it change, at ``at`` (``time.monotonic()``)."""

    at: float
    provision_state: str | None
    target_provision_state: str | None
    instance_uuid: str | None
    last_error: str | None


class IronicWatch:
    """Ironic's nodes of some shards, listed every ``interval`` s in a thread:
    each node's provision states as they changed, and Ironic's outages.

    What a test cannot catch by reading now and then: a state that lasts a
    moment (a ``deploy failed`` an agent tears down at its next poll) and
    the ``last_error`` it carried.  One listing of every shard at once,
    only the fields watched (about 10 ms of Ironic's time).
    """

    _FIELDS = "uuid,provision_state,target_provision_state,instance_uuid,last_error"

    def __init__(self, url: str, shards: Iterable[str], *, interval: float = 0.1) -> None:
        self._harness = IronicHarness(url)
        self._path = f"/v1/nodes?shard={','.join(shards)}&fields={self._FIELDS}&limit=1000"
        self._interval = interval
        self._lock = threading.Lock()
        self._seen: dict[str, list[Sighting]] = {}
        #: (from, to) of each time Ironic did not answer, ``to`` None while it lasts
        self.outages: list[tuple[float, float | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ironic-watch", daemon=True)

    def __enter__(self) -> IronicWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._harness.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                page = self._harness.request("GET", self._path, retry_locked=0).json()["nodes"]
            except (requests.RequestException, ValueError, KeyError):
                self._down(time.monotonic())
            else:
                self._up(time.monotonic(), page)
            self._stop.wait(self._interval)

    def _down(self, now: float) -> None:
        with self._lock:
            if not self.outages or self.outages[-1][1] is not None:
                self.outages.append((now, None))

    def _up(self, now: float, page: list[dict[str, Any]]) -> None:
        with self._lock:
            if self.outages and self.outages[-1][1] is None:
                self.outages[-1] = (self.outages[-1][0], now)
            for record in page:
                seen = Sighting(
                    now,
                    record["provision_state"],
                    record["target_provision_state"],
                    record["instance_uuid"],
                    record["last_error"],
                )
                history = self._seen.setdefault(record["uuid"], [])
                if not history or dataclasses.replace(history[-1], at=now) != seen:
                    history.append(seen)

    def history(self, node: str) -> list[Sighting]:
        """What the node was seen to be, oldest first."""
        with self._lock:
            return list(self._seen.get(node, ()))

    def first(self, node: str, state: str, *, after: float = 0.0) -> Sighting | None:
        """The first sighting of ``node`` in provision ``state`` after ``after``."""
        return next(
            (s for s in self.history(node) if s.provision_state == state and s.at >= after), None
        )

    def failures(self) -> dict[str, list[Sighting]]:
        """node -> its sightings that carried a ``last_error`` (Ironic's reason
        for a failed state), oldest first."""
        with self._lock:
            return {
                node: found
                for node, history in self._seen.items()
                if (found := [s for s in history if s.last_error])
            }

    def timeline(self, since: float) -> str:
        """Every node's changes, in seconds after ``since``, for a failure message."""
        lines = []
        with self._lock:
            for start, end in self.outages:
                until = "" if end is None else f" to {end - since:+.1f}"
                lines.append(f"  Ironic unreachable from {start - since:+.1f}{until}")
            for node, history in sorted(self._seen.items()):
                lines.append(f"  node {node}:")
                lines.extend(
                    f"    {s.at - since:+7.2f} s {s.provision_state} -> "
                    f"{s.target_provision_state} instance={s.instance_uuid} "
                    f"last_error={s.last_error!r}"
                    for s in history
                )
        return "\n".join(lines)
