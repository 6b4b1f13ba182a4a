# SPDX-License-Identifier: Apache-2.0
"""The conductor's database: models, migrations and one module per concern.

The only package that uses SQLAlchemy and the models (enforced by
``tests/unit/test_layering.py``): every other module calls the functions
here, which return the data objects of :mod:`conductor.common.objects` or
their own dataclasses, never ORM rows.

``engine`` opens the database (:class:`conductor.db.engine.Database`);
``models`` declares the tables and the constraints that hold whatever the
code does; ``migration`` upgrades the schema with alembic (the scripts are in
``migrations/``).  The queries, each working on a ``Database``:

``nodes``
    the node inventory (create, import, read, list, maintenance);
``flavors``
    flavors;
``instances``
    instance records, stored before a build is routed;
``allocations``
    putting an instance on a node and taking it off, by compare-and-swap;
``node_pages``
    the lean paged node reads: agents' inventory pages, the scheduler's
    index rows;
``node_states``
    the power and provision states agents report, fenced by epoch;
``ownership``
    the ``(owner, owner_epoch)`` claims, releases and transfers;
``agents``
    when each agent left the group, and agents held for a restart;
``fleet_report``
    the set-based counts and checks behind ``fleet status``, ``ring show``
    and ``fleet check``.
"""
