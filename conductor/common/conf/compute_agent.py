# SPDX-License-Identifier: Apache-2.0
"""Options of the ``[compute_agent]`` group."""

from __future__ import annotations

from oslo_config import cfg

from conductor.common.conf.groups import GroupOptions

group = cfg.OptGroup("compute_agent", title="Compute agent options")

opts = [
    cfg.ListOpt(
        "groups",
        default=[],
        help=(
            "Node groups (racks, sites) this agent manages; empty means every "
            "group. Each group has its own ring among the agents that serve "
            "it, so one agent can serve several racks and a site can have "
            "agents of its own."
        ),
    ),
    cfg.StrOpt(
        "driver",
        default="simulated",
        help=(
            "Bare-metal driver, by its name in the 'ringfleet.compute.drivers' "
            "entry points ('simulated' is the built-in simulator)."
        ),
    ),
    cfg.FloatOpt(
        "report_interval",
        default=30.0,
        min=1.0,
        mutable=True,
        help=(
            "Seconds between two reports of the owned nodes' power and "
            "provision states (changes are also reported at once). Shorter "
            "keeps the conductor's view fresher at the cost of more messages. "
            "The back end's progress on deploys that run longer than this goes "
            "with these reports, at most once per interval (a heartbeat for "
            "the conductors' [conductor] build_timeout, which must stay above "
            "twice this interval)."
        ),
    ),
    cfg.FloatOpt(
        "full_report_interval",
        default=600.0,
        min=0.0,
        mutable=True,
        help=(
            "Seconds between two reports that carry every owned node's state; "
            "the reports in between carry only the nodes whose state changed "
            "since the conductor last took it (at scale, re-sending an "
            "unchanged fleet every report_interval costs the conductor more "
            "than anything else it does). The full report corrects a record "
            "changed by something else. The first report after a start is not "
            "full when the conductor's inventory reads say the recorded power "
            "states: it carries the nodes whose state differs from them. "
            "0: every report is full."
        ),
    ),
    cfg.FloatOpt(
        "reconcile_interval",
        default=5.0,
        min=0.5,
        mutable=True,
        help=(
            "Seconds between two retries of the ownership reconciliation when "
            "nothing changed: claims refused earlier (a pinned node whose owner "
            "is within its grace, a node another agent still hands over) are "
            "retried at this pace. Membership changes reconcile at once."
        ),
    ),
    cfg.FloatOpt(
        "quiet_reconcile_interval",
        default=600.0,
        min=0.5,
        mutable=True,
        help=(
            "Seconds between two reconciliations while nothing changes: "
            "after a pass that read no change of the agent's share and had "
            "nothing to claim, release or wait for, the next comes after "
            "twice reconcile_interval, and after two such passes in a row "
            "after this. Every pass is a call to a conductor, and at any fixed "
            "pace a quiet fleet's calls grow with its agent count. A "
            "membership change still reconciles at once, and so does a "
            "conductor's hint (compute API 1.6) after an operator's change of "
            "nodes (created, imported, updated, maintenance, moved, deleted), "
            "an Ironic sync pass's, or nodes released or handed over, and so "
            "does the agent's broker connection coming back (a hint sent "
            "meanwhile is lost if the broker restarted or the agent's fanout "
            "queue expired). What this bounds is how soon an agent learns "
            "of a change no conductor hinted (a conductor capped below "
            "compute API 1.6, one that died between its commit and its "
            "hint). Not above reconcile_interval: no slowing down."
        ),
    ),
    cfg.IntOpt(
        "claim_batch",
        default=500,
        min=1,
        max=10000,
        help="Nodes per claim by uuid, or per hand-over of a drain, in one call to the "
        "conductor (releases go up to 10,000 a call).",
    ),
    cfg.FloatOpt(
        "conductor_timeout",
        default=30.0,
        min=1.0,
        help="Seconds to wait for a conductor's reply before retrying.",
    ),
    cfg.FloatOpt(
        "graceful_timeout",
        default=60.0,
        min=0.0,
        help=(
            "Seconds a SIGTERM waits for in-flight deployments to finish before "
            "the agent leaves anyway (their nodes stay pinned and are picked up "
            "again on restart). Keep the systemd stop timeout above it."
        ),
    ),
]

OPTIONS = GroupOptions(group, opts)
