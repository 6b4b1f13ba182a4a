# SPDX-License-Identifier: Apache-2.0
"""A small client of the Placement API, shared by the agents' reporter and ``placement check``.

The rules live here once:

* every request is pinned to :data:`~conductor.common.conf.placement.API_VERSION`
  and sent through keystoneauth (its session, auth plugin and endpoint);
* no retries of its own: the callers know which refusal a retry fixes (a
  provider generation conflict: re-read, then write again);
* Placement's answers become ringfleet's errors here and nowhere else: no
  answer, a 5xx or a body that is not the JSON asked for is
  :class:`~conductor.common.exception.ServiceUnavailable` (retryable, one
  WARNING per outage), a 409 is :class:`PlacementConflict` (with Placement's
  error code), any other refusal :class:`PlacementRefused`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, Final

from keystoneauth1 import exceptions as ks_exceptions
from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from conductor.common.conf import keystoneauth
from conductor.common.conf import placement as placement_conf
from conductor.common.exception import RingfleetError
from conductor.common.service_outage import ServiceOutage

__all__ = [
    "CONCURRENT_UPDATE",
    "Allocations",
    "PlacementClient",
    "PlacementConflict",
    "PlacementRefused",
]

LOG = logging.getLogger(__name__)

#: Placement's error code for a write against a stale provider or consumer
#: generation: re-read and write again.
CONCURRENT_UPDATE: Final = "placement.concurrent_update"

#: At most this many characters of an error body in a message.
_MAX_DETAIL = 300


class PlacementRefused(RingfleetError):
    """Placement refused a request (4xx but 409): retrying the same request cannot help."""

    def __init__(self, status: int, what: str, detail: str, code: str | None = None) -> None:
        super().__init__(f"Placement refused to {what} ({status}): {detail}")
        self.status, self.what, self.detail, self.code = status, what, detail, code


class PlacementConflict(PlacementRefused):
    """A 409: a stale generation (:data:`CONCURRENT_UPDATE`: re-read, write again),
    a name another provider has, inventory in use..."""


#: One consumer's allocations as Placement shows them: provider uuid -> resources.
Allocations = dict[str, dict[str, int]]


class PlacementClient:
    """The Placement API with ringfleet's rules (module docstring).  Thread-safe."""

    def __init__(self, adapter: Any, endpoint: str) -> None:
        self._adapter = adapter
        self.endpoint = endpoint
        self.outage = ServiceOutage("Placement", endpoint)
        self._known_lock = threading.Lock()
        self._known_classes: set[str] = set()
        self._known_traits: set[str] = set()
        self._refused_traits: set[str] = set()  # standard-looking, not in os-traits

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> PlacementClient:
        """A client configured by ``[placement]`` (registered here if needed).

        :raises ConfigurationError: the authentication options are incomplete
        """
        placement_conf.OPTIONS.register(conf)
        group = placement_conf.group.name
        session = keystoneauth.load_session(conf, group, "Placement")
        adapter = ks_loading.load_adapter_from_conf_options(conf, group, session=session)
        endpoint = conf[group].endpoint_override or "the catalog's placement endpoint"
        return cls(adapter, endpoint)

    # -- the one way a request is sent -----------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        what: str,
        body: Any = None,
        *,
        missing_ok: bool = False,
        params: Mapping[str, str] | None = None,
    ) -> Any:
        """Send one request; the decoded JSON answer (``None`` for an empty
        one, or for a 404 when ``missing_ok``).

        :raises ServiceUnavailable: no answer, 5xx, or junk where JSON was due
        :raises PlacementConflict: 409
        :raises PlacementRefused: any other 4xx
        """
        started = time.monotonic()
        kwargs: dict[str, Any] = {
            "microversion": placement_conf.API_VERSION,
            "raise_exc": False,
            "headers": {"Accept": "application/json"},
        }
        if body is not None:
            kwargs["json"] = body
        if params:
            kwargs["params"] = dict(params)
        try:
            response = self._adapter.request(path, method, **kwargs)
        except (ks_exceptions.ConnectFailure, ks_exceptions.ConnectTimeout) as exc:
            raise self.outage.unavailable(
                f"Placement at {self.endpoint} unreachable: {exc}", started
            ) from exc
        except ks_exceptions.ClientException as exc:  # a read timeout, an SSL error...
            raise self.outage.unavailable(
                f"Placement request failed ({what}): {exc}", started
            ) from exc
        status = response.status_code
        if status >= 500:
            raise self.outage.unavailable(
                f"Placement answered {status} to {what}: {_detail(response)}"
            )
        if status == 404 and missing_ok:
            self.outage.answered(started)
            return None
        if status >= 400:
            self.outage.answered(started)
            code = _error_code(response)
            kind = PlacementConflict if status == 409 else PlacementRefused
            raise kind(status, what, _detail(response), code)
        if status == 204 or not response.content:
            self.outage.answered(started)
            return None
        try:
            answer = response.json()
        except ValueError as exc:
            # A proxy's HTML page, a truncated body: Placement is not what
            # answered, or not whole.  Retryable, like no answer.
            raise self.outage.unavailable(
                f"Placement answered {what} with a body that is not JSON: "
                f"{response.text[:_MAX_DETAIL]!r}"
            ) from exc
        self.outage.answered(started)
        return answer

    def _object(self, answer: Any, what: str, *keys: str) -> dict[str, Any]:
        """``answer`` if it is a JSON object with every key in ``keys``."""
        if not isinstance(answer, dict) or any(key not in answer for key in keys):
            raise self.outage.unavailable(
                f"Placement answered {what} without {', '.join(keys)}: {str(answer)[:_MAX_DETAIL]}"
            )
        return answer

    # -- providers ----------------------------------------------------------------

    def get_provider(self, uuid: str) -> dict[str, Any] | None:
        """The provider (``uuid``, ``name``, ``generation``), or None."""
        what = f"read provider {uuid}"
        answer = self._request("GET", f"/resource_providers/{uuid}", what, missing_ok=True)
        return None if answer is None else self._object(answer, what, "uuid", "name", "generation")

    def list_providers(self, **query: str) -> list[dict[str, Any]]:
        """Providers matching ``query`` (``member_of``, ``resources``, ``required``...)."""
        what = "list providers"
        answer = self._object(
            self._request("GET", "/resource_providers", what, params=query),
            what,
            "resource_providers",
        )
        return list(answer["resource_providers"])

    def create_provider(self, uuid: str, name: str) -> dict[str, Any]:
        """Create a root provider; it as created.

        :raises PlacementConflict: the uuid or the name is taken
        """
        what = f"create provider {uuid}"
        answer = self._request("POST", "/resource_providers", what, {"uuid": uuid, "name": name})
        return self._object(answer, what, "uuid", "generation")

    def rename_provider(self, uuid: str, name: str) -> None:
        """:raises PlacementConflict: another provider has the name."""
        self._request(
            "PUT", f"/resource_providers/{uuid}", f"rename provider {uuid}", {"name": name}
        )

    def delete_provider(self, uuid: str) -> None:
        """Delete a provider (gone already is fine).

        :raises PlacementConflict: it has allocations
        """
        self._request(
            "DELETE", f"/resource_providers/{uuid}", f"delete provider {uuid}", missing_ok=True
        )

    # -- inventory, traits, aggregates (each under the provider generation) ---

    def _get_part(self, uuid: str, part: str, what: str) -> tuple[int, Any]:
        """``(generation, value)`` of one of the provider's parts
        (``inventories``, ``traits``, ``aggregates``)."""
        answer = self._object(
            self._request("GET", f"/resource_providers/{uuid}/{part}", what),
            what,
            "resource_provider_generation",
            part,
        )
        return int(answer["resource_provider_generation"]), answer[part]

    def _put_part(self, uuid: str, part: str, what: str, generation: int, value: Any) -> int:
        """Replace one of the provider's parts under ``generation``; the new generation.

        :raises PlacementConflict: the generation is stale (:data:`CONCURRENT_UPDATE`)
        """
        body = {"resource_provider_generation": generation, part: value}
        answer = self._request("PUT", f"/resource_providers/{uuid}/{part}", what, body)
        return int(
            self._object(answer, what, "resource_provider_generation")[
                "resource_provider_generation"
            ]
        )

    def get_inventories(self, uuid: str) -> tuple[int, dict[str, dict[str, Any]]]:
        generation, value = self._get_part(
            uuid, "inventories", f"read the inventory of provider {uuid}"
        )
        return generation, dict(value)

    def set_inventories(
        self, uuid: str, generation: int, inventories: Mapping[str, Mapping[str, Any]]
    ) -> int:
        """Replace the provider's inventory; the new generation."""
        for resource_class in inventories:
            self.ensure_resource_class(resource_class)
        return self._put_part(
            uuid,
            "inventories",
            f"set the inventory of provider {uuid}",
            generation,
            dict(inventories),
        )

    def get_traits(self, uuid: str) -> tuple[int, frozenset[str]]:
        generation, value = self._get_part(uuid, "traits", f"read the traits of provider {uuid}")
        return generation, frozenset(value)

    def set_traits(self, uuid: str, generation: int, traits: Iterable[str]) -> int:
        """Replace the provider's traits (custom ones created first, ones
        Placement cannot take left out: see :meth:`ensure_traits`); the new
        generation."""
        wanted = set(traits)
        wanted -= self.ensure_traits(wanted)
        return self._put_part(
            uuid, "traits", f"set the traits of provider {uuid}", generation, sorted(wanted)
        )

    def get_aggregates(self, uuid: str) -> tuple[int, frozenset[str]]:
        generation, value = self._get_part(
            uuid, "aggregates", f"read the aggregates of provider {uuid}"
        )
        return generation, frozenset(value)

    def set_aggregates(self, uuid: str, generation: int, aggregates: Iterable[str]) -> int:
        return self._put_part(
            uuid,
            "aggregates",
            f"set the aggregates of provider {uuid}",
            generation,
            sorted(set(aggregates)),
        )

    def ensure_resource_class(self, name: str) -> None:
        """Create a custom resource class unless this client knows it exists."""
        with self._known_lock:
            if name in self._known_classes:
                return
        if name.startswith("CUSTOM_"):
            # 201 created, 204 there already (since 1.7): idempotent.
            self._request("PUT", f"/resource_classes/{name}", f"create resource class {name}")
        with self._known_lock:
            self._known_classes.add(name)

    def ensure_traits(self, names: Iterable[str]) -> frozenset[str]:
        """Create the custom traits this client has not seen yet; the names
        Placement cannot take: standard-looking ones (no ``CUSTOM_``) that
        its os-traits catalogue lacks, which it would refuse on a provider."""
        names = set(names)
        with self._known_lock:
            refused = names & self._refused_traits
            new = sorted(names - self._known_traits - refused)
        if not new:
            return frozenset(refused)
        standard = [n for n in new if not n.startswith("CUSTOM_")]
        unknown: set[str] = set()
        if standard:
            what = "read traits"
            answer = self._object(
                self._request("GET", "/traits", what, params={"name": "in:" + ",".join(standard)}),
                what,
                "traits",
            )
            unknown = set(standard) - set(answer["traits"])
        for name in new:
            if name.startswith("CUSTOM_"):
                self._request("PUT", f"/traits/{name}", f"create trait {name}")
        with self._known_lock:
            self._known_traits.update(set(new) - unknown)
            self._refused_traits.update(unknown)
        return frozenset(unknown | refused)

    # -- allocations ------------------------------------------------------------------

    def get_provider_allocations(self, uuid: str) -> dict[str, dict[str, int]]:
        """Consumer uuid -> resources, of every allocation against the provider."""
        what = f"read the allocations of provider {uuid}"
        answer = self._object(
            self._request("GET", f"/resource_providers/{uuid}/allocations", what),
            what,
            "allocations",
        )
        return {
            consumer: dict(entry.get("resources", {}))
            for consumer, entry in answer["allocations"].items()
        }

    def get_consumer(self, consumer: str) -> tuple[int | None, Allocations, dict[str, Any]]:
        """A consumer's generation (None: no allocations), allocations and the
        rest of its record (``project_id``, ``user_id``, ``consumer_type``)."""
        what = f"read the allocations of consumer {consumer}"
        answer = self._object(
            self._request("GET", f"/allocations/{consumer}", what), what, "allocations"
        )
        allocations = {
            provider: dict(entry.get("resources", {}))
            for provider, entry in answer["allocations"].items()
        }
        generation = answer.get("consumer_generation")
        rest = {k: answer.get(k) for k in ("project_id", "user_id", "consumer_type")}
        return (None if generation is None else int(generation)), allocations, rest

    def put_allocations(self, batch: Mapping[str, Mapping[str, Any]]) -> None:
        """Write many consumers' allocations in one request (``POST /allocations``),
        all or none; each value has ``allocations``, ``project_id``,
        ``user_id``, ``consumer_generation`` and ``consumer_type``.

        :raises PlacementConflict: a stale consumer generation, or no capacity
        """
        if batch:
            self._request("POST", "/allocations", f"write {len(batch)} allocations", dict(batch))

    def delete_allocations(self, consumer: str) -> None:
        """Delete all of a consumer's allocations (none is fine)."""
        self._request(
            "DELETE",
            f"/allocations/{consumer}",
            f"delete the allocations of consumer {consumer}",
            missing_ok=True,
        )


def _error_code(response: Any) -> str | None:
    try:
        errors = response.json().get("errors") or []
        return str(errors[0].get("code")) if errors and errors[0].get("code") else None
    except (ValueError, AttributeError, IndexError, TypeError):
        return None


def _detail(response: Any) -> str:
    """Placement's own words (the first error's detail), else the body's start."""
    try:
        errors = response.json().get("errors") or []
        if errors and errors[0].get("detail"):
            return " ".join(str(errors[0]["detail"]).split())[:_MAX_DETAIL]
    except (ValueError, AttributeError, IndexError, TypeError):
        pass
    return " ".join(response.text.split())[:_MAX_DETAIL]
