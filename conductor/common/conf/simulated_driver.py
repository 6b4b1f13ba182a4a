# SPDX-License-Identifier: Apache-2.0
"""Options of the ``[simulated_driver]`` group: the bare-metal simulator.

The simulated driver is the default of the embedded mode and of the tests, so
its timing, its failures and its action log must be controllable from the
configuration alone: a test starts agent processes with a config file and
reads back the log they shared.
"""

from __future__ import annotations

from oslo_config import cfg

from conductor.common.conf.groups import GroupOptions

group = cfg.OptGroup(
    "simulated_driver",
    title="Simulated bare-metal driver options",
    help=(
        "The bare-metal simulator (driver 'simulated'): provision step "
        "durations, failure injection, the shared node store and action log."
    ),
)

#: longest duration accepted for one simulated step, in seconds
MAX_DURATION = 3600.0

opts = [
    cfg.StrOpt(
        "action_log",
        default=None,
        help=(
            "Path of the append-only action log: one JSON line per action "
            "(node, agent, epoch, action, instance, time). Several agent "
            "processes may share one file; each line is appended by a single "
            "write, so no locking is needed. Unset: no log is written."
        ),
    ),
    cfg.StrOpt(
        "node_store",
        default=None,
        help=(
            "Path of the SQLite file holding the simulated nodes' state "
            "(power, provision state, deployed instance). Every agent process "
            "of a fleet must name the same file: real hardware is one machine "
            "seen by all, so a node torn down by one agent is clean when the "
            "next one acquires it. Unset: each driver keeps its nodes in its "
            "own memory (one agent only)."
        ),
    ),
    cfg.FloatOpt(
        "step_duration",
        default=0.2,
        min=0.0,
        max=MAX_DURATION,
        help=(
            "Seconds each provision step of a deploy takes (power on, "
            "deploying image, writing config drive, rebooting), unless "
            "step_durations says otherwise for that step."
        ),
    ),
    cfg.DictOpt(
        "step_durations",
        default={},
        help=(
            "Per-step durations in seconds overriding step_duration, e.g. "
            "'deploying image:2.0,rebooting:0.5'. Keys must be step names."
        ),
    ),
    cfg.ListOpt(
        "stall_nodes",
        default=[],
        help=(
            "Names or uuids of nodes whose deploys stall: on them the step "
            "stall_step takes stall_duration instead of its own duration, and "
            "the back end reports no progress meanwhile (a hung deploy, for "
            "the conductors' build_timeout). The deploy still stops within "
            "half a second when the agent stops it (a delete, a lost node). "
            "Empty: no node stalls."
        ),
    ),
    cfg.ListOpt(
        "failing_nodes",
        default=[],
        help=(
            "Names or uuids of nodes whose power actions, rebuilds and "
            "teardowns fail (a back end that refuses them: the instance's "
            "action or delete ends in error); 'NODE:ACTION' fails only that "
            "action (power_on, power_off, reboot, soft_power_off, soft_reboot, "
            "rebuild or destroy). Deploys on them succeed, so an instance can "
            "be placed there first. Empty: none fail."
        ),
    ),
    cfg.StrOpt(
        "stall_step",
        default="deploying image",
        choices=("power on", "deploying image", "writing config drive", "rebooting"),
        help="The provision step at which deploys on stall_nodes stall.",
    ),
    cfg.FloatOpt(
        "stall_duration",
        default=MAX_DURATION,
        min=0.0,
        max=MAX_DURATION,
        help="Seconds the stalled step of a deploy on stall_nodes takes.",
    ),
    cfg.FloatOpt(
        "clean_duration",
        default=0.5,
        min=0.0,
        max=MAX_DURATION,
        help=(
            "Seconds the cleaning step of a destroy takes (after the node is "
            "powered off and before it is available again)."
        ),
    ),
    cfg.FloatOpt(
        "power_duration",
        default=0.0,
        min=0.0,
        max=MAX_DURATION,
        help=(
            "Seconds a power action (power on, power off, reboot) takes outside "
            "a deploy or destroy."
        ),
    ),
    cfg.FloatOpt(
        "failure_rate",
        default=0.0,
        min=0.0,
        max=1.0,
        help=(
            "Probability that a deploy fails, from 0 (never) to 1 (always). "
            "The outcome is a pure function of (seed, node, instance), so the "
            "same deploy fails the same way in every process and every run."
        ),
    ),
    cfg.IntOpt(
        "seed",
        default=0,
        help=(
            "Seed of the failure injection; change it to get a different but "
            "still reproducible set of failing deploys."
        ),
    ),
]

OPTIONS = GroupOptions(group, opts)
