# SPDX-License-Identifier: Apache-2.0
"""SQLAlchemy models of the conductor's tables.

The schema enforces what must never be broken by any code path:

* one instance per node: ``nodes.instance_uuid`` is unique, and
  ``instances.node_uuid`` is unique too, so neither side can double up even
  with several conductors racing;
* node names and uuids are unique;
* ownership is the pair (``owner``, ``owner_epoch``) on the node row itself,
  changed only by compare-and-swap updates in :mod:`conductor.db.ownership`.

Every database compares identities the same way: byte for byte.  PostgreSQL
and SQLite do by default; MySQL and MariaDB do not (their default collations
ignore case and trailing spaces, under which ``Agent-1`` and ``agent-1 `` would
be one owner, and one agent's fence would hold for the other's node), so
there every string column has a binary, no-pad collation
(:class:`ExactString`).  Timestamps keep their microseconds there too
(``DATETIME(6)``: index refreshes compare ``updated_at`` with an exact
instant), and floats are double precision, as elsewhere.
"""

from __future__ import annotations

import datetime
from typing import Any, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    Float,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator, TypeEngine

from conductor.common.clock import utcnow
from hashring.ring import node_position

__all__ = [
    "MYSQL_DIALECTS",
    "AgentModel",
    "Base",
    "ExactString",
    "FlavorModel",
    "InstanceActionModel",
    "InstanceMetadataModel",
    "InstanceModel",
    "InstanceTagModel",
    "KeyPairModel",
    "NodeModel",
    "NodePowerRequestModel",
    "NodeWriteModel",
    "QuotaLimitModel",
    "QuotaProjectModel",
    "QuotaUserModel",
    "binary_collation",
    # The column defaults stamp with it; the database layer's modules import
    # it from here.
    "utcnow",
]

#: The dialect names of MySQL and MariaDB (``mysql+pymysql://`` or ``mariadb+pymysql://``).
MYSQL_DIALECTS = ("mysql", "mariadb")


def binary_collation(dialect: Dialect) -> str:
    """The utf8mb4 collation comparing byte for byte, trailing spaces included.

    ``utf8mb4_bin`` is not enough: it is a PAD SPACE collation (``'a' = 'a '``).
    MariaDB (10.2 and newer) calls the no-pad one ``utf8mb4_nopad_bin``,
    MySQL 8.0 ``utf8mb4_0900_bin``.
    """
    return "utf8mb4_nopad_bin" if getattr(dialect, "is_mariadb", False) else "utf8mb4_0900_bin"


class ExactString(TypeDecorator[str]):
    """``String(length)``, compared byte for byte on every database (see module doc)."""

    impl = String
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name in MYSQL_DIALECTS:
            return dialect.type_descriptor(
                mysql.VARCHAR(
                    cast(String, self.impl_instance).length,
                    charset="utf8mb4",
                    collation=binary_collation(dialect),
                )
            )
        return dialect.type_descriptor(self.impl_instance)


# MySQL's DATETIME keeps whole seconds and its FLOAT is single precision.
_Timestamp = DateTime().with_variant(mysql.DATETIME(fsp=6), *MYSQL_DIALECTS)
_Double = Float().with_variant(mysql.DOUBLE(asdecimal=False), *MYSQL_DIALECTS)


def _position_of_inserted(context: Any) -> int:
    return node_position(context.get_current_parameters()["uuid"])


class Base(DeclarativeBase):
    pass


class NodeModel(Base):
    __tablename__ = "nodes"
    __table_args__ = (
        UniqueConstraint("uuid", name="uniq_nodes0uuid"),
        UniqueConstraint("name", name="uniq_nodes0name"),
        UniqueConstraint("instance_uuid", name="uniq_nodes0instance_uuid"),
        Index("nodes_owner_changed_idx", "owner", "updated_at"),
        Index("nodes_sched_idx", "provision_state", "resource_class", "node_group"),
        Index("nodes_updated_at_idx", "updated_at"),
        Index("nodes_ring_position_idx", "ring_position", "updated_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(ExactString(36), nullable=False)
    name: Mapped[str] = mapped_column(ExactString(255), nullable=False)
    resource_class: Mapped[str] = mapped_column(ExactString(80), nullable=False)
    traits: Mapped[list[str]] = mapped_column(JSON, nullable=False, default=list)
    properties: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)
    # "group" is an SQL keyword: the column is node_group.
    node_group: Mapped[str] = mapped_column(ExactString(80), nullable=False, default="")
    provision_state: Mapped[str] = mapped_column(ExactString(16), nullable=False)
    power_state: Mapped[str | None] = mapped_column(ExactString(16), nullable=True)
    maintenance: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    maintenance_reason: Mapped[str | None] = mapped_column(ExactString(255), nullable=True)
    owner: Mapped[str | None] = mapped_column(ExactString(255), nullable=True)
    owner_epoch: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    instance_uuid: Mapped[str | None] = mapped_column(ExactString(36), nullable=True)
    created_at: Mapped[datetime.datetime] = mapped_column(
        _Timestamp, nullable=False, default=utcnow
    )
    updated_at: Mapped[datetime.datetime] = mapped_column(
        _Timestamp, nullable=False, default=utcnow, onupdate=utcnow
    )
    # What the back end (Ironic) showed of the node, written by the inventory
    # sync (conductor.db.nodes.record_back_end_observations) without touching
    # updated_at: its raw provision state and claim (instance uuid), and the
    # instant from which that observation holds.  NULL state: never observed,
    # or gone from the back end.  Read by fleet check only.
    backend_state: Mapped[str | None] = mapped_column(ExactString(32), nullable=True)
    backend_instance_uuid: Mapped[str | None] = mapped_column(ExactString(36), nullable=True)
    backend_seen_at: Mapped[datetime.datetime | None] = mapped_column(_Timestamp, nullable=True)
    # Where the node sits on the hash ring (hashring.ring.node_position of
    # its uuid): an agent reads its share as arcs of positions, by index.
    # Computed from the uuid on every insert, whoever inserts.
    ring_position: Mapped[int] = mapped_column(
        BigInteger, nullable=False, default=_position_of_inserted
    )
    # Builds that failed on the node since the last one that succeeded
    # there (Nova's compute node stat of the same name): the scheduler's
    # failed-builds weighers prefer nodes with fewer.
    failed_builds: Mapped[int] = mapped_column(
        Integer, nullable=False, default=0, server_default="0"
    )


class NodeWriteModel(Base):
    """A write of many node rows under way, and the change time it stamps them with.

    A row's ``updated_at`` is taken when its transaction starts, and every
    reader of changes (the schedulers' node index, the agents' change reads)
    starts its next read a short overlap before its previous one: a write
    that commits later than that after its stamp -- an import of 100,000
    nodes, a share's claims on a busy database -- would never be read.  Such
    a write is recorded here, in a transaction of its own, before it begins,
    and deleted when it ends; a change read is "as of" the earliest stamp of
    those still open (:mod:`conductor.db.node_writes`).  ``expires_at``: after
    it the record is taken for abandoned (its conductor died mid-write).
    """

    __tablename__ = "node_writes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    stamp: Mapped[datetime.datetime] = mapped_column(_Timestamp, nullable=False)
    expires_at: Mapped[datetime.datetime] = mapped_column(_Timestamp, nullable=False)


class FlavorModel(Base):
    __tablename__ = "flavors"
    __table_args__ = (UniqueConstraint("name", name="uniq_flavors0name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(ExactString(255), nullable=False)
    resource_class: Mapped[str] = mapped_column(ExactString(80), nullable=False)
    required_traits: Mapped[list[str]] = mapped_column(JSON, nullable=False, default=list)
    forbidden_traits: Mapped[list[str]] = mapped_column(JSON, nullable=False, default=list)
    extra_specs: Mapped[dict[str, str]] = mapped_column(JSON, nullable=False, default=dict)
    # The image a build of this flavor gets when its request names none.
    default_image: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime.datetime] = mapped_column(
        _Timestamp, nullable=False, default=utcnow
    )


class InstanceModel(Base):
    __tablename__ = "instances"
    __table_args__ = (
        UniqueConstraint("uuid", name="uniq_instances0uuid"),
        UniqueConstraint("node_uuid", name="uniq_instances0node_uuid"),
        Index("instances_vm_state_idx", "vm_state"),
        Index("instances_task_state_idx", "task_state"),
        Index("instances_host_idx", "host"),
        Index("instances_project_idx", "project_id"),
        Index("instances_conductor_idx", "conductor"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(ExactString(36), nullable=False)
    name: Mapped[str] = mapped_column(ExactString(255), nullable=False)
    flavor: Mapped[str] = mapped_column(ExactString(255), nullable=False)
    vm_state: Mapped[str] = mapped_column(ExactString(16), nullable=False)
    task_state: Mapped[str | None] = mapped_column(ExactString(16), nullable=True)
    node_uuid: Mapped[str | None] = mapped_column(ExactString(36), nullable=True)
    host: Mapped[str | None] = mapped_column(ExactString(255), nullable=True)
    group_hint: Mapped[str | None] = mapped_column(ExactString(80), nullable=True)
    fault: Mapped[str | None] = mapped_column(Text, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    tried_nodes: Mapped[list[str]] = mapped_column(
        JSON, nullable=False, default=list, server_default="[]"
    )
    scheduler_hints: Mapped[dict[str, Any]] = mapped_column(
        JSON, nullable=False, default=dict, server_default="{}"
    )
    # The caller's Keystone project and user; NULL on rows built before
    # tenancy (admins only see those).
    project_id: Mapped[str | None] = mapped_column(ExactString(255), nullable=True)
    user_id: Mapped[str | None] = mapped_column(ExactString(255), nullable=True)
    # What the machine boots ({"source", "checksum"...}) and its config drive
    # ({"user_data", "meta_data", "network_data"}), as validated at the
    # request: every agent that acts on the instance gets them from here.
    image: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    config_drive: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # The conductor carrying the build, teardown or action in flight (the
    # one whose queue holds it); NULL: nobody does, a peer adopts it.
    conductor: Mapped[str | None] = mapped_column(ExactString(255), nullable=True)
    # The request id of the action in flight, sent to the agent: a verb
    # repeated by another conductor is done once.
    action_id: Mapped[str | None] = mapped_column(ExactString(36), nullable=True)
    # The key pair it was built with (its public key is in the config
    # drive's meta_data): Nova's server key_name.
    key_name: Mapped[str | None] = mapped_column(ExactString(255), nullable=True)
    created_at: Mapped[datetime.datetime] = mapped_column(
        _Timestamp, nullable=False, default=utcnow
    )
    updated_at: Mapped[datetime.datetime] = mapped_column(
        _Timestamp, nullable=False, default=utcnow, onupdate=utcnow
    )


class InstanceActionModel(Base):
    """One user action on an instance (Nova's ``instance_actions``): a create,
    delete, reboot, stop, start or rebuild, from the request that asked for
    it to the answer that ended it.

    Stored with the state change that puts the work in flight (in its
    transaction), finished with the one that ends it; kept as long as the
    instance row (deleted instances included).  ``result`` is the outcome
    (``Success``, ``Error``; NULL while in flight), ``message`` Nova's
    (``Error`` on a failure).
    """

    __tablename__ = "instance_actions"
    __table_args__ = (Index("instance_actions_instance_idx", "instance_uuid", "request_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    instance_uuid: Mapped[str] = mapped_column(ExactString(36), nullable=False)
    request_id: Mapped[str] = mapped_column(ExactString(255), nullable=False)
    action: Mapped[str] = mapped_column(ExactString(32), nullable=False)
    project_id: Mapped[str | None] = mapped_column(ExactString(255), nullable=True)
    user_id: Mapped[str | None] = mapped_column(ExactString(255), nullable=True)
    start_time: Mapped[datetime.datetime] = mapped_column(_Timestamp, nullable=False)
    finish_time: Mapped[datetime.datetime | None] = mapped_column(_Timestamp, nullable=True)
    result: Mapped[str | None] = mapped_column(ExactString(16), nullable=True)
    message: Mapped[str | None] = mapped_column(ExactString(255), nullable=True)


class NodePowerRequestModel(Base):
    """An operator's node power verb in flight (one per node: the last asked).

    Stored before it is routed, removed at its end: a conductor that dies
    mid-call leaves it to a peer, which routes it again with the same
    ``request_id`` (the agent does it once).
    """

    __tablename__ = "node_power_requests"

    node_uuid: Mapped[str] = mapped_column(ExactString(36), primary_key=True)
    target: Mapped[str] = mapped_column(ExactString(32), nullable=False)
    request_id: Mapped[str] = mapped_column(ExactString(36), nullable=False)
    conductor: Mapped[str | None] = mapped_column(ExactString(255), nullable=True)
    created_at: Mapped[datetime.datetime] = mapped_column(
        _Timestamp, nullable=False, default=utcnow
    )


class AgentModel(Base):
    """What conductors saw of each agent's membership.

    ``gone_since`` is when an agent was first seen missing from the group
    (NULL while it is a member): pinned nodes move only once it is older
    than ``rehome_grace``.  Several conductors write the same facts; the
    earliest departure time wins.  ``restart_until`` is set by an agent
    stopping for a restart (SIGTERM, ``restart_grace``): until then none of
    its nodes is taken over; it is cleared when the agent is back.
    """

    __tablename__ = "agents"

    host: Mapped[str] = mapped_column(ExactString(255), primary_key=True)
    first_seen: Mapped[datetime.datetime] = mapped_column(
        _Timestamp, nullable=False, default=utcnow
    )
    last_seen: Mapped[datetime.datetime] = mapped_column(_Timestamp, nullable=False, default=utcnow)
    gone_since: Mapped[datetime.datetime | None] = mapped_column(_Timestamp, nullable=True)
    restart_until: Mapped[datetime.datetime | None] = mapped_column(_Timestamp, nullable=True)
    weight: Mapped[float] = mapped_column(_Double, nullable=False, default=1.0)


class QuotaLimitModel(Base):
    """A project's own limit of one resource, overriding ``[quota]``'s default.

    ``resource`` is ``instances`` or ``resource_class:<class>``; ``hard_limit``
    -1 is unlimited.  Usage is never stored: it is counted from ``instances``
    under the project's :class:`QuotaProjectModel` row lock
    (:mod:`conductor.db.quotas`).
    """

    __tablename__ = "quota_limits"
    __table_args__ = (
        UniqueConstraint("project_id", "resource", name="uniq_quota_limits0project_id0resource"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project_id: Mapped[str] = mapped_column(ExactString(255), nullable=False)
    resource: Mapped[str] = mapped_column(ExactString(255), nullable=False)
    hard_limit: Mapped[int] = mapped_column(Integer, nullable=False)
    created_at: Mapped[datetime.datetime] = mapped_column(
        _Timestamp, nullable=False, default=utcnow
    )
    updated_at: Mapped[datetime.datetime] = mapped_column(
        _Timestamp, nullable=False, default=utcnow, onupdate=utcnow
    )


class QuotaProjectModel(Base):
    """One row per project that ever built: the lock its builds serialize on.

    A build of a project first updates this row (a row lock on every
    database, the write lock on SQLite), then counts the project's usage and
    inserts its instances in the same transaction: two builds of one project
    never count at the same time, whichever conductors run them.
    ``builds`` counts the transactions that took the lock (how busy a
    project's quota is; nothing depends on its value).
    """

    __tablename__ = "quota_projects"

    project_id: Mapped[str] = mapped_column(ExactString(255), primary_key=True)
    builds: Mapped[int] = mapped_column(Integer, nullable=False, default=0)


class QuotaUserModel(Base):
    """One row per user that ever created a key pair under a limit: the lock
    those creations serialize on (Nova's ``key_pairs`` quota counts per user).

    As :class:`QuotaProjectModel` for builds: a creation updates this row,
    counts the user's key pairs and inserts in one transaction.
    ``key_pair_creates`` counts the transactions that took the lock.
    """

    __tablename__ = "quota_users"

    user_id: Mapped[str] = mapped_column(ExactString(255), primary_key=True)
    key_pair_creates: Mapped[int] = mapped_column(Integer, nullable=False, default=0)


class KeyPairModel(Base):
    """An SSH public key of a user, by name (Nova's key pairs).

    Unique per user, as Nova's: two users of one project may each have a
    ``default`` key.  ``project_id`` is the project the user created it in.
    """

    __tablename__ = "key_pairs"
    __table_args__ = (UniqueConstraint("user_id", "name", name="uniq_key_pairs0user_id0name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[str] = mapped_column(ExactString(255), nullable=False)
    name: Mapped[str] = mapped_column(ExactString(255), nullable=False)
    project_id: Mapped[str | None] = mapped_column(ExactString(255), nullable=True)
    type: Mapped[str] = mapped_column(ExactString(16), nullable=False)
    fingerprint: Mapped[str] = mapped_column(ExactString(255), nullable=False)
    public_key: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[datetime.datetime] = mapped_column(
        _Timestamp, nullable=False, default=utcnow
    )


class InstanceMetadataModel(Base):
    """One key of an instance's metadata (Nova's server metadata)."""

    __tablename__ = "instance_metadata"
    __table_args__ = (
        UniqueConstraint("instance_uuid", "key", name="uniq_instance_metadata0uuid0key"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    instance_uuid: Mapped[str] = mapped_column(ExactString(36), nullable=False)
    key: Mapped[str] = mapped_column(ExactString(255), nullable=False)
    value: Mapped[str] = mapped_column(ExactString(255), nullable=False)


class InstanceTagModel(Base):
    """One tag of an instance (Nova's server tags)."""

    __tablename__ = "instance_tags"
    __table_args__ = (UniqueConstraint("instance_uuid", "tag", name="uniq_instance_tags0uuid0tag"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    instance_uuid: Mapped[str] = mapped_column(ExactString(36), nullable=False)
    tag: Mapped[str] = mapped_column(ExactString(60), nullable=False)
