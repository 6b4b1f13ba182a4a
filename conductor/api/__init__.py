# SPDX-License-Identifier: Apache-2.0
"""``ringfleet-api``: the conductor API over HTTP/JSON (a stateless WSGI service).

Every request is served by calling the conductors over RPC with the
reference client (:class:`conductor.rpcapi.ConductorAPI`); the service keeps
no state of its own, so several can run behind a load balancer.  This
package imports only :mod:`conductor.common` and :mod:`conductor.rpcapi`
(``tests/unit/test_layering.py``): it is a client of the conductors, like
the CLI, and never touches the database.

The HTTP reference is ``docs/http-api.rst``; the OpenAPI document is
generated from the route table (:mod:`conductor.api.openapi`).
"""
