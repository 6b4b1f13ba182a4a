"""SQLAlchemy models of the conductor's tables.

The schema enforces what must never be broken by any code path:

* one instance per node: ``nodes.instance_uuid`` is unique, and
  ``instances.node_uuid`` is unique too, so neither side can double up even
  with several conductors racing;
* node names and uuids are unique;
* ownership is the pair (``owner``, ``owner_epoch``) on the node row itself,
  changed only by compare-and-swap updates in :mod:`conductor.db.ownership`.
"""

from __future__ import annotations

import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class NodeModel(Base):
    __tablename__ = "nodes"
    __table_args__ = (
        UniqueConstraint("uuid", name="uniq_nodes0uuid"),
        UniqueConstraint("name", name="uniq_nodes0name"),
        UniqueConstraint("instance_uuid", name="uniq_nodes0instance_uuid"),
        Index("nodes_owner_idx", "owner"),
        Index("nodes_sched_idx", "provision_state", "resource_class", "node_group"),
        Index("nodes_updated_at_idx", "updated_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), nullable=False)
    name: Mapped[str] = mapped_column(String(255), nullable=False)
    resource_class: Mapped[str] = mapped_column(String(80), nullable=False)
    traits: Mapped[list[str]] = mapped_column(JSON, nullable=False, default=list)
    properties: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)
    # "group" is an SQL keyword: the column is node_group.
    node_group: Mapped[str] = mapped_column(String(80), nullable=False, default="")
    provision_state: Mapped[str] = mapped_column(String(16), nullable=False)
    power_state: Mapped[str | None] = mapped_column(String(16), nullable=True)
    maintenance: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    maintenance_reason: Mapped[str | None] = mapped_column(String(255), nullable=True)
    owner: Mapped[str | None] = mapped_column(String(255), nullable=True)
    owner_epoch: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    instance_uuid: Mapped[str | None] = mapped_column(String(36), nullable=True)
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime, nullable=False, default=utcnow)
    updated_at: Mapped[datetime.datetime] = mapped_column(
        DateTime, nullable=False, default=utcnow, onupdate=utcnow
    )


class FlavorModel(Base):
    __tablename__ = "flavors"
    __table_args__ = (UniqueConstraint("name", name="uniq_flavors0name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(255), nullable=False)
    resource_class: Mapped[str] = mapped_column(String(80), nullable=False)
    required_traits: Mapped[list[str]] = mapped_column(JSON, nullable=False, default=list)
    forbidden_traits: Mapped[list[str]] = mapped_column(JSON, nullable=False, default=list)
    extra_specs: Mapped[dict[str, str]] = mapped_column(JSON, nullable=False, default=dict)
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime, nullable=False, default=utcnow)


class InstanceModel(Base):
    __tablename__ = "instances"
    __table_args__ = (
        UniqueConstraint("uuid", name="uniq_instances0uuid"),
        UniqueConstraint("node_uuid", name="uniq_instances0node_uuid"),
        Index("instances_vm_state_idx", "vm_state"),
        Index("instances_host_idx", "host"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), nullable=False)
    name: Mapped[str] = mapped_column(String(255), nullable=False)
    flavor: Mapped[str] = mapped_column(String(255), nullable=False)
    vm_state: Mapped[str] = mapped_column(String(16), nullable=False)
    task_state: Mapped[str | None] = mapped_column(String(16), nullable=True)
    node_uuid: Mapped[str | None] = mapped_column(String(36), nullable=True)
    host: Mapped[str | None] = mapped_column(String(255), nullable=True)
    group_hint: Mapped[str | None] = mapped_column(String(80), nullable=True)
    fault: Mapped[str | None] = mapped_column(Text, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    tried_nodes: Mapped[list[str]] = mapped_column(
        JSON, nullable=False, default=list, server_default="[]"
    )
    scheduler_hints: Mapped[dict[str, Any]] = mapped_column(
        JSON, nullable=False, default=dict, server_default="{}"
    )
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime, nullable=False, default=utcnow)
    updated_at: Mapped[datetime.datetime] = mapped_column(
        DateTime, nullable=False, default=utcnow, onupdate=utcnow
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

    host: Mapped[str] = mapped_column(String(255), primary_key=True)
    first_seen: Mapped[datetime.datetime] = mapped_column(DateTime, nullable=False, default=utcnow)
    last_seen: Mapped[datetime.datetime] = mapped_column(DateTime, nullable=False, default=utcnow)
    gone_since: Mapped[datetime.datetime | None] = mapped_column(DateTime, nullable=True)
    restart_until: Mapped[datetime.datetime | None] = mapped_column(DateTime, nullable=True)
    weight: Mapped[float] = mapped_column(Float, nullable=False, default=1.0)
