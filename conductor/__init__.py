"""The ringfleet conductor: database, scheduler, RPC service and operator CLI.

The conductor service (:mod:`conductor.service`): the database
(:mod:`conductor.db`), the scheduler (:mod:`conductor.scheduler`), the RPC
endpoints (:mod:`conductor.endpoints`) and their reference client
(:mod:`conductor.rpcapi`), the build queue and its workers
(:mod:`conductor.builds`), the agents' reports applied
(:mod:`conductor.build_results`), the sweeper
(:mod:`conductor.build_sweeper`), routing to the owning agent
(:mod:`conductor.routing`), the view of the agent fleet
(:mod:`conductor.fleet_view`) and the operator CLI ``ringfleet``
(:mod:`conductor.cli`).

What the compute agent shares with it (RPC plumbing, exceptions, data
objects, the shared option groups) lives in :mod:`conductor.common`.  What
may import what: ``docs/architecture.rst``, "Packages and what may import
what", enforced by ``tests/unit/test_layering.py``.
"""
