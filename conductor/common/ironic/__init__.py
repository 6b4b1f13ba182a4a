# SPDX-License-Identifier: Apache-2.0
"""The Ironic back end, as far as both services share it.

* :mod:`~conductor.common.ironic.client` -- the small Ironic API client;
* :mod:`~conductor.common.ironic.states` -- Ironic's provision states and
  what each means to ringfleet, declared once.

The rest of the back end lives with the service that runs it (the layering
of ``tests/unit/test_layering.py`` keeps each service out of the other):
the agent's driver in :mod:`compute_agent.drivers.ironic`, the conductors'
import of Ironic's inventory in :mod:`conductor.ironic_sync`.

Its options, ``[ironic]`` (how to reach Ironic, how often to poll and to
import its inventory), are with every other option, in
:mod:`conductor.common.conf.ironic`.

Nothing is imported here, so importing one part does not load openstacksdk.
"""
