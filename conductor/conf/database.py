"""Options of the ``[database]`` group."""

from __future__ import annotations

from oslo_config import cfg

from conductor.conf.groups import register_group_opts

group = cfg.OptGroup("database", title="Database options")

opts = [
    cfg.StrOpt(
        "connection",
        secret=True,
        help=(
            "SQLAlchemy URL of the conductors' database, shared by every "
            "conductor: 'postgresql+psycopg2://user:pass@host/ringfleet' in "
            "production. SQLite ('sqlite:////var/lib/ringfleet/ringfleet.db') "
            "serializes all writes: fine for one conductor host and the "
            "embedded mode, not for an active-active pair on two hosts."
        ),
    ),
    cfg.BoolOpt(
        "connection_debug",
        default=False,
        help="Log every SQL statement (very verbose; for debugging only).",
    ),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    register_group_opts(conf, group, opts)
