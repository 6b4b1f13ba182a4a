# SPDX-License-Identifier: Apache-2.0
"""``ringfleet demo``: a whole fleet in one process, no servers, at work.

A real conductor and real compute agents run as threads of the command on the
embedded backends (SQLite in a temp dir, oslo.messaging ``kombu+memory:////``,
tooz ``file://``): :mod:`.fleet` runs them, :mod:`.scenario` drives them
through the conductor's RPC API (enroll, build, crash, re-home, join),
:mod:`.checks` verifies the invariants (``docs/architecture.rst``, "The
invariants") on what it reads back,
:mod:`.report` prints the tables, the progress bar and the summary, and
:mod:`.command` is the cliff command (its options, :mod:`.options`, apart
from the scenario: ``--help`` does not import the fleet).

It runs both services, so it sits above both: the conductor and the agent
never import each other's service code (only the RPC clients and
:mod:`conductor.common`), and this is the one place that imports the two,
exempt from that rule and imported by nothing (``tests/unit/test_layering.py``):
a package of its own, beside them.
"""

from conductor.common.native_threads import use_native_threads

use_native_threads()  # before any of our modules imports oslo.messaging
