# SPDX-License-Identifier: Apache-2.0
"""What the agent calls on the conductor, as Protocols.

The service passes :class:`conductor.rpcapi.ConductorAPI`, which satisfies
all of them; tests pass small fakes.  Typed here rather than ``Any`` so
that mypy checks every call the agent makes against the reference client.
"""

from __future__ import annotations

from typing import Any, Protocol

from conductor.common.objects import ClaimOutcome, Ownership, ReleaseOutcome

__all__ = ["OwnershipCalls", "ResultCalls"]


class OwnershipCalls(Protocol):
    """Claims and releases of nodes, and the inventory (compute_agent.ownership)."""

    def owned_nodes(self, host: str) -> list[Ownership]: ...

    def list_node_uuids(
        self,
        groups: list[str] | None = None,
        since: str | None = None,
        marker: str | None = None,
        limit: int = 5000,
    ) -> dict[str, Any]: ...

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
    ) -> dict[str, Any] | None: ...

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
    ) -> dict[str, Any] | None: ...

    def claim_nodes(self, host: str, node_uuids: list[str]) -> ClaimOutcome: ...

    def release_nodes(self, host: str, claims: dict[str, int]) -> ReleaseOutcome: ...

    def transfer_nodes(self, host: str, transfers: list[dict[str, Any]]) -> ReleaseOutcome: ...


class ResultCalls(Protocol):
    """Outcomes of builds and teardowns (compute_agent.actions, compute_agent.reporting)."""

    def can_send_version(self, version: str) -> bool: ...

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
    ) -> dict[str, Any]: ...

    def report_build_results(self, host: str, results: list[dict[str, Any]]) -> dict[str, Any]: ...

    def report_destroy_result(
        self,
        host: str,
        *,
        instance_uuid: str,
        node_uuid: str,
        epoch: int,
        success: bool,
        fault: str | None = None,
    ) -> dict[str, Any]: ...
