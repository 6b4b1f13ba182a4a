"""The ringfleet conductor, and what every ringfleet service shares.

The conductor service (:mod:`conductor.service`): the database
(:mod:`conductor.db`), the scheduler (:mod:`conductor.scheduler`), the RPC
endpoints (:mod:`conductor.endpoints`) and their reference client
(:mod:`conductor.rpcapi`), the build queue and its workers
(:mod:`conductor.builds`), the agents' reports applied
(:mod:`conductor.build_results`), the sweeper
(:mod:`conductor.build_sweeper`), routing to the owning agent
(:mod:`conductor.routing`) and the view of the agent fleet
(:mod:`conductor.fleet_view`).

Shared with the agents and the operator CLI: the configuration option
groups (:mod:`conductor.conf`), the RPC plumbing (:mod:`conductor.rpc`),
data objects (:mod:`conductor.objects`), exceptions
(:mod:`conductor.exception`), payload validation
(:mod:`conductor.validation`), Prometheus metrics (:mod:`conductor.metrics`),
process start-up, systemd notification and the service runner
(:mod:`conductor.prepare`, :mod:`conductor.systemd`, :mod:`conductor.cmd`),
the membership set-up (:mod:`conductor.coordination`), and the operator CLI
``ringfleet`` (:mod:`conductor.cli`).  What may import what:
``docs/architecture.rst``, "Packages and what may import what".
"""
