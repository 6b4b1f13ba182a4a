# SPDX-License-Identifier: Apache-2.0
"""Client side of the conductor RPC API (topic ``ringfleet-conductor``).

Any oslo.messaging client can call these methods; this class is the
reference client, used by the CLI and the agents.  Every method is
documented in ``docs/rpc-api.rst``.

API version history:

* 1.0 - Initial version: nodes (create_node, import_nodes, list_nodes,
  show_node, set_node_maintenance, node_owner, move_node), flavors
  (create_flavor, list_flavors, show_flavor, delete_flavor), instances
  (build_instances, list_instances, show_instance, delete_instance), fleet
  (fleet_status, drain_agent), agents (claim_nodes, release_nodes, transfer_nodes,
  owned_nodes, list_node_uuids, report_node_states, report_build_result,
  report_destroy_result).
* 1.1 - Operator reports and node changes: set_node (properties, traits,
  resource class), ring_status (nodes per group and owner against the
  ring), fleet_check (orphans, allocation mismatches, excluded peers);
  fleet_status replies also carry per-agent groups, in_flight, last_seen
  and ring_version, and excluded_agents.
* 1.2 - report_build_results: several build results of one agent in one call.
* 1.3 - import_nodes(dry_run=True): check a whole import, every entry whose
  name or uuid is stored already reported, nothing written.
* 1.4 - resume_work: an agent that (re)started or re-joined asks for the
  builds and teardowns in flight on its nodes to be routed to it again.
* 1.5 - hold_for_restart: an agent stopping for a restart keeps its nodes
  for restart_grace; claim_nodes replies carry ``restarting`` (owners of
  refused nodes that are held, with the seconds left).
* 1.6 - build_instances requests may carry ``scheduler_hints`` (a mapping
  of names to JSON primitives, for scheduler filters such as Nova's
  JsonFilter); instances show them.
* 1.7 - sync_ironic_nodes: one pass of the Ironic inventory import, now.
* 1.8 - list_node_uuids(columns=True): the page as one list per field, not
  one object per node (a third of the CPU, 40 % fewer bytes).
* 1.9 - fleet_check also reports builds and deletes unchanged for
  ``[conductor] stuck_after`` (stuck-build, stuck-delete), node records
  whose state disagrees with their instance (state-mismatch) and nodes
  whose Ironic state or claim, as the Ironic sync recorded it, disagrees
  with ringfleet (backend-mismatch); its reply carries ``stuck_after``.
  Same call: asked at 1.1, an older conductor answers without them.
* 1.10 - report_progress: an agent says which of its builds the back end
  moved on (a heartbeat: ``build_timeout`` counts from the last one).
* 1.11 - build_instances requests may carry an ``image`` and a config drive
  (``user_data``, ``meta_data``, ``network_data``), stored with the
  instances and shown by show_instance; flavors may have a
  ``default_image`` (create_flavor), used by builds that name none.
* 1.12 - Tenancy: the context carries the caller's ``project_id``,
  ``user_id``, ``roles`` and ``is_admin`` (none of them: the operator);
  build_instances stores them on the instances and checks the project's
  quotas (``QuotaExceeded``); list_instances, show_instance and
  delete_instance see the caller's project only (another project's
  instance is ``InstanceNotFound``), list_instances takes ``all_projects``
  and ``project_id`` (admins); instances show ``project_id`` and
  ``user_id``; quotas: show_quota, set_quota, delete_quota, list_quotas.
  list_nodes and show_node show ``instance_uuid`` to admins only (null
  for anyone else); fleet_check is for admins only (``Forbidden``).
  A client speaking for a caller sends the instance calls at 1.12, so that
  an older conductor, which would not scope them, refuses them.
* 1.13 - Power and lifecycle verbs: reboot_instance (soft or hard),
  stop_instance, start_instance, rebuild_instance (answer at once, the
  instance's task state shows the action in flight); set_node_power_state and delete_node
  (operator calls); fleet_check also reports actions unchanged for
  ``stuck_after`` (stuck-action); instances may be ``stopped``.
* 1.14 - rebuild_instance takes a new ``image`` and config drive parts
  (``user_data``, ``meta_data``, ``network_data``), each optional and
  checked as a build's, stored with the rebuild (what is not given is
  kept).  A rebuild with any of them is sent at 1.14, so that an older
  conductor refuses it rather than redeploy the old image.
* 1.15 - list_node_uuids by share: ``ring`` and ``member`` (the nodes that
  member owns in that ring, read by their stored ring position),
  ``previous_ring`` (less those it owned in that one), ``exclude_groups``,
  ``owner`` (the nodes an agent owns), ``not_claimed_at`` (leave out the
  rows an agent's own claims changed last); replies carry ``next``, the
  marker of the next page; claim_nodes replies carry ``changed_at``.  An
  agent whose conductor is older reads the whole fleet as before.
* 1.16 - Versions for upgrade checks: fleet_status replies carry
  ``conductor_api`` (the API the answering conductor serves) and, per ring
  member in ``agents``, ``rpc_api`` (the compute agent API the agent
  announces in its membership; null for an agent of an older release).
  Asked at 1.16 (:meth:`ConductorAPI.service_versions`), an older
  conductor refuses rather than answer without them.
* 1.17 - list_nodes takes a ``uuids`` filter (at most 1,000): the records
  of the nodes a change feed named, in one call.  Sent at 1.17, so that an
  older conductor refuses it rather than ignore it.
* 1.18 - import_nodes(every_clash=True): the import answers a clash with the
  stored nodes as a dry run does (every clashing entry, ``InvalidInput``),
  so that a file checked and written in one call is sent once.
* 1.19 - claim_share: an agent claims the unpinned nodes of its share of a
  ring that have no live owner, in one statement, without naming them;
  list_node_uuids with ``owner`` takes ``outside`` (the shares that agent
  reads by ring: its nodes in them are left out).  An agent whose
  conductor is older claims by uuid and reads its nodes twice, as before.
* 1.20 - report_node_states replies carry ``gone``: the reported nodes that
  no longer exist (deleted while the agent held them), which the agent
  forgets.  Same call: an older conductor's reply has no ``gone``.
* 1.21 - Nova's key pairs, server metadata and tags: create_keypair (a
  public key given, or generated: the reply carries the private key once),
  list_keypairs, show_keypair, delete_keypair (the caller's user's own);
  build_instances requests may carry ``key_name`` (its public key goes into
  meta_data ``public_keys``), ``metadata`` (also meta_data ``meta``) and
  ``tags``; instances show ``key_name``, and show_instance, list_instances
  and build_instances replies ``metadata`` and ``tags``;
  get_instance_metadata, set_instance_metadata (``replace``),
  delete_instance_metadata, get_instance_tags, add_instance_tag,
  set_instance_tags, delete_instance_tag.  A build with any of the new
  fields is sent at 1.21, so that an older conductor refuses it.
* 1.22 - list_instances takes Nova's ``name`` (a regular expression),
  ``status``, ``changes_since``, ``sort_key`` and ``sort_dir`` (sent at
  1.22 only with one of them); list_instance_actions, show_instance_action
  (Nova's os-instance-actions).
* 1.23 - list_instances takes Nova's tag filters ``tags``, ``tags_any``,
  ``not_tags``, ``not_tags_any``; list_instance_actions takes ``limit``,
  ``marker``, ``changes_since``, ``changes_before``; rebuild_instance takes
  ``key_name`` (``""``: none); show_quota shows ``key_pairs`` (per user:
  the caller's usage) and set_quota sets it.  Each sent at 1.23 only with
  a new argument.
* 1.24 - Nova's key pair habits for admins and long lists:
  create_keypair, list_keypairs, show_keypair and delete_keypair take
  ``user_id`` (another user's key pairs: admins only, Nova's 2.10);
  list_keypairs takes ``limit`` and ``marker`` (a name of the user's, else
  InvalidInput: Nova's 2.35).  Each sent at 1.24 only with a new argument.
* 1.25 - claim_share takes ``previous_ring``: only the free nodes of the
  arcs gained since that ring (what a peer's departure gave the agent).
* 1.26 - claim_share takes ``read``: its reply also carries ``share``, the
  first page of those arcs' nodes as they stand after the claim (an
  agent's first read of a share is the call that claims it).
* 1.27 - report_node_states' reply carries ``changed_at``: the change time
  written on the rows the reports changed (the agent's change reads leave
  them out, as its claims').
* 1.28 - claim_share takes ``held``: its reply also carries ``held``, every
  node the agent owned just before the claim (a new agent process re-reads
  its held set with its first claim, not with owned_nodes first).
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

import oslo_messaging as messaging
from oslo_context import context as request_context

from conductor.common import rpc, tenancy
from conductor.common.list_filters import TAG_FILTERS
from conductor.common.paging import pages
from conductor.rpcapi_agents import AgentCalls
from conductor.rpcapi_labels import LabelCalls

__all__ = ["API_VERSION", "ConductorAPI", "pages"]

# The version every endpoint of this API serves and the newest the client
# speaks: one version per API (a client pinned at any earlier version reaches
# every method that version had).  Bump it with a line in the history above.
API_VERSION = "1.28"

_T = TypeVar("_T")

#: The fields of a build request that need API 1.11 (an image and a config drive).
_DEPLOY_FIELDS = ("image", "user_data", "meta_data", "network_data")
#: The fields of a build request that need API 1.21 (a key pair, metadata, tags).
_LABEL_FIELDS = ("key_name", "metadata", "tags")


class ConductorAPI(AgentCalls, LabelCalls):
    """Calls to the conductors (any of them: they are active-active).

    :param transport: from :func:`conductor.common.rpc.get_transport`.
    :param timeout: seconds to wait for a reply (``MessagingTimeout`` after;
        :class:`conductor.common.rpc.NoConsumer`, a ``MessagingTimeout``, at
        once when no conductor has ever consumed the topic).
    :param observe: told of every call made (method, outcome, seconds).
    """

    RPC_API_VERSION = API_VERSION

    def __init__(
        self,
        transport: messaging.Transport,
        timeout: float | None = None,
        *,
        observe: rpc.RpcObserver | None = None,
        version_cap: str | None = None,
    ) -> None:
        """``version_cap``: ``[upgrade_levels] conductor`` during a rolling upgrade."""
        self.client = rpc.get_client(
            transport,
            rpc.CONDUCTOR_TOPIC,
            version=self.RPC_API_VERSION,
            timeout=timeout,
            version_cap=version_cap,
            # A call made before any conductor consumed the topic fails at
            # once (rpc.NoConsumer), not after the whole timeout.
            fail_fast=True,
        )
        self._observe = observe
        self._columns = True  # False once a conductor did not serve list_node_uuids(columns)
        self._by_share = True  # False once a conductor did not serve list_node_uuids(ring)
        self._outside = True  # False once a conductor did not serve list_node_uuids(outside)
        self._claims_by_share = True  # False once a conductor did not serve claim_share

    def can_send_version(self, version: str) -> bool:
        """Whether calls of API ``version`` may be sent (within the pin, if any)."""
        return bool(self.client.can_send_version(version))

    def _call(self, answer: type[_T], method: str, version: str = "1.0", **kwargs: Any) -> _T:
        """Call ``method`` at ``version``; its reply, typed as ``answer``.

        The one seam between oslo.messaging's untyped replies and this typed
        API: ``answer`` is what the method's documentation
        (``docs/rpc-api.rst``) says it returns, ``object`` when the caller
        ignores it.
        """
        reply = rpc.call(self.client.prepare(version=version), method, self._observe, **kwargs)
        return cast(_T, reply)

    # -- nodes -----------------------------------------------------------------

    def create_node(self, node: dict[str, Any]) -> dict[str, Any]:
        """Create one node from a node spec: no owner, epoch 0, not scheduled until claimed."""
        return self._call(dict[str, Any], "create_node", node=node)

    def import_nodes(
        self, nodes: list[dict[str, Any]], dry_run: bool = False, every_clash: bool = False
    ) -> dict[str, Any]:
        """``dry_run`` since 1.3: check only; ``every_clash`` since 1.18: a
        clash with stored nodes names every clashing entry (see the endpoint).
        A conductor older than 1.18 is sent the import without ``every_clash``
        (it answers a clash with ``DuplicateNode`` for the first entry)."""
        if dry_run:
            return self._call(
                dict[str, Any], "import_nodes", version="1.3", nodes=nodes, dry_run=True
            )
        if every_clash and self.can_send_version("1.18"):
            return self._call(
                dict[str, Any], "import_nodes", version="1.18", nodes=nodes, every_clash=True
            )
        return self._call(dict[str, Any], "import_nodes", nodes=nodes)

    def list_nodes(
        self, filters: dict[str, Any] | None = None, limit: int = 1000, marker: str | None = None
    ) -> list[dict[str, Any]]:
        """Nodes in uuid order after ``marker`` (exclusive), at most ``limit``,
        matching every ``filters`` key given (``uuids`` since 1.17)."""
        version = "1.17" if filters and "uuids" in filters else "1.0"
        return self._call(
            list[dict[str, Any]],
            "list_nodes",
            version=version,
            filters=filters,
            limit=limit,
            marker=marker,
        )

    def show_node(self, node: str) -> dict[str, Any]:
        """The node whose uuid or name is ``node``."""
        return self._call(dict[str, Any], "show_node", node=node)

    def set_node_maintenance(
        self, node: str, maintenance: bool, reason: str | None = None
    ) -> dict[str, Any]:
        """Put a node in maintenance (with an optional ``reason``) or take it
        out; its instance, owner and epoch are untouched."""
        return self._call(
            dict[str, Any],
            "set_node_maintenance",
            node=node,
            maintenance=maintenance,
            reason=reason,
        )

    def set_node(self, node: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Since 1.1: see :class:`conductor.validation.NodeUpdate`."""
        return self._call(dict[str, Any], "set_node", version="1.1", node=node, changes=changes)

    def node_owner(self, node: str) -> dict[str, Any]:
        return self._call(dict[str, Any], "node_owner", node=node)

    def move_node(self, node: str, host: str) -> dict[str, Any]:
        return self._call(dict[str, Any], "move_node", node=node, host=host)

    def set_node_power_state(self, node: str, target: str) -> dict[str, Any]:
        """Power a node (1.13): ``power on``, ``power off``, ``rebooting``,
        ``soft power off``, ``soft rebooting``; answers at once with the node."""
        return self._call(
            dict[str, Any], "set_node_power_state", version="1.13", node=node, target=target
        )

    def delete_node(self, node: str) -> None:
        """Forget a node in maintenance that hosts nothing (1.13)."""
        self._call(object, "delete_node", version="1.13", node=node)

    def sync_ironic_nodes(self) -> dict[str, Any]:
        """Import Ironic's inventory now (one pass); what it did."""
        return self._call(dict[str, Any], "sync_ironic_nodes", version="1.7")

    # -- flavors ---------------------------------------------------------------

    def create_flavor(self, flavor: dict[str, Any]) -> dict[str, Any]:
        """Store a flavor spec; the flavor as stored.  One with a
        ``default_image`` is sent at 1.11: an older conductor refuses it."""
        version = "1.11" if flavor.get("default_image") is not None else "1.0"
        return self._call(dict[str, Any], "create_flavor", version=version, flavor=flavor)

    def list_flavors(self) -> list[dict[str, Any]]:
        """Every flavor, by name (no paging)."""
        return self._call(list[dict[str, Any]], "list_flavors")

    def show_flavor(self, flavor: str) -> dict[str, Any]:
        """The flavor named ``flavor``."""
        return self._call(dict[str, Any], "show_flavor", flavor=flavor)

    def delete_flavor(self, flavor: str) -> None:
        """Delete a flavor no instance uses (``deleted`` instances do not count)."""
        self._call(object, "delete_flavor", flavor=flavor)

    # -- instances -------------------------------------------------------------

    @staticmethod
    def _scoped(version: str) -> str:
        """``version``, or 1.12 when the thread speaks for a caller
        (:class:`~conductor.common.tenancy.CallerContext`): a conductor older
        than 1.12 would ignore the caller's project, and must refuse instead."""
        if isinstance(request_context.get_current(), tenancy.CallerContext):
            return "1.12"
        return version

    def build_instances(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        """A request with ``scheduler_hints`` is sent at 1.6, one with an image
        or a config drive at 1.11: an older conductor refuses it
        (UnsupportedVersion) rather than ignore them."""
        if any(request.get(key) for key in _LABEL_FIELDS):
            version = "1.21"
        elif any(request.get(key) is not None for key in _DEPLOY_FIELDS):
            version = "1.11"
        else:
            version = "1.6" if request.get("scheduler_hints") else "1.0"
        version = self._scoped(version)
        return self._call(list[dict[str, Any]], "build_instances", version=version, request=request)

    def list_instances(
        self,
        vm_state: str | None = None,
        host: str | None = None,
        limit: int = 1000,
        marker: str | None = None,
        *,
        all_projects: bool = False,
        project_id: str | None = None,
        **nova: str | None,
    ) -> list[dict[str, Any]]:
        """Instances in uuid order after ``marker`` (exclusive), at most
        ``limit``; without ``vm_state``, ``deleted`` ones are left out.
        ``all_projects`` and ``project_id`` since 1.12 (admins); Nova's
        filters (``nova``: ``name``, ``status``...) since 1.22."""
        kwargs: dict[str, Any] = {
            "vm_state": vm_state,
            "host": host,
            "limit": limit,
            "marker": marker,
        }
        version = self._scoped("1.0")
        if all_projects or project_id is not None:
            version = "1.12"
            kwargs |= {"all_projects": all_projects, "project_id": project_id}
        filters = {key: value for key, value in nova.items() if value is not None}
        if filters:
            version = "1.23" if set(filters) & set(TAG_FILTERS) else "1.22"
            kwargs |= filters
        return self._call(list[dict[str, Any]], "list_instances", version=version, **kwargs)

    def list_instance_actions(self, instance: str, **paged: Any) -> list[dict[str, Any]]:
        """An instance's actions, the newest first (since 1.22); a page
        (``paged``: ``limit``, ``marker``, ``changes_since``, ``changes_before``) since 1.23."""
        given = {key: value for key, value in paged.items() if value is not None}
        return self._call(
            list[dict[str, Any]],
            "list_instance_actions",
            version="1.23" if given else "1.22",
            instance=instance,
            **given,
        )

    def show_instance_action(self, instance: str, request_id: str) -> dict[str, Any]:
        """One action of an instance, with its events (since 1.22)."""
        return self._call(
            dict[str, Any],
            "show_instance_action",
            version="1.22",
            instance=instance,
            request_id=request_id,
        )

    def show_instance(self, instance: str) -> dict[str, Any]:
        """The instance whose uuid is ``instance``."""
        return self._call(
            dict[str, Any], "show_instance", version=self._scoped("1.0"), instance=instance
        )

    def delete_instance(self, instance: str) -> dict[str, Any]:
        return self._call(
            dict[str, Any], "delete_instance", version=self._scoped("1.0"), instance=instance
        )

    # -- quotas ----------------------------------------------------------------

    def show_quota(self, project_id: str) -> dict[str, Any]:
        """Since 1.12: a project's limits and usage, per resource."""
        return self._call(dict[str, Any], "show_quota", version="1.12", project_id=project_id)

    def set_quota(self, project_id: str, quotas: dict[str, int]) -> dict[str, Any]:
        """Since 1.12: set some of a project's own limits; its quota after."""
        return self._call(
            dict[str, Any], "set_quota", version="1.12", project_id=project_id, quotas=quotas
        )

    def delete_quota(self, project_id: str) -> dict[str, Any]:
        """Since 1.12: drop a project's own limits; its quota after."""
        return self._call(dict[str, Any], "delete_quota", version="1.12", project_id=project_id)

    def list_quotas(self) -> list[dict[str, Any]]:
        """Since 1.12: the projects with limits of their own."""
        return self._call(list[dict[str, Any]], "list_quotas", version="1.12")

    def reboot_instance(self, instance: str, hard: bool = False) -> dict[str, Any]:
        """Reboot an active instance, soft or ``hard`` (1.13); answers at once."""
        return self._call(
            dict[str, Any], "reboot_instance", version="1.13", instance=instance, hard=hard
        )

    def stop_instance(self, instance: str) -> dict[str, Any]:
        """Power an active instance off (1.13): ``stopped``; answers at once."""
        return self._call(dict[str, Any], "stop_instance", version="1.13", instance=instance)

    def rebuild_instance(
        self,
        instance: str,
        *,
        image: dict[str, Any] | None = None,
        user_data: str | None = None,
        meta_data: dict[str, Any] | None = None,
        network_data: dict[str, Any] | None = None,
        key_name: str | None = None,
    ) -> dict[str, Any]:
        """Re-image an instance on its node (1.13): ``active``; answers at once.

        A new ``image`` and config drive parts since 1.14 (each given
        replaces the stored one); without any, sent at 1.13 as before.
        ``key_name`` (``""``: none) since 1.23.
        """
        new = {
            key: value
            for key, value in (
                ("image", image),
                ("user_data", user_data),
                ("meta_data", meta_data),
                ("network_data", network_data),
                ("key_name", key_name),
            )
            if value is not None
        }
        version = "1.23" if key_name is not None else "1.14" if new else "1.13"
        return self._call(
            dict[str, Any],
            "rebuild_instance",
            version=version,
            instance=instance,
            **new,
        )

    def start_instance(self, instance: str) -> dict[str, Any]:
        """Power a stopped instance on (1.13): ``active``; answers at once."""
        return self._call(dict[str, Any], "start_instance", version="1.13", instance=instance)

    # -- fleet -----------------------------------------------------------------

    def fleet_status(self) -> dict[str, Any]:
        return self._call(dict[str, Any], "fleet_status")

    def fleet_status_details(self) -> dict[str, Any]:
        """``fleet_status`` asked at 1.1: refused by a 1.0 conductor, whose
        reply would lack the per-agent details."""
        return self._call(dict[str, Any], "fleet_status", version="1.1")

    def service_versions(self) -> dict[str, Any]:
        """``fleet_status`` asked at 1.16: with the answering conductor's
        ``conductor_api`` and each live agent's ``rpc_api``; refused by an
        older conductor (``UnsupportedVersion``), which is how an upgrade
        check tells it is older."""
        return self._call(dict[str, Any], "fleet_status", version="1.16")

    def ring_status(self) -> dict[str, Any]:
        return self._call(dict[str, Any], "ring_status", version="1.1")

    def fleet_check(self) -> dict[str, Any]:
        """Asked at 1.1 whatever the conductor: a 1.9 one adds stuck work,
        state and back-end mismatches to the same reply (with
        ``stuck_after``), an older one answers without them instead of
        refusing."""
        return self._call(dict[str, Any], "fleet_check", version="1.1")

    def drain_agent(self, host: str) -> dict[str, Any]:
        return self._call(dict[str, Any], "drain_agent", host=host)
