# SPDX-License-Identifier: Apache-2.0
"""The simulated hardware: what each simulated node is doing, seen by every agent.

Real bare metal is one machine seen by all: a node torn down by one agent
is clean when the next agent looks at it, whichever process that agent
runs in.  The simulator must behave the same, or an agent that acquires a
node (a takeover, a re-home, a restart) would trust a stale copy of it.  So
the simulated nodes' state lives in one store shared by the agent processes
of a fleet, not in each driver's memory:

* :class:`SqliteNodeStore`, a SQLite file (``[simulated_driver] node_store``)
  beside the action log, which several processes open at once (WAL journal,
  every read-modify-write in one ``BEGIN IMMEDIATE`` transaction);
* :class:`MemoryNodeStore`, one driver's private dictionary, when no file is
  configured (unit tests, a single agent).
"""

from __future__ import annotations

import abc
import dataclasses
import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from conductor.common.objects import PowerState, ProvisionState

__all__ = ["MemoryNodeStore", "NodeStore", "SimulatedNode", "SqliteNodeStore", "open_store"]

#: Seconds a writer waits for another process's transaction on the file.
_BUSY_TIMEOUT_MS = 30_000


@dataclasses.dataclass(frozen=True, slots=True)
class SimulatedNode:
    """What the simulated hardware shows of one node.

    :ivar last_error: why the last deploy failed or was aborted, until the
        next deploy or destroy
    :ivar image: the image the last deploy wrote, until a destroy cleans it
    :ivar config_drive: the config drive the last deploy wrote (user data,
        meta data with the SSH keys, network data), until a destroy cleans it
    """

    uuid: str
    power_state: PowerState
    provision_state: ProvisionState
    instance_uuid: str | None = None
    last_error: str | None = None
    image: Mapping[str, str] | None = None
    config_drive: Mapping[str, Any] | None = dataclasses.field(default=None, repr=False)


class NodeStore(abc.ABC):
    """The state of simulated nodes; thread-safe."""

    @abc.abstractmethod
    def get(self, uuid: str) -> SimulatedNode | None:
        """The node's state, ``None`` if the hardware never saw it."""

    @abc.abstractmethod
    def seed(self, initial: SimulatedNode) -> SimulatedNode:
        """The node's state, stored as ``initial`` first if it is not known yet."""

    @abc.abstractmethod
    def update(self, uuid: str, **changes: Any) -> SimulatedNode:
        """Change fields of a known node; returns the new state.

        :raises KeyError: the node is not known (seed it first)
        """

    def get_many(self, uuids: Iterable[str]) -> dict[str, SimulatedNode]:
        """The state of each known node of *uuids*, by uuid (unknown ones left out)."""
        return {uuid: node for uuid in uuids if (node := self.get(uuid)) is not None}

    def seed_many(self, initials: Sequence[SimulatedNode]) -> dict[str, SimulatedNode]:
        """:meth:`seed` for each of *initials*; the stored states by uuid."""
        return {initial.uuid: self.seed(initial) for initial in initials}

    def close(self) -> None:  # noqa: B027  # optional hook
        """Release the store's resources."""


class MemoryNodeStore(NodeStore):
    """Nodes in this process's memory, private to one driver."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, SimulatedNode] = {}

    def get(self, uuid: str) -> SimulatedNode | None:
        with self._lock:
            return self._nodes.get(uuid)

    def seed(self, initial: SimulatedNode) -> SimulatedNode:
        with self._lock:
            return self._nodes.setdefault(initial.uuid, initial)

    def update(self, uuid: str, **changes: Any) -> SimulatedNode:
        with self._lock:
            state = dataclasses.replace(self._nodes[uuid], **changes)
            self._nodes[uuid] = state
            return state


_SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    uuid TEXT PRIMARY KEY,
    power_state TEXT NOT NULL,
    provision_state TEXT NOT NULL,
    instance_uuid TEXT,
    last_error TEXT,
    image TEXT,
    config_drive TEXT
)
"""
#: Columns added since the first release of the store, added to an older file.
_ADDED_COLUMNS = ("image", "config_drive")
_COLUMNS = "uuid, power_state, provision_state, instance_uuid, last_error, image, config_drive"
_INSERT = "INSERT OR IGNORE INTO nodes VALUES (?, ?, ?, ?, ?, ?, ?)"
_SELECT = f"SELECT {_COLUMNS} FROM nodes WHERE uuid = ?"  # noqa: S608 -- constants only
#: uuids per ``IN (...)`` of a bulk read, well under SQLite's variable limit
_BULK = 500


class SqliteNodeStore(NodeStore):
    """Nodes in a SQLite file shared by every agent process that opens it.

    One connection per store, used under a lock (SQLite serialises writers
    anyway); ``synchronous=NORMAL`` in WAL mode: a simulated machine need not
    survive a power cut of the test host, only the crash of an agent.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(
            str(self.path),
            timeout=_BUSY_TIMEOUT_MS / 1000,
            isolation_level=None,  # explicit transactions only
            check_same_thread=False,
        )
        with self._lock:
            self._conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            self._set_up()

    def _set_up(self) -> None:
        """WAL mode and the table, retried while another process sets them up.

        Switching a new file to WAL can fail with "database is locked" at
        once, without SQLite's busy handler waiting: agents started together
        on one store did so in 2 of 180 openings (and the agent exited with
        "driver failed to start").
        """
        deadline = time.monotonic() + _BUSY_TIMEOUT_MS / 1000
        delay = 0.01
        while True:
            try:
                self._conn.execute("PRAGMA journal_mode = WAL")
                self._conn.execute("PRAGMA synchronous = NORMAL")
                self._conn.execute(_SCHEMA)
                present = {row[1] for row in self._conn.execute("PRAGMA table_info(nodes)")}
                for column in _ADDED_COLUMNS:
                    if column not in present:
                        self._conn.execute(f"ALTER TABLE nodes ADD COLUMN {column} TEXT")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() + delay > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def get(self, uuid: str) -> SimulatedNode | None:
        with self._lock:
            return self._read(uuid)

    def seed(self, initial: SimulatedNode) -> SimulatedNode:
        with self._lock, self._immediate():
            self._conn.execute(_INSERT, _row(initial))
            found = self._read(initial.uuid)
        assert found is not None
        return found

    def update(self, uuid: str, **changes: Any) -> SimulatedNode:
        with self._lock, self._immediate():
            current = self._read(uuid)
            if current is None:
                raise KeyError(uuid)
            state = dataclasses.replace(current, **changes)
            self._conn.execute(
                "UPDATE nodes SET power_state = ?, provision_state = ?, instance_uuid = ?, "
                "last_error = ?, image = ?, config_drive = ? WHERE uuid = ?",
                (*_row(state)[1:], uuid),
            )
        return state

    def get_many(self, uuids: Iterable[str]) -> dict[str, SimulatedNode]:
        # One query per _BULK nodes: an agent's periodic power report reads
        # every node it owns (10,000 at 100k nodes and 10 agents), and a
        # query per node made that report the agents' largest cost.
        wanted = list(uuids)
        found: dict[str, SimulatedNode] = {}
        with self._lock:
            for start in range(0, len(wanted), _BULK):
                chunk = wanted[start : start + _BULK]
                marks = ", ".join("?" * len(chunk))
                query = f"SELECT {_COLUMNS} FROM nodes WHERE uuid IN ({marks})"  # noqa: S608 -- constants and ? marks only
                for row in self._conn.execute(query, chunk):
                    found[row[0]] = _node(row)
        return found

    def seed_many(self, initials: Sequence[SimulatedNode]) -> dict[str, SimulatedNode]:
        with self._lock, self._immediate():
            self._conn.executemany(_INSERT, [_row(i) for i in initials])
        found = self.get_many(i.uuid for i in initials)
        assert len(found) == len({i.uuid for i in initials})
        return found

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _read(self, uuid: str) -> SimulatedNode | None:
        row = self._conn.execute(_SELECT, (uuid,)).fetchone()
        return None if row is None else _node(row)

    def _immediate(self) -> _Transaction:
        return _Transaction(self._conn)


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on an exception).

    IMMEDIATE takes the write lock at the start, so a read-modify-write of
    one process never interleaves with another's.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *_exc: object) -> None:
        self._conn.execute("COMMIT" if exc_type is None else "ROLLBACK")


def _node(row: Sequence[Any]) -> SimulatedNode:
    return SimulatedNode(
        uuid=row[0],
        power_state=PowerState(row[1]),
        provision_state=ProvisionState(row[2]),
        instance_uuid=row[3],
        last_error=row[4],
        image=None if row[5] is None else json.loads(row[5]),
        config_drive=None if row[6] is None else json.loads(row[6]),
    )


def _row(node: SimulatedNode) -> tuple[str | None, ...]:
    return (
        node.uuid,
        node.power_state.value,
        node.provision_state.value,
        node.instance_uuid,
        node.last_error,
        None if node.image is None else json.dumps(node.image),
        None if node.config_drive is None else json.dumps(node.config_drive),
    )


def open_store(path: str | None) -> NodeStore:
    """The store at ``path`` (a SQLite file), or a private in-memory one."""
    return SqliteNodeStore(path) if path else MemoryNodeStore()
