# SPDX-License-Identifier: Apache-2.0
"""The conductor RPC API's calls made by agents: claims, inventory reads, reports.

A base of :class:`conductor.rpcapi.ConductorAPI`, in a module of its own so
that the client stays readable; the version history and the rest of the
calls are there.
"""

from __future__ import annotations

from typing import Any, TypeVar

import oslo_messaging as messaging

from conductor.common import rpc
from conductor.common.objects import ClaimOutcome, Ownership, ReleaseOutcome, inventory_entries

__all__ = ["AgentCalls", "share_page_entries"]

_T = TypeVar("_T")


def share_page_entries(page: dict[str, Any]) -> dict[str, Any]:
    """A by-share page as read in columns, as agents take it: one entry per node."""
    return {
        "nodes": inventory_entries(page),
        "as_of": page["as_of"],
        "next": page["next"],
        "unchanged": bool(page.get("unchanged")),
    }


class AgentCalls:
    """What an agent asks of the conductors (a base of the client)."""

    _columns: bool
    _by_share: bool
    _outside: bool
    _claims_by_share: bool

    def _call(self, answer: type[_T], method: str, version: str = "1.0", **kwargs: Any) -> _T:
        raise NotImplementedError  # ConductorAPI's

    def can_send_version(self, version: str) -> bool:
        raise NotImplementedError  # ConductorAPI's

    # -- agents ----------------------------------------------------------------

    def claim_nodes(self, host: str, node_uuids: list[str]) -> ClaimOutcome:
        return ClaimOutcome.from_dict(
            self._call(dict[str, Any], "claim_nodes", host=host, node_uuids=node_uuids)
        )

    def release_nodes(self, host: str, claims: dict[str, int]) -> ReleaseOutcome:
        return ReleaseOutcome.from_dict(
            self._call(dict[str, Any], "release_nodes", host=host, claims=claims)
        )

    def transfer_nodes(self, host: str, transfers: list[dict[str, Any]]) -> ReleaseOutcome:
        return ReleaseOutcome.from_dict(
            self._call(dict[str, Any], "transfer_nodes", host=host, transfers=transfers)
        )

    def list_node_uuids(
        self,
        groups: list[str] | None = None,
        since: str | None = None,
        marker: str | None = None,
        limit: int = 5000,
    ) -> dict[str, Any]:
        """``{"nodes": [{uuid, group, owner, epoch, pinned}], "as_of"}``, asked
        in columns (1.8) of a conductor that serves them; each node with its
        recorded ``power_state`` too when the conductor says it."""
        query: dict[str, Any] = {"groups": groups, "since": since, "marker": marker, "limit": limit}
        if self._columns and self.can_send_version("1.8"):
            try:
                page = self._call(
                    dict[str, Any], "list_node_uuids", version="1.8", columns=True, **query
                )
            except messaging.RemoteError as exc:
                if exc.exc_type not in rpc.NOT_SERVED:
                    raise
                self._columns = False  # an older conductor: objects from now on
            else:
                return {"nodes": inventory_entries(page), "as_of": page["as_of"]}
        return self._call(dict[str, Any], "list_node_uuids", **query)

    def list_node_share(
        self,
        member: str,
        *,
        ring: dict[str, Any] | None = None,
        previous_ring: dict[str, Any] | None = None,
        groups: list[str] | None = None,
        exclude_groups: list[str] | None = None,
        since: str | None = None,
        marker: str | None = None,
        limit: int = 5000,
        not_claimed_at: list[str] | None = None,
        outside: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any] | None:
        """A page of the nodes ``ring`` gives ``member`` (1.15), or of those it
        owns (no ``ring``): ``{"nodes", "as_of", "next"}`` (nodes as
        :meth:`list_node_uuids`'); without the rows
        last changed by ``member``'s claims stamped ``not_claimed_at``, and
        (of a conductor of 1.19) without its nodes in the shares ``outside``.

        ``None`` when the conductor does not read by share (older, or pinned
        below 1.15 by ``[upgrade_levels]``): read the whole inventory then.
        """
        if not self._by_share or not self.can_send_version("1.15"):
            return None
        query: dict[str, Any] = {"since": since, "marker": marker, "limit": limit}
        if not_claimed_at:
            query["not_claimed_at"] = not_claimed_at
        version = "1.15"
        if ring is None:
            query["owner"] = member
            if outside and self._outside and self.can_send_version("1.19"):
                query["outside"], version = outside, "1.19"
        else:
            query.update(
                ring=ring,
                member=member,
                previous_ring=previous_ring,
                groups=groups,
                exclude_groups=exclude_groups,
            )
        try:
            page = self._call(
                dict[str, Any], "list_node_uuids", version=version, columns=True, **query
            )
        except messaging.RemoteError as exc:
            if exc.exc_type not in rpc.NOT_SERVED:
                raise
            if "outside" in query:  # an older conductor: our nodes in our share too
                self._outside = False
                return self.list_node_share(
                    member, since=since, marker=marker, limit=limit, not_claimed_at=not_claimed_at
                )
            self._by_share = False  # an older conductor: the whole fleet from now on
            return None
        return share_page_entries(page)

    def claim_share(
        self,
        host: str,
        ring: dict[str, Any],
        *,
        groups: list[str] | None = None,
        exclude_groups: list[str] | None = None,
        limit: int = 5000,
        previous_ring: dict[str, Any] | None = None,
        read: int | None = None,
        held: bool = False,
    ) -> dict[str, Any] | None:
        """Claim the free unpinned nodes of ``host``'s share of ``ring`` (1.19),
        of the arcs gained since ``previous_ring`` only if given (1.25; its
        whole share from an older conductor):
        ``{"uuids", "epochs", "groups", "changed_at", "more"}``; ``None`` when
        the conductor is older (or pinned below 1.19): claim by uuid then.
        ``read`` (1.26): the reply also has ``share``, the first page of at
        most ``read`` of those nodes after the claim, as :meth:`list_node_share`
        returns pages (an older conductor's reply has none: read it then).
        ``held`` (1.28): the reply also has ``held``, the nodes ``host``
        owned before the claim, as :meth:`owned_nodes` returns them (an older
        conductor's reply has none: call that then).  With ``previous_ring``
        the reply may have ``still_live``, the departed members the conductor
        still sees live (additive: an older conductor's has none)."""
        if not self._claims_by_share or not self.can_send_version("1.19"):
            return None
        query: dict[str, Any] = {}
        version = "1.19"
        if previous_ring is not None and self.can_send_version("1.25"):
            query["previous_ring"], version = previous_ring, "1.25"
        if read is not None and self.can_send_version("1.26"):
            query["read"], version = read, "1.26"
        if held and self.can_send_version("1.28"):
            query["held"], version = True, "1.28"
        try:
            out = self._call(
                dict[str, Any],
                "claim_share",
                version=version,
                host=host,
                ring=ring,
                groups=groups,
                exclude_groups=exclude_groups,
                limit=limit,
                **query,
            )
        except messaging.RemoteError as exc:
            if exc.exc_type not in rpc.NOT_SERVED:
                raise
            self._claims_by_share = False  # an older conductor: by uuid from now on
            return None
        share = out.get("share")
        if share is not None:
            out["share"] = share_page_entries(share)
        if "held" in out:
            out["held"] = [Ownership.from_dict(o) for o in out["held"]]
        return out

    def owned_nodes(self, host: str) -> list[Ownership]:
        return [
            Ownership.from_dict(o)
            for o in self._call(list[dict[str, Any]], "owned_nodes", host=host)
        ]

    def resume_work(self, host: str) -> dict[str, Any]:
        return self._call(dict[str, Any], "resume_work", version="1.4", host=host)

    def hold_for_restart(self, host: str) -> dict[str, Any]:
        return self._call(dict[str, Any], "hold_for_restart", version="1.5", host=host)

    def report_progress(self, host: str, nodes: dict[str, int]) -> dict[str, Any]:
        return self._call(dict[str, Any], "report_progress", version="1.10", host=host, nodes=nodes)

    def report_node_states(self, host: str, states: list[dict[str, Any]]) -> dict[str, Any]:
        return self._call(dict[str, Any], "report_node_states", host=host, states=states)

    def report_build_result(
        self,
        host: str,
        *,
        instance_uuid: str,
        node_uuid: str,
        epoch: int,
        success: bool,
        fault: str | None = None,
        node_clean: bool = True,
    ) -> dict[str, Any]:
        return self._call(
            dict[str, Any],
            "report_build_result",
            host=host,
            instance_uuid=instance_uuid,
            node_uuid=node_uuid,
            epoch=epoch,
            success=success,
            fault=fault,
            node_clean=node_clean,
        )

    def report_build_results(self, host: str, results: list[dict[str, Any]]) -> dict[str, Any]:
        """Since 1.2: ``results`` as the keyword arguments of report_build_result."""
        return self._call(
            dict[str, Any], "report_build_results", version="1.2", host=host, results=results
        )

    def report_destroy_result(
        self,
        host: str,
        *,
        instance_uuid: str,
        node_uuid: str,
        epoch: int,
        success: bool,
        fault: str | None = None,
    ) -> dict[str, Any]:
        return self._call(
            dict[str, Any],
            "report_destroy_result",
            host=host,
            instance_uuid=instance_uuid,
            node_uuid=node_uuid,
            epoch=epoch,
            success=success,
            fault=fault,
        )
