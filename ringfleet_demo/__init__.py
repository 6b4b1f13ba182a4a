"""``ringfleet demo``: a whole fleet in one process, no servers, at work.

A real conductor and real compute agents run as threads of the command on the
embedded backends (SQLite in a temp dir, oslo.messaging ``kombu+memory:////``,
tooz ``file://``): :mod:`.fleet` runs them, :mod:`.scenario` drives them
through the conductor's RPC API (enroll, build, crash, re-home, join),
:mod:`.checks` verifies the invariants (``docs/architecture.rst``, "The
invariants") on what it reads back,
:mod:`.report` prints the tables, the progress bar and the summary, and
:mod:`.command` is the cliff command.

A package of its own because it runs both services: the conductor and the
compute agent never import each other's service code (only the RPC clients
and :mod:`conductor.common`, see ``tests/unit/test_layering.py``), while the
demo sits above both and is the one place that imports the two.
"""
