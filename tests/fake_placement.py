# SPDX-License-Identifier: Apache-2.0
"""An in-memory Placement behind keystoneauth's adapter interface, for unit tests.

It answers the requests :class:`conductor.common.placement.client.PlacementClient`
sends the way openstack-placement 16 (microversion 1.39) does, including its
refusals: a stale provider or consumer generation (409
``placement.concurrent_update``), a taken name (409), an allocation beyond
capacity (409), a trait or resource class it does not know (400), a
provider with allocations deleted (409).  ``tests/functional/
test_placement.py`` runs the same contract cases against a real Placement,
so the two cannot drift apart unnoticed.

Fault injection: ``fail_next`` holds responses (status, body) or exceptions
sent instead of the next requests' answers.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from typing import Any

STANDARD_TRAITS = frozenset({"HW_CPU_X86_AVX2", "HW_CPU_X86_VMX", "COMPUTE_NODE"})
STANDARD_CLASSES = frozenset({"VCPU", "MEMORY_MB", "DISK_GB"})


class FakeResponse:
    def __init__(self, status: int, body: Any = None, text: str | None = None) -> None:
        self.status_code = status
        if text is not None:
            self.text = text
        else:
            self.text = "" if body is None else json.dumps(body)
        self.content = self.text.encode()

    def json(self) -> Any:
        return json.loads(self.text)


def _error(status: int, detail: str, code: str = "placement.undefined_code") -> FakeResponse:
    return FakeResponse(
        status, {"errors": [{"status": status, "title": "x", "detail": detail, "code": code}]}
    )


@dataclasses.dataclass
class _Provider:
    uuid: str
    name: str
    generation: int = 0
    inventories: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    traits: set[str] = dataclasses.field(default_factory=set)
    aggregates: set[str] = dataclasses.field(default_factory=set)


@dataclasses.dataclass
class _Consumer:
    generation: int
    project_id: str
    user_id: str
    consumer_type: str
    allocations: dict[str, dict[str, int]]  # provider -> resources


class FakePlacement:
    """The adapter: ``request(path, method, **kwargs)`` -> a response."""

    def __init__(self) -> None:
        self.providers: dict[str, _Provider] = {}
        self.consumers: dict[str, _Consumer] = {}
        self.traits: set[str] = set(STANDARD_TRAITS)
        self.classes: set[str] = set(STANDARD_CLASSES)
        self.requests: list[tuple[str, str]] = []
        self.fail_next: list[Any] = []
        self._lock = threading.Lock()

    # -- what tests look at ----------------------------------------------------------

    def count(self, method: str, prefix: str = "") -> int:
        return sum(1 for m, p in self.requests if m == method and p.startswith(prefix))

    def usage(self, provider: str) -> dict[str, int]:
        used: dict[str, int] = {}
        for consumer in self.consumers.values():
            for rc, n in consumer.allocations.get(provider, {}).items():
                used[rc] = used.get(rc, 0) + n
        return used

    # -- the adapter -----------------------------------------------------------------

    def request(self, path: str, method: str, **kwargs: Any) -> FakeResponse:
        with self._lock:
            self.requests.append((method, path))
            if self.fail_next:
                fault = self.fail_next.pop(0)
                if isinstance(fault, BaseException):
                    raise fault
                status, body = fault
                if isinstance(body, str):
                    return FakeResponse(status, text=body)
                return FakeResponse(status, body)
            assert kwargs.get("microversion") == "1.39", kwargs
            return self._route(method, path, kwargs.get("json"), kwargs.get("params") or {})

    def _route(self, method: str, path: str, body: Any, params: dict[str, str]) -> FakeResponse:
        parts = path.strip("/").split("/")
        if parts[0] == "resource_providers":
            if len(parts) == 1:
                return self._providers(method, body, params)
            rp = self.providers.get(parts[1])
            if rp is None:
                return _error(404, f"No resource provider with uuid {parts[1]} found")
            if len(parts) == 2:
                return self._provider(method, rp, body)
            handler = {
                "inventories": self._inventories,
                "traits": self._rp_traits,
                "aggregates": self._aggregates,
                "allocations": self._rp_allocations,
            }[parts[2]]
            return handler(method, rp, body)
        if parts[0] == "resource_classes" and method == "PUT":
            name = parts[1]
            if not name.startswith("CUSTOM_"):
                return _error(400, "not a custom resource class")
            new = name not in self.classes
            self.classes.add(name)
            return FakeResponse(201 if new else 204)
        if parts[0] == "traits":
            if method == "PUT":
                if not parts[1].startswith("CUSTOM_"):
                    return _error(
                        400, "The trait is invalid. A valid trait must include prefix 'CUSTOM_'."
                    )
                new = parts[1] not in self.traits
                self.traits.add(parts[1])
                return FakeResponse(201 if new else 204)
            names = params.get("name", "")
            wanted = set(names[3:].split(",")) if names.startswith("in:") else self.traits
            return FakeResponse(200, {"traits": sorted(self.traits & wanted)})
        if parts[0] == "allocations":
            if len(parts) == 1 and method == "POST":
                return self._post_allocations(body)
            consumer = parts[1]
            if method == "GET":
                found = self.consumers.get(consumer)
                if found is None:
                    return FakeResponse(200, {"allocations": {}})
                return FakeResponse(
                    200,
                    {
                        "allocations": {
                            p: {"resources": r, "generation": self.providers[p].generation}
                            for p, r in found.allocations.items()
                        },
                        "consumer_generation": found.generation,
                        "project_id": found.project_id,
                        "user_id": found.user_id,
                        "consumer_type": found.consumer_type,
                    },
                )
            if method == "DELETE":
                found = self.consumers.pop(consumer, None)
                if found is None:
                    return _error(404, f"No allocations for consumer '{consumer}'")
                for p in found.allocations:
                    self.providers[p].generation += 1
                return FakeResponse(204)
        return _error(405, f"{method} {path} not in the fake")

    def _providers(self, method: str, body: Any, params: dict[str, str]) -> FakeResponse:
        if method == "POST":
            uuid, name = body["uuid"], body["name"]
            if uuid in self.providers:
                return _error(
                    409,
                    f"Conflicting resource provider uuid: {uuid} already exists.",
                    "placement.duplicate_uuid",
                )
            if any(p.name == name for p in self.providers.values()):
                return _error(
                    409,
                    f"Conflicting resource provider name: {name} already exists.",
                    "placement.duplicate_name",
                )
            rp = self.providers[uuid] = _Provider(uuid, name)
            return FakeResponse(200, self._provider_body(rp))
        found = list(self.providers.values())
        if "member_of" in params:
            found = [p for p in found if params["member_of"] in p.aggregates]
        return FakeResponse(200, {"resource_providers": [self._provider_body(p) for p in found]})

    @staticmethod
    def _provider_body(rp: _Provider) -> dict[str, Any]:
        return {"uuid": rp.uuid, "name": rp.name, "generation": rp.generation, "links": []}

    def _provider(self, method: str, rp: _Provider, body: Any) -> FakeResponse:
        if method == "GET":
            return FakeResponse(200, self._provider_body(rp))
        if method == "PUT":
            if any(p.name == body["name"] and p.uuid != rp.uuid for p in self.providers.values()):
                return _error(
                    409,
                    f"Conflicting resource provider name: {body['name']} already exists.",
                    "placement.duplicate_name",
                )
            rp.name = body["name"]
            return FakeResponse(200, self._provider_body(rp))
        if method == "DELETE":
            if self.usage(rp.uuid):
                return _error(
                    409,
                    f"Unable to delete resource provider {rp.uuid}: "
                    "Resource provider has allocations.",
                )
            del self.providers[rp.uuid]
            return FakeResponse(204)
        return _error(405, method)

    def _stale(self, rp: _Provider, body: Any) -> FakeResponse | None:
        if body.get("resource_provider_generation") != rp.generation:
            return _error(
                409,
                "resource provider generation conflict",
                "placement.concurrent_update",
            )
        return None

    def _inventories(self, method: str, rp: _Provider, body: Any) -> FakeResponse:
        if method == "GET":
            return FakeResponse(
                200, {"resource_provider_generation": rp.generation, "inventories": rp.inventories}
            )
        stale = self._stale(rp, body)
        if stale is not None:
            return stale
        new = body["inventories"]
        unknown = set(new) - self.classes
        if unknown:
            return _error(
                400,
                f"Unknown resource class in inventory for resource provider {rp.uuid}: "
                f"{sorted(unknown)[0]}",
            )
        used = self.usage(rp.uuid)
        removed = [rc for rc in used if rc not in new]
        if removed:
            return _error(
                409,
                f"Inventory for '{removed[0]}' on resource provider '{rp.uuid}' in use.",
                "placement.inventory.inuse",
            )
        rp.inventories = {
            rc: {
                "min_unit": 1,
                "max_unit": inv["total"],
                "step_size": 1,
                "allocation_ratio": 1.0,
                "reserved": 0,
                **inv,
            }
            for rc, inv in new.items()
        }
        rp.generation += 1
        return FakeResponse(
            200, {"resource_provider_generation": rp.generation, "inventories": rp.inventories}
        )

    def _rp_traits(self, method: str, rp: _Provider, body: Any) -> FakeResponse:
        if method == "GET":
            return FakeResponse(
                200, {"resource_provider_generation": rp.generation, "traits": sorted(rp.traits)}
            )
        stale = self._stale(rp, body)
        if stale is not None:
            return stale
        unknown = set(body["traits"]) - self.traits
        if unknown:
            return _error(400, f"No such trait(s): {', '.join(sorted(unknown))}.")
        rp.traits = set(body["traits"])
        rp.generation += 1
        return FakeResponse(
            200, {"resource_provider_generation": rp.generation, "traits": sorted(rp.traits)}
        )

    def _aggregates(self, method: str, rp: _Provider, body: Any) -> FakeResponse:
        if method == "GET":
            return FakeResponse(
                200,
                {
                    "resource_provider_generation": rp.generation,
                    "aggregates": sorted(rp.aggregates),
                },
            )
        stale = self._stale(rp, body)
        if stale is not None:
            return stale
        rp.aggregates = set(body["aggregates"])
        rp.generation += 1
        return FakeResponse(
            200,
            {"resource_provider_generation": rp.generation, "aggregates": sorted(rp.aggregates)},
        )

    def _rp_allocations(self, method: str, rp: _Provider, body: Any) -> FakeResponse:
        allocations = {
            c: {"resources": found.allocations[rp.uuid]}
            for c, found in self.consumers.items()
            if rp.uuid in found.allocations
        }
        return FakeResponse(
            200, {"resource_provider_generation": rp.generation, "allocations": allocations}
        )

    def _post_allocations(self, body: dict[str, Any]) -> FakeResponse:
        # All or nothing: check every consumer first.
        for consumer, entry in body.items():
            found = self.consumers.get(consumer)
            expected = None if found is None else found.generation
            if entry.get("consumer_generation") != expected:
                return _error(
                    409,
                    f"consumer generation conflict for {consumer}",
                    "placement.concurrent_update",
                )
            for p, alloc in entry["allocations"].items():
                rp = self.providers.get(p)
                if rp is None:
                    return _error(
                        400, f"Allocation for resource provider '{p}' that does not exist."
                    )
                for rc, n in alloc["resources"].items():
                    inv = rp.inventories.get(rc)
                    if inv is None:
                        return _error(
                            409,
                            f"Unable to allocate inventory: Inventory for '{rc}' "
                            f"on resource provider '{p}' invalid.",
                        )
                    used = sum(
                        c.allocations.get(p, {}).get(rc, 0)
                        for k, c in self.consumers.items()
                        if k != consumer
                    )
                    capacity = (inv["total"] - inv["reserved"]) * inv["allocation_ratio"]
                    if used + n > capacity:
                        return _error(
                            409,
                            f"Unable to allocate inventory: Unable to create allocation for "
                            f"'{rc}' on resource provider '{p}'. The requested amount "
                            "would exceed the capacity.",
                        )
        for consumer, entry in body.items():
            old = self.consumers.get(consumer)
            touched = set(entry["allocations"]) | set(old.allocations if old else {})
            if not entry["allocations"]:
                self.consumers.pop(consumer, None)
            else:
                self.consumers[consumer] = _Consumer(
                    generation=(old.generation + 1) if old else 1,
                    project_id=entry["project_id"],
                    user_id=entry["user_id"],
                    consumer_type=entry.get("consumer_type", "INSTANCE"),
                    allocations={p: dict(a["resources"]) for p, a in entry["allocations"].items()},
                )
            for p in touched:
                if p in self.providers:
                    self.providers[p].generation += 1
        return FakeResponse(204)
