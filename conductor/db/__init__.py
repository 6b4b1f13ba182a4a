"""The conductor's database: models, migrations and one module per concern.

``engine`` opens the database; ``migration`` upgrades the schema with
alembic; ``nodes``, ``flavors``, ``instances`` and ``ownership`` hold the
queries, each working on a :class:`conductor.db.engine.Database`.
"""
