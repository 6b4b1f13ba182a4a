# SPDX-License-Identifier: Apache-2.0
"""The ringfleet conductor: database, scheduler, RPC service and operator CLI.

The conductor service (:mod:`conductor.service`): the database
(:mod:`conductor.db`), the scheduler (:mod:`conductor.scheduler`), the RPC
endpoints (:mod:`conductor.endpoints`) and their reference client
(:mod:`conductor.rpcapi`), one build's lifecycle — the queue, its workers,
routing to the owning agent, the agents' reports applied and the sweeper —
(:mod:`conductor.lifecycle`), the view of the agent fleet
(:mod:`conductor.fleet_view`) and the operator CLI ``ringfleet``
(:mod:`conductor.cli`).

What the compute agent shares with it (RPC plumbing, exceptions, data
objects, the shared option groups) lives in :mod:`conductor.common`.  What
may import what: ``docs/architecture.rst``, "Packages and what may import
what", enforced by ``tests/unit/test_layering.py``.
"""

from conductor.common.native_threads import use_native_threads

use_native_threads()  # before any of our modules imports oslo.messaging
