# SPDX-License-Identifier: Apache-2.0
"""A small client of the Ironic API, shared by the ``ironic`` driver and the inventory sync.

Both services talk to Ironic the same way, so the rules live here once:

* every request is pinned to :data:`~conductor.common.conf.ironic.API_VERSION`;
* no status-code retries: a lost claim (409) must fail in milliseconds, not
  after openstacksdk's default five retries (15.8 s measured);
* Ironic's answers become ringfleet's errors here and nowhere else: an
  unreachable Ironic is :class:`ServiceUnavailable` (retryable), a node
  Ironic does not know or refuses to change is :class:`DriverError`;
* nodes are read into :class:`IronicNode`, a frozen view of the fields
  ringfleet uses (what their states mean to ringfleet:
  :mod:`conductor.common.ironic.states`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final

import openstack.connection
import openstack.exceptions
from keystoneauth1 import exceptions as ks_exceptions
from oslo_config import cfg

from conductor.common.conf import ironic as ironic_conf
from conductor.common.conf import keystoneauth
from conductor.common.exception import DriverError, ServiceUnavailable
from conductor.common.service_outage import ServiceOutage

__all__ = [
    "NODE_FIELDS",
    "BaremetalClient",
    "IronicClaimConflict",
    "IronicNode",
    "IronicNodeGone",
    "IronicNodeLocked",
]

LOG = logging.getLogger(__name__)

#: Fields read of a node (``?fields=``: a listing costs a third of a detailed one).
NODE_FIELDS: Final = (
    "uuid",
    "name",
    "resource_class",
    "traits",
    "properties",
    "conductor_group",
    "shard",
    "maintenance",
    "maintenance_reason",
    "power_state",
    "target_power_state",
    "provision_state",
    "target_provision_state",
    "instance_uuid",
    "instance_info",
    "last_error",
)

#: Fields read of one node: the listing's, and when its provision state last
#: changed (Ironic's progress; openstacksdk's node has no such attribute, so
#: one node is read with a plain GET through the SDK's session).
_NODE_GET_FIELDS: Final = (*NODE_FIELDS, "provision_updated_at")

#: openstacksdk's attribute names where they are not the API's.
_SDK_NAMES: Final = {"uuid": "id", "maintenance": "is_maintenance", "instance_uuid": "instance_id"}


@dataclasses.dataclass(frozen=True, slots=True)
class IronicNode:
    """What ringfleet reads of one Ironic node (Ironic's own state names)."""

    uuid: str
    name: str | None
    resource_class: str | None
    traits: tuple[str, ...]
    properties: Mapping[str, Any]
    conductor_group: str
    shard: str | None
    maintenance: bool
    maintenance_reason: str | None
    power_state: str | None
    target_power_state: str | None
    provision_state: str | None
    target_provision_state: str | None
    instance_uuid: str | None
    instance_info: Mapping[str, Any]
    last_error: str | None
    #: when Ironic last changed the provision state (a single node's read only)
    provision_updated_at: str | None = None

    @classmethod
    def from_sdk(cls, node: Any) -> IronicNode:
        """The node from openstacksdk's (a listing), by the API's field names."""
        return cls.from_api({f: getattr(node, _SDK_NAMES.get(f, f)) for f in NODE_FIELDS})

    @classmethod
    def from_api(cls, node: Mapping[str, Any]) -> IronicNode:
        """The node from the API's JSON (``GET /v1/nodes/{uuid}``), or any
        mapping with its field names."""
        return cls(
            uuid=node["uuid"],
            name=node.get("name"),
            resource_class=node.get("resource_class"),
            traits=tuple(node.get("traits") or ()),
            properties=dict(node.get("properties") or {}),
            conductor_group=node.get("conductor_group") or "",
            shard=node.get("shard"),
            maintenance=bool(node.get("maintenance")),
            maintenance_reason=node.get("maintenance_reason"),
            power_state=node.get("power_state"),
            target_power_state=node.get("target_power_state"),
            provision_state=node.get("provision_state"),
            target_provision_state=node.get("target_provision_state"),
            instance_uuid=node.get("instance_uuid"),
            instance_info=dict(node.get("instance_info") or {}),
            last_error=node.get("last_error"),
            provision_updated_at=node.get("provision_updated_at"),
        )


class IronicClaimConflict(Exception):
    """Ironic refused a claim (409): another instance holds the node, or it is locked.

    Internal to the ``ironic`` driver, which re-reads the node to tell the two
    apart; never crosses RPC.
    """


class IronicNodeLocked(Exception):
    """Ironic answered 409 "Node ... is locked by host ..., please retry".

    Ironic holds a node's lock while one of its own tasks runs (a deploy
    step, a power sync): the request is refused *now*, and the same request
    succeeds once the task ends.  Internal to the ``ironic`` driver, which
    retries it; never crosses RPC.
    """


class IronicNodeGone(DriverError):
    """Ironic has no node with this uuid (404): nothing there to act on or wait for."""


class BaremetalClient:
    """The Ironic API, through openstacksdk, with ringfleet's rules (module docstring).

    Thread-safe: openstacksdk's proxy is shared by the agent's action threads
    (keystoneauth sessions are).  One :class:`ServiceUnavailable` WARNING is
    logged when Ironic becomes unreachable and one INFO when it answers again.
    """

    def __init__(self, proxy: Any, endpoint: str) -> None:
        """*proxy*: openstacksdk's baremetal proxy, or one made at first use."""
        self._proxy = proxy if isinstance(proxy, _LazyProxy) else _LazyProxy.of(proxy)
        self.endpoint = endpoint
        self.outage = ServiceOutage("Ironic", endpoint)
        self._last_sent = time.monotonic()  # when the latest request was sent

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> BaremetalClient:
        """A client configured by ``[ironic]`` (registered here if needed).

        :raises ConfigurationError: the authentication options are incomplete
        """
        ironic_conf.OPTIONS.register(conf)
        group = ironic_conf.group.name
        session = keystoneauth.load_session(conf, group, "Ironic")

        def make_proxy() -> Any:
            connection = openstack.connection.Connection(session=session, oslo_conf=conf)
            proxy = connection.baremetal
            proxy.default_microversion = ironic_conf.API_VERSION
            proxy.status_code_retries = 0
            proxy.retriable_status_codes = []
            return proxy

        endpoint = conf[group].endpoint_override or "the catalog's baremetal endpoint"
        return cls(_LazyProxy(make_proxy), endpoint)

    def idle_for(self) -> float:
        """Seconds since the latest request was sent."""
        return time.monotonic() - self._last_sent

    # -- reads -----------------------------------------------------------------

    def probe(self) -> None:
        """One cheap request (a node's uuid): does Ironic answer, API and database?

        :raises ServiceUnavailable: it does not (said once by :attr:`outage`)
        """
        with self._translated("-", "probe"):
            response = self._proxy.get(
                "/nodes",
                params={"fields": "uuid", "limit": 1},
                microversion=ironic_conf.API_VERSION,
                raise_exc=False,
            )
            openstack.exceptions.raise_from_response(response)

    def get_node(self, node_uuid: str, *, action: str, quick: float | None = None) -> IronicNode:
        """The node as Ironic shows it now.

        *quick*: seconds to wait at most, for a caller that goes on without
        the answer; no answer in that time is no outage (a busy Ironic is
        slow, not gone: the requests that wait the whole timeout say that).

        :raises DriverError: Ironic does not know the node
        :raises ServiceUnavailable: Ironic cannot be reached
        """
        bound = {} if quick is None else {"timeout": quick}
        with self._translated(node_uuid, action, quick=quick):
            response = self._proxy.made(quick).get(
                f"/nodes/{node_uuid}",
                params={"fields": ",".join(_NODE_GET_FIELDS)},
                microversion=ironic_conf.API_VERSION,
                raise_exc=False,
                **bound,
            )
            openstack.exceptions.raise_from_response(response)
            return IronicNode.from_api(response.json())

    def list_nodes(
        self, *, shard: str | None = None, page_size: int = 1000
    ) -> Iterator[IronicNode]:
        """Every node (of *shard*), a page at a time, with :data:`NODE_FIELDS` only."""
        query: dict[str, Any] = {"fields": list(NODE_FIELDS), "limit": page_size}
        if shard is not None:
            query["shard"] = shard
        with self._translated("-", "list nodes"):
            for node in self._proxy.nodes(**query):
                yield IronicNode.from_sdk(node)

    # -- writes ----------------------------------------------------------------

    def claim(self, node_uuid: str, instance_uuid: str, info: Mapping[str, Any]) -> None:
        """Set the node's ``instance_uuid`` (and ``instance_info``) in one atomic PATCH.

        :raises IronicClaimConflict: Ironic answered 409 (held or locked)
        """
        patch = [
            {"op": "add", "path": "/instance_uuid", "value": instance_uuid},
            {"op": "add", "path": "/instance_info", "value": dict(info)},
        ]
        with self._translated(node_uuid, "claim"):
            try:
                self._proxy.patch_node(node_uuid, patch, retry_on_conflict=False)
            except openstack.exceptions.ConflictException as exc:
                if _is_locked(exc):
                    raise
                raise IronicClaimConflict(str(exc)) from exc

    def release(self, node_uuid: str) -> None:
        """Clear the node's ``instance_uuid`` and ``instance_info``."""
        patch = [
            {"op": "remove", "path": "/instance_uuid"},
            {"op": "remove", "path": "/instance_info"},
        ]
        with self._translated(node_uuid, "release claim"):
            self._proxy.patch_node(node_uuid, patch, retry_on_conflict=False)

    def set_instance_info(
        self, node_uuid: str, values: Mapping[str, Any], remove: Iterable[str] = ()
    ) -> None:
        """Set *values* in the node's ``instance_info`` and remove the *remove*
        keys (each present: JSON patch refuses removing a missing one), in one PATCH."""
        patch: list[dict[str, Any]] = [
            {"op": "add", "path": f"/instance_info/{key}", "value": value}
            for key, value in values.items()
        ]
        patch += [{"op": "remove", "path": f"/instance_info/{key}"} for key in remove]
        with self._translated(node_uuid, "set instance_info"):
            self._proxy.patch_node(node_uuid, patch, retry_on_conflict=False)

    def set_provision_state(
        self,
        node_uuid: str,
        target: str,
        *,
        action: str,
        configdrive: Mapping[str, Any] | None = None,
    ) -> None:
        """Ask Ironic to move the node to *target* (``active``, ``deleted``...); no wait.

        *configdrive* (``active`` and ``rebuild``): ``user_data``, ``meta_data``,
        ``network_data``, which Ironic builds the drive from (API >= 1.56).
        """
        with self._translated(node_uuid, action):
            self._proxy.set_node_provision_state(
                node_uuid,
                target,
                config_drive=None if configdrive is None else dict(configdrive),
                wait=False,
            )

    def set_power_state(self, node_uuid: str, target: str) -> None:
        """Ask Ironic for *target* (``power on``, ``power off``, ``rebooting``); no wait."""
        with self._translated(node_uuid, "set_power"):
            self._proxy.set_node_power_state(node_uuid, target, wait=False)

    # -- errors ----------------------------------------------------------------

    @contextlib.contextmanager
    def _translated(
        self, node_uuid: str, action: str, *, quick: float | None = None
    ) -> Iterator[None]:
        started = self._last_sent = time.monotonic()
        try:
            yield
        except _DiscoveryPending:
            # (Only a bounded read waits less than the attempt takes.)
            raise ServiceUnavailable(
                f"Ironic did not answer {action} within {quick:g} s (discovering its API)"
            ) from None
        except ks_exceptions.ConnectTimeout as exc:
            if quick is None:
                raise self.outage.unavailable(
                    f"Ironic at {self.endpoint} unreachable: {exc}", started
                ) from exc
            raise ServiceUnavailable(f"Ironic did not answer {action} within {quick:g} s") from exc
        except IronicClaimConflict:
            self.outage.answered(started)
            raise
        except openstack.exceptions.NotFoundException as exc:
            self.outage.answered(started)
            raise IronicNodeGone(node_uuid, action, "Ironic has no such node") from exc
        except openstack.exceptions.HttpException as exc:
            status = exc.status_code
            if status == 409 and _is_locked(exc):
                self.outage.answered(started)
                raise IronicNodeLocked(_details(exc)) from exc
            if status is not None and status >= 500 and status != 501:
                raise self.outage.unavailable(f"Ironic answered {status}: {_details(exc)}") from exc
            self.outage.answered(started)
            raise DriverError(
                node_uuid, action, f"Ironic refused ({status}): {_details(exc)}"
            ) from exc
        except ks_exceptions.ConnectFailure as exc:
            raise self.outage.unavailable(
                f"Ironic at {self.endpoint} unreachable: {exc}", started
            ) from exc
        except (ks_exceptions.ClientException, openstack.exceptions.SDKException) as exc:
            raise self.outage.unavailable(f"Ironic request failed: {exc}", started) from exc
        else:
            self.outage.answered(started)


class _DiscoveryPending(Exception):
    """The proxy is still being made when a bounded caller's time is up."""


class _LazyProxy:
    """openstacksdk's baremetal proxy, made at its first use.

    Making it asks Ironic for its API versions (discovery): made at start, an
    Ironic that is away or hung would stop the agent or conductor from
    starting at all.  Every use is inside :meth:`BaremetalClient._translated`,
    so a failed discovery is an outage like any failed request, and the next
    use tries again.

    One attempt at a time, shared: a thread that needs the proxy while
    another attempt runs waits for that attempt and gets its outcome, its
    failure too.  (Each waiting thread making its own attempt in turn, a
    hung Ironic cost the last of N threads N request timeouts.)  The attempt
    runs on a thread of its own, so that a caller with a bound (a quick
    read) waits no longer than that.
    """

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._proxy: Any = None
        self._lock = threading.Lock()
        self._attempt: _Attempt | None = None

    @classmethod
    def of(cls, proxy: Any) -> _LazyProxy:
        """One made already (a proxy given to the client)."""
        lazy = cls(lambda: proxy)
        lazy._proxy = proxy
        return lazy

    def made(self, within: float | None = None) -> Any:
        """The proxy, made now if need be.

        :raises _DiscoveryPending: not made within *within* seconds
        """
        with self._lock:
            if self._proxy is not None:
                return self._proxy
            attempt = self._attempt
            if attempt is None:
                attempt = self._attempt = _Attempt(self._make, self._ended)
        return attempt.outcome(within)

    def _ended(self, proxy: Any) -> None:
        with self._lock:
            self._proxy, self._attempt = proxy, None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.made(), name)


class _Attempt:
    """One attempt at making the proxy, on its own thread; *ended* gets the
    proxy (None if it failed) before any waiter is told."""

    def __init__(self, make: Callable[[], Any], ended: Callable[[Any], None]) -> None:
        self._make, self._ended = make, ended
        self._done = threading.Event()
        self._proxy: Any = None
        self._failure: BaseException | None = None
        threading.Thread(target=self._run, name="ironic-discovery", daemon=True).start()

    def _run(self) -> None:
        try:
            self._proxy = self._make()
        except BaseException as exc:  # every waiter raises it
            self._failure = exc
        self._ended(self._proxy)
        self._done.set()

    def outcome(self, within: float | None) -> Any:
        if not self._done.wait(within):
            raise _DiscoveryPending
        if self._failure is not None:
            raise self._failure
        return self._proxy


def _is_locked(exc: openstack.exceptions.HttpException) -> bool:
    """Ironic's NodeLocked: "Node ... is locked by host ..., please retry ..."."""
    return "is locked by host" in _details(exc)


def _details(exc: openstack.exceptions.HttpException) -> str:
    """Ironic's own explanation (its ``faultstring``), not the SDK's URL preamble."""
    return str(exc.details or exc.message or exc).strip()
