# SPDX-License-Identifier: Apache-2.0
"""Client side of the compute agent RPC API (topic ``ringfleet-compute``).

Each agent listens on ``server=<its host>``: the conductor calls the agent
that owns a node, with the epoch it read, and the agent refuses with
:class:`conductor.common.exception.NotOwner` when that is not (or no longer) true.

API version history:

* 1.0 - Initial version: build_instance, destroy_instance, set_power_state,
  ping, drain.
* 1.1 - build_instances: several builds in one call, each accepted or
  refused on its own.
* 1.2 - build_instance and build_instances carry the instance's ``image``
  and ``config_drive`` (as the conductor stored them); a build with either
  is sent at 1.2 only, so an older agent refuses it rather than deploy
  without them.
* 1.3 - set_power_state takes the targets ``soft power off`` and ``soft
  reboot`` (the OS shuts down first; a back end without them falls back to
  the hard target); the conductors route instance reboot/stop/start and
  operators' node power through it.  rebuild_instance: re-image a node in
  place for the instance it hosts, and wait.
* 1.4 - rebuild_instance carries the instance's ``image`` and
  ``config_drive`` as the conductor stored them (a rebuild may replace
  them): the back end redeploys those, not what its last deploy left.  A
  rebuild with either is sent at 1.4 only, so an older agent refuses it
  rather than redeploy the old image.
* 1.5 - set_power_state and rebuild_instance take a ``request_id`` (a
  string of 1..64 characters, one per action the conductor stored): the
  agent does the verb at most once per id; a repeat of the id gets the
  first call's answer or error (waiting for it if it still runs).  A call
  with one is sent at 1.5; a client capped below 1.5 sends it without (an
  older agent cannot tell a repeat from a new call).
* 1.6 - inventory_changed: a fanout cast (no reply) by which a conductor
  tells every agent that nodes of ``groups`` (``None``: of any group)
  changed: an operator's change (created, imported, updated, put in or out
  of maintenance, moved, deleted), an Ironic sync pass's, nodes released or
  handed over; each agent reads its share's changes at once instead of at
  its next quiet pass.  Not sent to agents capped below 1.6.
* 1.7 - group_changed: a fanout cast (no reply) by which a conductor that
  saw members leave the agents' group tells every agent to read the group
  now instead of at its next watch interval: each process reads it on its
  own schedule, and at 100 agents on two cores the survivors of a kill -9
  saw it over 5 s.  Not sent to agents capped below 1.7.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar, cast

import oslo_messaging as messaging

from conductor.common import rpc

__all__ = [
    "API_VERSION",
    "DEPLOY_SPEC_VERSION",
    "GROUP_HINT_VERSION",
    "INVENTORY_HINT_VERSION",
    "REBUILD_SPEC_VERSION",
    "REQUEST_ID_VERSION",
    "SOFT_POWER_VERSION",
    "ComputeAPI",
]

_T = TypeVar("_T")

# The version the agent's endpoint serves and the newest the client speaks:
# one version per API.  Bump it with a line in the history above.
API_VERSION = "1.7"

#: The version whose builds carry an image and a config drive.
DEPLOY_SPEC_VERSION = "1.2"
#: The version that has the soft power targets.
SOFT_POWER_VERSION = "1.3"
#: The version whose rebuilds carry the image and config drive to deploy.
REBUILD_SPEC_VERSION = "1.4"
#: The version whose set_power_state and rebuild_instance take a request id.
REQUEST_ID_VERSION = "1.5"
#: The version that has the inventory_changed cast.
INVENTORY_HINT_VERSION = "1.6"
#: The version that has the group_changed cast.
GROUP_HINT_VERSION = "1.7"


class ComputeAPI:
    """Calls to compute agents, each by its host name."""

    RPC_API_VERSION = API_VERSION

    def __init__(
        self,
        transport: messaging.Transport,
        timeout: float | None = None,
        *,
        observe: rpc.RpcObserver | None = None,
        version_cap: str | None = None,
    ) -> None:
        """``observe`` is told of every call made (method, outcome, seconds);
        ``version_cap``: ``[upgrade_levels] compute`` during a rolling upgrade."""
        self.client = rpc.get_client(
            transport,
            rpc.COMPUTE_TOPIC,
            version=self.RPC_API_VERSION,
            timeout=timeout,
            version_cap=version_cap,
        )
        self._observe = observe

    def can_send_version(self, version: str) -> bool:
        """Whether calls of API ``version`` may be sent (within the pin, if any)."""
        return bool(self.client.can_send_version(version))

    def _call(
        self,
        answer: type[_T],
        host: str,
        method: str,
        timeout: float | None = None,
        *,
        version: str = "1.0",
        **kwargs: Any,
    ) -> _T:
        """Call ``method`` of the agent ``host``; its reply, typed as ``answer``
        (what ``docs/rpc-api.rst`` says it returns: oslo.messaging's replies
        are untyped, and this is the one place that says so)."""
        # The lowest version that has the method: an older agent still serves it.
        # prepare(timeout=None) would drop the client's own timeout for
        # [DEFAULT] rpc_response_timeout: only a given one replaces it.
        if timeout is None:
            timeout = self.client.timeout
        client = self.client.prepare(server=host, version=version, timeout=timeout)
        return cast(_T, rpc.call(client, method, self._observe, **kwargs))

    def build_instance(
        self,
        host: str,
        *,
        instance_uuid: str,
        node: dict[str, Any],
        epoch: int,
        image: dict[str, Any] | None = None,
        config_drive: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> str:
        """Ask the owner to deploy; returns at once ("accepted", "in-progress", "done").

        With an ``image`` or a ``config_drive`` the call is sent at 1.2: an
        agent older than that refuses it (never deploys without them), and
        a client pinned below 1.2 raises ``UnsupportedVersion`` here.
        """
        if image is None and config_drive is None:
            return self._call(
                str,
                host,
                "build_instance",
                timeout,
                instance_uuid=instance_uuid,
                node=node,
                epoch=epoch,
            )
        return self._call(
            str,
            host,
            "build_instance",
            timeout,
            version=DEPLOY_SPEC_VERSION,
            instance_uuid=instance_uuid,
            node=node,
            epoch=epoch,
            image=image,
            config_drive=config_drive,
        )

    def build_instances(
        self,
        host: str,
        builds: list[dict[str, Any]],
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Several builds for one owner in one call (1.1).

        ``builds``: ``{"instance_uuid", "node", "epoch"}`` mappings (and
        ``image``, ``config_drive`` since 1.2: a batch with them is sent at
        1.2), each accepted or refused on its own; the reply is ``{"results": [...]}``,
        one entry per build in order: ``{"answer": <build_instance's>}`` or
        ``{"error": <exception class name>, "reason": <first line>}``.  An
        agent older than 1.1 raises a ``RemoteError`` whose ``exc_type`` is
        ``UnsupportedVersion`` (or ``NoSuchMethod``).
        """
        carries = any(b.get("image") is not None or b.get("config_drive") for b in builds)
        version = DEPLOY_SPEC_VERSION if carries else "1.1"
        return self._call(
            dict[str, Any], host, "build_instances", timeout, version=version, builds=builds
        )

    def destroy_instance(
        self,
        host: str,
        *,
        instance_uuid: str,
        node: dict[str, Any],
        epoch: int,
        timeout: float | None = None,
    ) -> str:
        return self._call(
            str,
            host,
            "destroy_instance",
            timeout,
            instance_uuid=instance_uuid,
            node=node,
            epoch=epoch,
        )

    def set_power_state(
        self,
        host: str,
        *,
        node: dict[str, Any],
        epoch: int,
        target: str,
        request_id: str | None = None,
        timeout: float | None = None,
    ) -> str:
        """Power the node on or off, or reboot it, and wait: the resulting power
        state (``"power on"`` or ``"power off"``).  The soft targets need 1.3.

        With a *request_id* (1.5) the agent powers the node at most once for
        it: a repeat (this caller's peer re-sending after it died) gets the
        first call's answer.  Capped below 1.5 (``[upgrade_levels] compute``),
        the call is sent without it, at the version it needs otherwise: an
        older agent cannot tell a repeat from a new call, and does it again.

        :raises NotOwner: *epoch* is not the one the agent holds (re-read)
        :raises Conflict: the node is busy with another action (retry)
        :raises InvalidInput: *request_id* was sent for another verb, node or target
        """
        version = "1.3" if target.startswith("soft") else "1.0"
        once = self._request_id(request_id)
        return self._call(
            str,
            host,
            "set_power_state",
            timeout,
            version=REQUEST_ID_VERSION if once else version,
            node=node,
            epoch=epoch,
            target=target,
            **once,
        )

    def rebuild_instance(
        self,
        host: str,
        *,
        instance_uuid: str,
        node: dict[str, Any],
        epoch: int,
        image: dict[str, Any] | None = None,
        config_drive: dict[str, Any] | None = None,
        request_id: str | None = None,
        timeout: float | None = None,
    ) -> str:
        """Re-image the node in place for *instance_uuid* and wait: ``"active"`` (1.3).

        With the ``image`` and ``config_drive`` to deploy (1.4: sent at 1.4
        when either is given; without them the back end redeploys what it has).
        With a *request_id* (1.5) the agent rebuilds at most once for it, as
        :meth:`set_power_state` says (and, capped below 1.5, sends it without).

        :raises NotOwner: *epoch* is not the one the agent holds (re-read)
        :raises Conflict: the node is busy with another action (retry)
        :raises InvalidInput: *request_id* was sent for another verb, node or instance
        """
        spec: dict[str, Any] = {}
        if image is not None or config_drive is not None:
            spec = {"image": image, "config_drive": config_drive}
        once = self._request_id(request_id)
        if once:
            version = REQUEST_ID_VERSION
        else:
            version = REBUILD_SPEC_VERSION if spec else SOFT_POWER_VERSION
        return self._call(
            str,
            host,
            "rebuild_instance",
            timeout,
            version=version,
            instance_uuid=instance_uuid,
            node=node,
            epoch=epoch,
            **spec,
            **once,
        )

    def _request_id(self, request_id: str | None) -> dict[str, str]:
        """``{"request_id": ...}`` to send, or ``{}``: none given, or the client
        capped below :data:`REQUEST_ID_VERSION` (the agent may be older)."""
        if request_id is None or not self.can_send_version(REQUEST_ID_VERSION):
            return {}
        return {"request_id": request_id}

    def inventory_changed(
        self, groups: Sequence[str] | None = None, hosts: Sequence[str] | None = None
    ) -> bool:
        """Tell every agent (or only ``hosts``: a cast to each one's own
        server) that nodes of ``groups`` (``None``: of any group) changed:
        no reply.  Returns whether it was sent (not when ``[upgrade_levels]
        compute`` caps the agents below 1.6)."""
        if not self.can_send_version(INVENTORY_HINT_VERSION):
            return False
        hint = {"groups": None if groups is None else sorted(groups)}
        if hosts is None:
            self._cast("inventory_changed", version=INVENTORY_HINT_VERSION, **hint)
            return True
        for host in sorted(hosts):
            self.client.prepare(server=host, version=INVENTORY_HINT_VERSION).cast(
                {}, "inventory_changed", **hint
            )
        return True

    def group_changed(self) -> bool:
        """Tell every agent that members left the group: each reads it now
        (a fanout cast, no reply).  Returns whether it was sent (not when
        ``[upgrade_levels] compute`` caps the agents below 1.7)."""
        if not self.can_send_version(GROUP_HINT_VERSION):
            return False
        self._cast("group_changed", version=GROUP_HINT_VERSION)
        return True

    def _cast(self, method: str, *, version: str, **kwargs: Any) -> None:
        """Cast ``method`` to every agent (fanout): no reply, no wait."""
        self.client.prepare(fanout=True, version=version).cast({}, method, **kwargs)

    def ping(self, host: str, timeout: float | None = None) -> dict[str, Any]:
        return self._call(dict[str, Any], host, "ping", timeout)

    def drain(self, host: str) -> str:
        """Ask the agent to hand every node, pins included, to its ring successor and stop."""
        return self._call(str, host, "drain")
