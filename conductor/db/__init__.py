"""The conductor's database: models, migrations and one module per concern.

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
``ownership``
    the ``(owner, owner_epoch)`` claims, releases and transfers;
``agents``
    when each agent left the group, and agents held for a restart;
``fleet_report``
    the set-based counts and checks behind ``fleet status``, ``ring show``
    and ``fleet check``.
"""
