# SPDX-License-Identifier: Apache-2.0
"""``ringfleet placement check``: does Placement show every node as its record says?

The agents write each node they own to Placement as a resource provider
(:mod:`compute_agent.placement_report`).  This check reads every node from
the conductor and every provider from Placement, and compares them with the
reporter's own rules (:func:`conductor.common.placement.provider.differences`),
so what it calls drift is exactly what the owner's next full comparison
would mend.  It only reads: nothing is written to Placement or ringfleet.

Exit status: 0 when Placement agrees, 1 when a problem was found (one
``KIND: message`` line each), 2 when the check could not run (Placement or
the conductor unreachable or refusing, ``[placement]`` not configured, HTTP
mode, a usage error).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from cliff.command import Command
from oslo_config import cfg

from conductor.cli import login
from conductor.cli.command import ConductorCommand, add_check_format, write_document
from conductor.common.exception import ConfigurationError, RingfleetError
from conductor.common.paging import pages

if TYPE_CHECKING:
    from conductor.common.placement import provider
    from conductor.common.placement.client import PlacementClient

# The Placement modules (keystoneauth, the hash ring's options) are imported
# where the check runs: every ringfleet command's --help loads this module.

__all__ = ["PlacementCheck", "check"]

#: Nodes per page of the conductor read.
_PAGE: Final = 1000


def _node_label(node: Mapping[str, Any]) -> str:
    name = node.get("name") or "no name"
    owner = node.get("owner") or "no owner"
    return f"node {node['uuid']} ({name}, owner {owner})"


def _node_problem(node: Mapping[str, Any], found: list[str], missing: bool) -> dict[str, Any]:
    return {
        "kind": "missing" if missing else "drift",
        "node": node["uuid"],
        "name": node.get("name"),
        "owner": node.get("owner"),
        "differences": found,
        "message": f"{_node_label(node)}: {'; '.join(found)}",
    }


def _refused_traits(client: PlacementClient, wanted: Iterable[provider.Wanted]) -> frozenset[str]:
    """The nodes' standard-looking traits Placement's catalogue lacks: the
    reporter leaves them out, so they are no drift.  Only standard names are
    asked about, so :meth:`PlacementClient.ensure_traits` only reads (one
    request; it creates custom traits alone)."""
    standard = {t for w in wanted for t in w.traits if not t.startswith("CUSTOM_")}
    return client.ensure_traits(standard) if standard else frozenset()


def check(
    client: PlacementClient,
    nodes: list[dict[str, Any]],
    *,
    aggregate: str,
    default_project: str,
    concurrency: int,
    providers: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The problems of ``nodes``' providers (each compared with its node,
    ``concurrency`` read at once), in node uuid order; with ``providers``
    (every provider in ``aggregate``), then those that are no node's.

    :raises ServiceUnavailable: Placement did not answer
    :raises PlacementRefused: Placement refused a read (credentials, policy)
    """
    from conductor.common.placement import provider  # noqa: PLC0415 -- heavy: on use only

    # The instance's project and user are not compared (an allocation's
    # consumer is, by uuid): no instance needs reading.
    wanted = {node["uuid"]: provider.wanted(node, None, default_project) for node in nodes}
    refused = _refused_traits(client, wanted.values())
    by_uuid = {node["uuid"]: node for node in nodes}
    problems: list[dict[str, Any]] = []
    with concurrent.futures.ThreadPoolExecutor(
        max_workers=concurrency, thread_name_prefix="placement-check"
    ) as pool:
        futures = {pool.submit(provider.read, client, uuid): uuid for uuid in wanted}
        try:
            for future in concurrent.futures.as_completed(futures):
                uuid = futures[future]
                shown = future.result()
                found = provider.differences(wanted[uuid], shown, aggregate, refused)
                if found:
                    problems.append(_node_problem(by_uuid[uuid], found, missing=shown is None))
        except BaseException:
            # Placement is down (or refusing): the rest would only fail too.
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    problems.sort(key=lambda p: p["node"])
    for orphan in sorted(
        (p for p in providers or () if p["uuid"] not in by_uuid), key=lambda p: p["uuid"]
    ):
        problems.append(_orphan_problem(orphan, aggregate, client))
    return problems


def _orphan_problem(
    found: Mapping[str, Any], aggregate: str, client: PlacementClient
) -> dict[str, Any]:
    # Its allocations say whether deleting it is safe (Placement refuses
    # to delete a provider with allocations anyway).
    consumers = client.get_provider_allocations(found["uuid"])
    return {
        "kind": "orphan",
        "provider": found["uuid"],
        "name": found.get("name"),
        "allocations": len(consumers),
        "message": (
            f"provider {found['uuid']} ({found.get('name')}) is in ringfleet's "
            f"aggregate {aggregate} but is no ringfleet node (allocations: {len(consumers)})"
        ),
    }


class PlacementCheck(ConductorCommand, Command):
    """Check that Placement shows every node as its record says: list the problems, or print OK.

    For clouds whose Nova schedules with the same Placement ([placement]
    configured). Every node is read from the conductor and its resource
    provider from Placement, and compared as the agents' reporter compares
    them: name, inventory (its resource class, reserved while the node
    cannot take a build), traits, membership of ringfleet's aggregate and
    the allocation of the instance on it. Providers in ringfleet's aggregate
    that are no ringfleet node (a node deleted while its agent was down)
    are reported too, unless --node limits the check. Nothing is written.

    One 'KIND: message' line per problem (DRIFT, MISSING, ORPHAN) and exit
    1, or 'OK' and exit 0; exit 2 when the check could not run (Placement or
    the conductors unreachable or refusing, [placement] not configured).
    A summary (nodes, seconds, providers per second) goes to standard error.
    It needs RPC mode: the configuration file gives both the conductors'
    transport_url and Placement's credentials.
    """

    examples = (
        ("compare every node with its Placement provider", ""),
        ("one node", "--node node-01"),
    )

    error_exit_code = 2

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        add_check_format(parser)
        parser.add_argument(
            "--node",
            action="append",
            default=[],
            metavar="NODE",
            help="check only this node (uuid or name; repeatable); providers of "
            "no node are then not looked for",
        )
        return parser

    def placement_client(self, conf: cfg.ConfigOpts) -> PlacementClient:
        """The Placement client (a seam for the tests)."""
        from conductor.common.placement.client import PlacementClient  # noqa: PLC0415 -- heavy

        return PlacementClient.from_conf(conf)

    def _config(self) -> cfg.ConfigOpts:
        config = getattr(self.app, "config", None)
        if config is None or login.wants_http(self.app.options):
            raise RingfleetError(
                "placement check needs RPC mode (a configuration file with [DEFAULT] "
                "transport_url and [placement] credentials), not the HTTP API"
            )
        from conductor.common.conf import placement as placement_conf  # noqa: PLC0415 -- heavy

        conf, source = config()
        placement_conf.OPTIONS.register(conf)
        if not placement_conf.enabled(conf):
            raise ConfigurationError(
                "placement",
                "auth_type",
                f"not set ({source}): the check needs Placement's endpoint and credentials",
            )
        return conf  # type: ignore[no-any-return]

    def _nodes(self, selected: list[str]) -> list[dict[str, Any]]:
        if selected:
            shown = [self.client.show_node(node) for node in selected]
            return list({node["uuid"]: node for node in shown}.values())
        return list(
            pages(
                lambda n, m: self.client.list_nodes(limit=n, marker=m),
                page_size=_PAGE,
            )
        )

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        conf = self._config()
        client = self.placement_client(conf)
        started = time.monotonic()
        aggregate = str(conf.placement.aggregate)
        # Providers first: a node is created before its provider, so a
        # provider listed now whose node the later listing lacks is one
        # of a deleted node, never of a node created meanwhile.
        providers = None if parsed_args.node else client.list_providers(member_of=aggregate)
        nodes = self._nodes(parsed_args.node)
        problems = check(
            client,
            nodes,
            aggregate=aggregate,
            default_project=str(conf.placement.default_project_id),
            concurrency=int(conf.placement.concurrency),
            providers=providers,
        )
        seconds = time.monotonic() - started
        self.app.stderr.write(
            f"checked {len(nodes)} nodes in {seconds:.1f} s "
            f"({len(nodes) / max(seconds, 1e-3):.0f} providers/s)\n"
        )
        self.exit_code = 1 if problems else 0
        if parsed_args.output_format != "text":
            document = {
                "ok": not problems,
                "problems": problems,
                "nodes": len(nodes),
                "aggregate": aggregate,
                "placement": client.endpoint,
            }
            write_document(self.app.stdout, parsed_args.output_format, document)
            return self.exit_code
        if not problems:
            others = "" if providers is None else ", and no provider of a node it lacks"
            self.app.stdout.write(
                f"OK: Placement at {client.endpoint} shows the {len(nodes)} nodes "
                f"as their records say{others}\n"
            )
            return 0
        for problem in problems:
            self.app.stdout.write(f"{problem['kind'].upper()}: {problem['message']}\n")
        return 1
