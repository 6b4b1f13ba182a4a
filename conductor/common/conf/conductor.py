# SPDX-License-Identifier: Apache-2.0
"""Options of the ``[conductor]`` group."""

from __future__ import annotations

from oslo_config import cfg

from conductor.common.conf.groups import GroupOptions

group = cfg.OptGroup("conductor", title="Conductor options")

#: ``stuck_after``'s default: seconds without a change to a build's or a
#: delete's instance record before ``fleet check`` reports it.
DEFAULT_STUCK_AFTER = 600.0
#: ``power_sync_interval``'s default: four of the agents' default report intervals.
DEFAULT_POWER_SYNC_INTERVAL = 120.0

opts = [
    cfg.FloatOpt(
        "rehome_grace",
        default=120.0,
        min=0.0,
        mutable=True,
        help=(
            "Seconds a departed agent keeps the nodes that host its instances "
            "before another agent takes them over (fenced, with the instance's "
            "host updated). Longer lets a restarting agent come back to its "
            "instances without any move; shorter gets a dead agent's instances "
            "manageable again sooner. Unpinned nodes are taken over as soon as "
            "the agent's membership expires, whatever this value."
        ),
    ),
    cfg.FloatOpt(
        "restart_grace",
        default=60.0,
        min=0.0,
        max=3600.0,
        mutable=True,
        help=(
            "Seconds an agent stopped with SIGTERM keeps all its nodes, pinned "
            "or not, before other agents may take them over: an agent restarted "
            "within this time (systemctl restart, a package upgrade) moves no "
            "node at all (static membership, as Kafka's). Meanwhile its nodes "
            "take no new builds (the scheduler places them elsewhere). An agent "
            "that dies (kill -9, a crash) is not covered: its nodes move as "
            "soon as its membership expires. To take an agent away for longer, "
            "drain it. 0 turns the hold off."
        ),
    ),
    cfg.FloatOpt(
        "build_timeout",
        default=1800.0,
        min=10.0,
        mutable=True,
        help=(
            "Seconds a build may stay BUILDING without progress before the "
            "sweeper retries it elsewhere or fails it. The back end's progress "
            "(a new provision step, reported by the agent with its state reports) "
            "counts: set it above the longest single step of a real deployment "
            "(firmware updates, large images) and above twice the agents' "
            "[compute_agent] report_interval, or healthy builds get cut off."
        ),
    ),
    cfg.FloatOpt(
        "stuck_after",
        default=DEFAULT_STUCK_AFTER,
        min=1.0,
        mutable=True,
        help=(
            "Seconds a build (BUILDING) or a delete (DELETING) may go without "
            "any change to its instance record before 'ringfleet fleet check' "
            "reports it as stuck and fails. Only a report: nothing is retried "
            "or failed because of it (build_timeout does that). Set it above "
            "your usual deployment and teardown times, or healthy work is "
            "reported; the sweeper's retries count as a change."
        ),
    ),
    cfg.FloatOpt(
        "power_sync_interval",
        default=DEFAULT_POWER_SYNC_INTERVAL,
        min=0.0,
        mutable=True,
        help=(
            "Seconds between two passes of each conductor's power-state sync: "
            "an idle ACTIVE instance whose node's recorded power has been "
            "'power off' for a whole interval (powered off outside ringfleet) "
            "becomes STOPPED, so that 'instance start' works; a STOPPED one "
            "found powered on is reported (a WARNING, 'fleet check'). Keep it "
            "above twice the agents' [compute_agent] report_interval: a record "
            "quiet for that long is not a report that crossed an action's "
            "answer. With Ironic, each inventory sync pass also does this for "
            "the nodes it lists, at once. 0 turns the periodic pass off."
        ),
    ),
    cfg.IntOpt(
        "max_attempts",
        default=3,
        min=1,
        mutable=True,
        help=(
            "Nodes a build is tried on before it goes to ERROR with the fault of "
            "every attempt. Higher survives more flaky nodes, but a request that "
            "can never succeed takes longer to fail."
        ),
    ),
    cfg.FloatOpt(
        "accept_timeout",
        default=10.0,
        min=1.0,
        help=(
            "Seconds to wait for an agent to accept a build or teardown (it "
            "accepts at once and works in the background). On timeout the call "
            "is retried while the agent is a live member, else the build waits "
            "for the node's takeover."
        ),
    ),
    cfg.FloatOpt(
        "action_timeout",
        default=300.0,
        min=1.0,
        help=(
            "Seconds to wait for an agent to carry out a power action (an "
            "instance's reboot, stop or start, a node's power verb): the agent "
            "answers when the node is done. On timeout the action is routed "
            "again, to whoever owns the node then; an agent that died meanwhile "
            "does not delay its takeover's re-route, which starts at once."
        ),
    ),
    cfg.IntOpt(
        "workers",
        default=8,
        min=1,
        help="Threads that schedule stored build requests and allocate their nodes.",
    ),
    cfg.IntOpt(
        "accept_senders",
        default=16,
        min=0,
        help=(
            "Threads that hand allocated builds to their agents, one call at a "
            "time per agent, each carrying every build queued for that agent "
            "meanwhile; the build workers go on scheduling instead of waiting "
            "for each agent's answer. More agents than senders is fine: an "
            "agent waiting for a sender gets a larger batch. 0: each build "
            "worker calls the agent itself."
        ),
    ),
    cfg.FloatOpt(
        "graceful_timeout",
        default=75.0,
        min=1.0,
        help=(
            "Seconds a SIGTERM may take: the RPC requests in flight (an "
            "'agent drain' call waits up to rpc_response_timeout), the build "
            "workers' current items, then leaving. Whatever is not done by "
            "then (a broker or database that does not answer) is abandoned "
            "with one WARNING naming it, and the conductor exits; nothing is "
            "lost, the next conductor resumes every stored build. Keep the "
            "systemd stop timeout above it."
        ),
    ),
]

OPTIONS = GroupOptions(group, opts)
