# SPDX-License-Identifier: Apache-2.0
"""Benchmark of ringfleet's scheduler against a Nova-style scheduler, in one run.

Run from the repository root::

    python -m benchmarks.sched_bench [--sizes 10000,100000] [--requests N]
                                     [--baseline-seconds S] [--synchronous normal|full]
                                     [--seed S] [--db-url URL] [--json FILE]

For every fleet size it creates a SQLite database (a temporary file, WAL),
and with ``--db-url`` (default ``$RINGFLEET_TEST_DB_URL``, as
``tools/with-test-servers.sh`` exports it) a PostgreSQL database too,
with that many nodes: about 20 resource classes of uneven sizes, a few
hardware profiles per class (traits and capabilities), two node groups,
owners spread over 10 agents, and a realistic background of nodes in
maintenance, not yet available, or already hosting an instance.  Requests are
drawn from a few flavors (traits, capability expressions, one group hint).
Then, each on its own copy of the same database (on PostgreSQL
``CREATE DATABASE ... TEMPLATE``), and printed side by side per database:

``ringfleet``
    :class:`conductor.scheduler.scheduler.Scheduler` with its default filters and
    weighers: index build time and memory per node, then every request
    decided *and its allocation committed* (``select_and_allocate``).
``ringfleet+nova``
    The same scheduler with Nova's own ``ComputeCapabilitiesFilter`` (by
    import path, through :mod:`conductor.scheduler.nova`) in place of
    ringfleet's ``CapabilitiesFilter``: what an operator keeping their Nova
    filters gets.  Skipped when Nova (the ``nova-filters`` extra) is not
    installed.  With the same seed it must place every request on the same
    node as ``ringfleet`` (the filters agree, so the random draws do too):
    the report counts the placements that differ.
``nova-defaults``
    The same scheduler with Nova's default ``enabled_filters`` and
    ``weighers`` pasted from nova.conf (``ComputeFilter``,
    ``ComputeCapabilitiesFilter``, ``ImagePropertiesFilter``, the two
    server-group filters; ``nova.scheduler.weights.all_weighers``: 13
    weighers), after ringfleet's ``TraitsFilter``.  Skipped without Nova.
``nova-mem``
    The stronger baseline: every node held in memory (kept up to date with
    its own allocations), and for each request the same filters run on
    *every* node, the survivors are weighed with the same weigher (the
    per-agent counts recomputed from all nodes, as Nova's HostState did),
    and the best is allocated with the same compare-and-swap.
``nova-db``
    What Nova's HostManager did: the same, but reading every node from the
    database for each request (:func:`conductor.db.nodes.iter_nodes`).

The baselines run for at most ``--baseline-seconds`` each (at least 3
requests), since one of their decisions costs seconds at 100k nodes.

A benchmark reports, tests check: the goals print PASS/MISS but the exit
status is 0 either way (non-zero only on bad options, or if a run placed two
instances on one node, which would make its numbers meaningless).  See
``benchmarks/README.rst`` for what each number means.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import gc
import importlib.metadata
import os
import platform
import random
import shutil
import sys
import tempfile
import time
import tracemalloc
import uuid as uuidlib
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, func, insert, select, text
from sqlalchemy.engine import make_url

from benchmarks import argtypes
from benchmarks.report import Goals, format_goals, log_line, percentile, publish
from conductor.common.conf import scheduler as scheduler_conf
from conductor.common.exception import ConfigurationError, NoValidNode
from conductor.common.objects import Flavor, Node, ProvisionState
from conductor.db import allocations, migration
from conductor.db import nodes as db_nodes
from conductor.db.engine import Database
from conductor.db.models import InstanceModel, NodeModel, utcnow
from conductor.scheduler import plugins, source
from conductor.scheduler.decide import Chooser
from conductor.scheduler.filters import BaseFilter
from conductor.scheduler.index import NodeIndex
from conductor.scheduler.request import RequestSpec
from conductor.scheduler.scheduler import Scheduler
from conductor.scheduler.weighers import BaseWeigher, WeighingContext, total_weights

__all__ = ["FLAVORS", "main", "make_fleet", "parse_args", "run"]

AGENTS = tuple(f"agent-{i:02d}" for i in range(10))
IMPLEMENTATIONS = ("ringfleet", "ringfleet+nova", "nova-defaults", "nova-mem", "nova-db")
#: the runs that need Nova installed
_NEEDS_NOVA = ("ringfleet+nova", "nova-defaults")
#: Nova's default [filter_scheduler] enabled_filters and weight_classes, as
#: nova.conf writes them ("nova-defaults"; Placement's half, traits included,
#: is always applied)
NOVA_DEFAULT_FILTERS = (
    "ComputeFilter",
    "ComputeCapabilitiesFilter",
    "ImagePropertiesFilter",
    "ServerGroupAntiAffinityFilter",
    "ServerGroupAffinityFilter",
)
NOVA_DEFAULT_WEIGHERS = ("nova.scheduler.weights.all_weighers",)
#: Nova's filter, in place of ringfleet's CapabilitiesFilter in "ringfleet+nova"
NOVA_CAPABILITIES_FILTER = (
    "nova.scheduler.filters.compute_capabilities_filter.ComputeCapabilitiesFilter"
)

_FAMILIES = ("general", "gpu", "storage", "hpc", "edge")
_SIZES = ("s", "m", "l", "xl")
#: 20 resource classes; the first ones hold most nodes (and the flavors' classes)
RESOURCE_CLASSES = tuple(f"bm-{family}-{size}" for size in _SIZES for family in _FAMILIES)
_CLASS_WEIGHTS = tuple(8 if i < 8 else 2 for i in range(len(RESOURCE_CLASSES)))

_TRAIT_POOL = (
    "HW_CPU_X86_AVX2",
    "HW_CPU_X86_AVX512F",
    "HW_NIC_SRIOV",
    "HW_GPU_NVIDIA",
    "CUSTOM_NVME",
    "CUSTOM_RAID",
    "CUSTOM_FPGA",
)


@dataclasses.dataclass(frozen=True)
class Request:
    """One build to schedule: a flavor and an optional group hint."""

    flavor: Flavor
    group: str | None = None


#: the flavors requests are drawn from, uniformly
FLAVORS: tuple[Request, ...] = (
    Request(Flavor(name="general-s", resource_class="bm-general-s")),
    Request(
        Flavor(
            name="gpu-s",
            resource_class="bm-gpu-s",
            required_traits=frozenset({"HW_GPU_NVIDIA"}),
            extra_specs={"capabilities:cpus": ">= 32"},
        )
    ),
    Request(
        Flavor(
            name="storage-s",
            resource_class="bm-storage-s",
            required_traits=frozenset({"CUSTOM_NVME"}),
            forbidden_traits=frozenset({"CUSTOM_FPGA"}),
            extra_specs={"capabilities:disk_label": "s== gpt"},
        )
    ),
    Request(
        Flavor(
            name="hpc-s",
            resource_class="bm-hpc-s",
            required_traits=frozenset({"HW_CPU_X86_AVX512F"}),
            extra_specs={
                "capabilities:boot_mode": "uefi",
                "capabilities:cpu_vt": "<or> true <or> True",
            },
        )
    ),
    Request(Flavor(name="edge-s", resource_class="bm-edge-s"), group="edge"),
    Request(
        Flavor(
            name="general-m-uefi",
            resource_class="bm-general-m",
            extra_specs={"capabilities:boot_mode": "s== uefi"},
        )
    ),
    Request(
        Flavor(
            name="gpu-m",
            resource_class="bm-gpu-m",
            required_traits=frozenset({"HW_CPU_X86_AVX2"}),
            extra_specs={"capabilities:cpus": "= 16"},
        )
    ),
    Request(
        Flavor(
            name="storage-m",
            resource_class="bm-storage-m",
            extra_specs={"capabilities:disk_label": "<in> gp"},
        )
    ),
)


#: a request no node fits (a capability no node has) in the largest resource
#: class: its "no valid node" is explained over every free node of the class
NO_FIT = Request(
    Flavor(
        name="no-fit", resource_class="bm-general-s", extra_specs={"capabilities:cpus": ">= 100000"}
    )
)
#: "no valid node" answers timed per run, right after it and once quiet
_NO_FIT_REQUESTS = 50
#: seconds without a change before the quiet ones: [scheduler]
#: index_refresh_overlap's default, and a margin
_QUIET_S = 2.2


# -- the fleet ---------------------------------------------------------------------------------


_positive = argtypes.at_least(1)

_seconds = argtypes.seconds(allow_zero=False)


def _hardware_profiles(rng: random.Random) -> dict[str, list[tuple[list[str], dict[str, str]]]]:
    """Per resource class, three hardware SKUs: (traits, capabilities)."""
    profiles: dict[str, list[tuple[list[str], dict[str, str]]]] = {}
    for resource_class in RESOURCE_CLASSES:
        skus = []
        for _ in range(3):
            traits = sorted(rng.sample(_TRAIT_POOL, rng.randint(1, 4)))
            capabilities = {
                "cpus": rng.choice(("16", "32", "64")),
                "cpu_vt": rng.choice(("true", "True", "false")),
                "disk_label": rng.choice(("gpt", "gpt", "msdos")),
            }
            skus.append((traits, capabilities))
        profiles[resource_class] = skus
    # Two of the three SKUs of the flavors' classes match their flavor.
    matching = {
        "bm-gpu-s": (["HW_GPU_NVIDIA", "HW_CPU_X86_AVX2"], {"cpus": "32"}),
        "bm-storage-s": (["CUSTOM_NVME"], {"disk_label": "gpt", "cpus": "16"}),
        "bm-hpc-s": (["HW_CPU_X86_AVX512F"], {"cpu_vt": "true", "cpus": "64"}),
        "bm-gpu-m": (["HW_CPU_X86_AVX2"], {"cpus": "32"}),
        "bm-storage-m": (["CUSTOM_RAID"], {"disk_label": "gpt"}),
    }
    for resource_class, (traits, capabilities) in matching.items():
        profiles[resource_class][0] = (traits, capabilities)
        profiles[resource_class][1] = (sorted({*traits, "HW_NIC_SRIOV"}), capabilities)
    return profiles


def make_fleet(db: Database, count: int, seed: int) -> dict[str, int]:
    """Insert *count* nodes (and the instances of those already hosting one).

    About 10 % of nodes host an instance, 2 % are in maintenance and 3 % are
    not yet available.  Returns counts by state.
    """
    rng = random.Random(seed)
    profiles = _hardware_profiles(rng)
    # An existing fleet: its rows changed long before the index is built, so
    # no incremental refresh during the measurements re-reads them.
    long_ago = utcnow() - datetime.timedelta(hours=1)
    node_rows: list[dict[str, Any]] = []
    instance_rows: list[dict[str, Any]] = []
    states: Counter[str] = Counter()
    for i in range(count):
        node_uuid = str(uuidlib.UUID(int=rng.getrandbits(128), version=4))
        resource_class = rng.choices(RESOURCE_CLASSES, weights=_CLASS_WEIGHTS)[0]
        traits, capabilities = rng.choice(profiles[resource_class])
        capabilities = {**capabilities, "boot_mode": "uefi" if rng.random() < 0.75 else "bios"}
        owner = AGENTS[rng.randrange(len(AGENTS))]
        roll = rng.random()
        state, maintenance, instance = "available", False, None
        if roll < 0.10:
            state, instance = "active", str(uuidlib.UUID(int=rng.getrandbits(128), version=4))
        elif roll < 0.12:
            maintenance = True
        elif roll < 0.15:
            state = rng.choice(("manageable", "enroll", "cleaning"))
        states["in maintenance" if maintenance else state] += 1
        node_rows.append(
            {
                "uuid": node_uuid,
                "name": f"node-{i:06d}",
                "resource_class": resource_class,
                "traits": traits,
                "properties": {
                    "capabilities": ",".join(f"{k}:{v}" for k, v in sorted(capabilities.items())),
                    "memory_mb": 262144,
                    "local_gb": 1800,
                    "cpu_arch": "x86_64",
                },
                "node_group": "edge" if rng.random() < 0.5 else "",
                "provision_state": state,
                "power_state": "power on" if instance else "power off",
                "maintenance": maintenance,
                "maintenance_reason": "disk failure" if maintenance else None,
                "owner": owner,
                "owner_epoch": 1,
                "instance_uuid": instance,
                "created_at": long_ago,
                "updated_at": long_ago,
            }
        )
        if instance is not None:
            instance_rows.append(
                {
                    "uuid": instance,
                    "name": f"vm-{i:06d}",
                    "flavor": "existing",
                    "vm_state": "active",
                    "node_uuid": node_uuid,
                    "host": owner,
                }
            )
    with db.transaction() as session:
        for start in range(0, len(node_rows), 5000):
            session.execute(insert(NodeModel), node_rows[start : start + 5000])
        for start in range(0, len(instance_rows), 5000):
            session.execute(insert(InstanceModel), instance_rows[start : start + 5000])
    return dict(states)


def new_instances(db: Database, count: int) -> list[str]:
    """*count* stored build requests (``building``, no node), as the conductor writes them."""
    uuids = [str(uuidlib.uuid4()) for _ in range(count)]
    rows = [
        {"uuid": u, "name": f"bench-{u[:8]}", "flavor": "bench", "vm_state": "building"}
        for u in uuids
    ]
    with db.transaction() as session:
        session.execute(insert(InstanceModel), rows)
    return uuids


def open_db(path: Path, synchronous: str) -> Database:
    db = Database(f"sqlite:///{path}")
    if synchronous == "normal":

        @event.listens_for(db.engine, "connect")
        def _normal(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.execute("PRAGMA synchronous=NORMAL")

    return db


class SqliteStore:
    """Fleets as SQLite files (WAL) in ``workdir``; a copy is a file copy."""

    name = "sqlite"

    def __init__(self, workdir: Path, synchronous: str) -> None:
        self.workdir, self.synchronous = workdir, synchronous

    def open(self, name: str) -> Database:
        return open_db(self.workdir / f"{name}.db", self.synchronous)

    def copy(self, source_name: str, name: str) -> Database:
        """A copy of the closed database ``source_name`` (and its log, if any is left)."""
        source_path, target = self.workdir / f"{source_name}.db", self.workdir / f"{name}.db"
        shutil.copyfile(source_path, target)
        wal = Path(f"{source_path}-wal")
        if wal.exists():
            shutil.copyfile(wal, Path(f"{target}-wal"))
        return self.open(name)

    def drop(self, name: str) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.workdir / name}.db{suffix}").unlink(missing_ok=True)


class PostgresStore:
    """Fleets as databases on the PostgreSQL server of ``admin_url`` (the
    production database); a copy is ``CREATE DATABASE ... TEMPLATE``."""

    name = "postgresql"

    def __init__(self, admin_url: str) -> None:
        self.url = make_url(admin_url)
        self.prefix = f"rf_sched_{uuidlib.uuid4().hex[:8]}_"
        self.admin = create_engine(admin_url, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
        self.made: list[str] = []

    def _sql(self, statement: str) -> None:
        with self.admin.connect() as connection:
            connection.execute(text(statement))

    def _db(self, name: str) -> Database:
        url = self.url.set(database=self.prefix + name)
        return Database(url.render_as_string(hide_password=False))

    def open(self, name: str) -> Database:
        self._sql(f'CREATE DATABASE "{self.prefix}{name}"')
        self.made.append(name)
        return self._db(name)

    def copy(self, source_name: str, name: str) -> Database:
        self._sql(f'CREATE DATABASE "{self.prefix}{name}" TEMPLATE "{self.prefix}{source_name}"')
        self.made.append(name)
        return self._db(name)

    def drop(self, name: str) -> None:
        self._sql(f'DROP DATABASE IF EXISTS "{self.prefix}{name}" WITH (FORCE)')
        if name in self.made:
            self.made.remove(name)

    def close(self) -> None:
        for name in list(self.made):
            self.drop(name)
        self.admin.dispose()


Store = SqliteStore | PostgresStore


def _double_allocations(db: Database) -> int:
    """Nodes hosting more than one instance (there must be none)."""
    with db.transaction() as session:
        counted = session.execute(
            select(InstanceModel.node_uuid, func.count())
            .where(InstanceModel.node_uuid.is_not(None))
            .group_by(InstanceModel.node_uuid)
            .having(func.count() > 1)
        ).all()
    return len(counted)


# -- measuring ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _db_time(spent: list[float]) -> Iterator[None]:
    """Time spent in :func:`allocations.allocate` (the compare-and-swap and commit)."""
    real = allocations.allocate

    def timed(db: Database, node_uuid: str, instance_uuid: str) -> Any:
        start = time.perf_counter()
        try:
            return real(db, node_uuid, instance_uuid)
        finally:
            spent.append(time.perf_counter() - start)

    allocations.allocate = timed  # type: ignore[assignment]
    try:
        yield
    finally:
        allocations.allocate = real  # type: ignore[assignment]


def _summary(latencies: list[float], db_spent: list[float], wall: float) -> dict[str, Any]:
    done = len(latencies)
    return {
        "decisions": done,
        "wall_s": wall,
        "allocations_per_s": done / wall if wall > 0 else float("nan"),
        "p50_ms": percentile(latencies, 50) * 1e3,
        "p99_ms": percentile(latencies, 99) * 1e3,
        "db_share": sum(db_spent) / wall if wall > 0 else float("nan"),
    }


def index_memory(db: Database) -> tuple[int, float]:
    """Bytes retained by an index of every node (tracemalloc), and per node."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        index = NodeIndex()
        for node, hardware in source.load_all(db):
            index.put(node, hardware)
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return retained, retained / max(1, len(index))


def nova_filters() -> list[BaseFilter] | None:
    """TraitsFilter and Nova's ComputeCapabilitiesFilter, or ``None`` without Nova."""
    try:
        return plugins.load_filters(["TraitsFilter", NOVA_CAPABILITIES_FILTER])
    except ConfigurationError:
        return None


def nova_defaults() -> tuple[list[BaseFilter], list[BaseWeigher]] | None:
    """Nova's default filters and weighers as nova.conf names them, or ``None`` without Nova."""
    try:
        with warnings.catch_warnings():
            # all_weighers imports Nova's policies, which warn about their own
            # deprecations on import: not what this benchmark measures.
            warnings.simplefilter("ignore", DeprecationWarning)
            return (
                plugins.load_filters(NOVA_DEFAULT_FILTERS),
                plugins.load_weighers(NOVA_DEFAULT_WEIGHERS),
            )
    except ConfigurationError:
        return None


def bench_ours(
    db: Database,
    requests: list[Request],
    instances: list[str],
    seed: int,
    filters: Sequence[BaseFilter] | None = None,
    weighers: Sequence[BaseWeigher] | None = None,
) -> dict[str, Any]:
    scheduler = Scheduler(db, filters=filters, weighers=weighers, rng=random.Random(seed))
    start = time.perf_counter()
    scheduler.resync()
    build_s = time.perf_counter() - start
    latencies: list[float] = []
    db_spent: list[float] = []
    placements: list[str | None] = []
    no_valid = 0
    with _db_time(db_spent):
        start = time.perf_counter()
        for request, instance in zip(requests, instances, strict=True):
            began = time.perf_counter()
            try:
                node, _claim = scheduler.select_and_allocate(
                    request.flavor, instance, live_members=AGENTS, group=request.group
                )
            except NoValidNode:
                no_valid += 1
                placements.append(None)
                continue
            latencies.append(time.perf_counter() - began)
            placements.append(node.uuid)
        wall = time.perf_counter() - start
    result = _summary(latencies, db_spent, wall)
    no_fit = _no_fit(scheduler)
    result.update(
        no_fit,
        no_fit_ratio=no_fit["no_fit_p50_ms"] / result["p50_ms"],
        no_fit_quiet_ratio=no_fit["no_fit_quiet_p50_ms"] / result["p50_ms"],
    )
    stats = scheduler.stats()
    result.update(
        {
            "index_build_s": build_s,
            "index": {k: stats[k] for k in ("nodes", "free", "buckets", "profiles")},
            "no_valid_node": no_valid,
            "lost_races": stats["lost_races"],
            "placements": placements,
        }
    )
    return result


def _no_fit(scheduler: Scheduler) -> dict[str, float]:
    """The latency of a "no valid node" answer (its read of the nodes freed
    since the last refresh and its explanation included).

    Right after the run, that read walks the rows the run changed in the
    last ``index_refresh_overlap`` (2 s) and more; once that long has
    passed without a change, it finds none.
    """
    result = {}
    for key in ("no_fit_p50_ms", "no_fit_quiet_p50_ms"):
        if key == "no_fit_quiet_p50_ms":
            time.sleep(_QUIET_S)
        spent = []
        for _ in range(_NO_FIT_REQUESTS):
            began = time.perf_counter()
            try:
                scheduler.select_and_allocate(
                    NO_FIT.flavor, str(uuidlib.uuid4()), live_members=AGENTS, group=NO_FIT.group
                )
            except NoValidNode:
                spent.append(time.perf_counter() - began)
            else:
                raise RuntimeError("the no-fit request found a node")
        result[key] = percentile(spent, 50) * 1e3
    return result


def _baseline_choose(
    chooser: Chooser,
    fleet: Sequence[Node],
    request: RequestSpec,
    rng: random.Random,
) -> list[Node]:
    """Nova's way: every filter on every node, then weigh the survivors; best first."""
    chain = chooser.chain
    passing = [node for node in fleet if all(f.filter(node, request) for f in chain)]
    load = Counter(n.owner for n in fleet if n.instance_uuid is not None and n.owner is not None)
    rng.shuffle(passing)
    weights = total_weights(chooser.weighers, passing, request, WeighingContext(load))
    order = sorted(range(len(passing)), key=weights.__getitem__, reverse=True)
    return [passing[i] for i in order]


def bench_baseline(
    db: Database,
    requests: list[Request],
    instances: list[str],
    *,
    read_every_time: bool,
    seconds: float,
    seed: int,
) -> dict[str, Any]:
    rng = random.Random(seed)
    chooser = Chooser(
        plugins.load_filters(scheduler_conf.DEFAULT_FILTERS),
        plugins.load_weighers(scheduler_conf.DEFAULT_WEIGHERS),
    )
    fleet: dict[str, Node] = {} if read_every_time else {n.uuid: n for n in db_nodes.iter_nodes(db)}
    latencies: list[float] = []
    db_spent: list[float] = []
    no_valid = 0
    with _db_time(db_spent):
        start = time.perf_counter()
        for done, (request, instance) in enumerate(zip(requests, instances, strict=True)):
            if done >= 3 and time.perf_counter() - start > seconds:
                break
            began = time.perf_counter()
            nodes = list(db_nodes.iter_nodes(db)) if read_every_time else list(fleet.values())
            spec = RequestSpec.build(
                request.flavor, instance, live_members=frozenset(AGENTS), group=request.group
            )
            for node in _baseline_choose(chooser, nodes, spec, rng):
                ownership = allocations.allocate(db, node.uuid, instance)
                if ownership is not None:
                    if not read_every_time:
                        fleet[node.uuid] = dataclasses.replace(
                            node, instance_uuid=instance, provision_state=ProvisionState.DEPLOYING
                        )
                    latencies.append(time.perf_counter() - began)
                    break
            else:
                no_valid += 1
        wall = time.perf_counter() - start
    result = _summary(latencies, db_spent, wall)
    result["no_valid_node"] = no_valid
    return result


def db_floor(db: Database, count: int) -> float:
    """Allocations per second of the compare-and-swap alone, on free nodes (no decision)."""
    with db.transaction() as session:
        free = list(
            session.scalars(
                select(NodeModel.uuid)
                .where(
                    NodeModel.provision_state == "available",
                    NodeModel.maintenance.is_(False),
                    NodeModel.instance_uuid.is_(None),
                )
                .limit(count)
            )
        )
    instances = new_instances(db, len(free))
    start = time.perf_counter()
    for node_uuid, instance in zip(free, instances, strict=True):
        allocations.allocate(db, node_uuid, instance)
    return len(free) / (time.perf_counter() - start)


def bench_size(
    size: int,
    store: Store,
    *,
    request_count: int,
    baseline_seconds: float,
    seed: int,
    log: Callable[[str], None],
) -> dict[str, Any]:
    pristine = f"fleet-{size}"
    db = store.open(pristine)
    migration.upgrade(db)
    start = time.perf_counter()
    states = make_fleet(db, size, seed)
    log(f"  {size} nodes created in {time.perf_counter() - start:.1f} s")
    retained, per_node = index_memory(db)
    db.dispose()  # closing the last connection checkpoints the log (and frees the template)

    rng = random.Random(seed + 1)
    requests = [rng.choice(FLAVORS) for _ in range(request_count)]
    result: dict[str, Any] = {
        "nodes": size,
        "states": states,
        "index_memory_bytes": retained,
        "index_bytes_per_node": per_node,
    }
    with_nova = nova_filters()
    defaults = nova_defaults()
    if with_nova is None or defaults is None:
        log("  ringfleet+nova, nova-defaults: skipped (Nova is not installed: the extra)")
    for name in (*IMPLEMENTATIONS, "db-floor"):
        if name in _NEEDS_NOVA and (with_nova is None or defaults is None):
            continue
        copy = f"run-{size}-{name.replace('+', '-')}"
        db = store.copy(pristine, copy)
        try:
            if name == "db-floor":
                result["db_floor_per_s"] = db_floor(db, min(request_count, 2000))
                log(f"  {store.name} db floor: {result['db_floor_per_s']:.0f} allocations/s")
                continue
            instances = new_instances(db, request_count)
            if name == "ringfleet":
                measured = bench_ours(db, requests, instances, seed)
            elif name == "ringfleet+nova":
                measured = bench_ours(db, requests, instances, seed, filters=with_nova)
            elif name == "nova-defaults":
                assert defaults is not None
                filters, weighers = defaults
                measured = bench_ours(
                    db, requests, instances, seed, filters=filters, weighers=weighers
                )
                measured.pop("placements")
            else:
                measured = bench_baseline(
                    db,
                    requests,
                    instances,
                    read_every_time=name == "nova-db",
                    seconds=baseline_seconds,
                    seed=seed,
                )
            measured["double_allocations"] = _double_allocations(db)
            if measured["double_allocations"]:
                raise RuntimeError(f"{name} at {size}: a node got two instances")
            result[name] = measured
            log(
                f"  {store.name} {name}: {measured['decisions']} decisions, "
                f"{measured['allocations_per_s']:.1f}/s"
            )
        finally:
            db.dispose()
            store.drop(copy)
    store.drop(pristine)
    ours = result["ringfleet"].pop("placements")
    if "ringfleet+nova" in result:
        theirs = result["ringfleet+nova"].pop("placements")
        result["ringfleet+nova"]["placements_differing"] = sum(
            1 for a, b in zip(ours, theirs, strict=True) if a != b
        )
    result["speedup_vs_nova_mem"] = (
        result["ringfleet"]["allocations_per_s"] / result["nova-mem"]["allocations_per_s"]
    )
    result["speedup_vs_nova_db"] = (
        result["ringfleet"]["allocations_per_s"] / result["nova-db"]["allocations_per_s"]
    )
    return result


# -- goals and report --------------------------------------------------------------------------


def _goals(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    goals = Goals()
    add = goals.add

    def measured(size: str, *keys: str) -> float | None:
        value: Any = results.get(size)
        for key in keys:
            if value is None:
                return None
            value = value.get(key)
        return None if value is None else float(value)

    for size, minimum in (("10000", 2000.0), ("100000", 1000.0)):
        rate = measured(size, "ringfleet", "allocations_per_s")
        add(
            f"committed allocations/s at {int(size):,} nodes",
            f">= {minimum:,.0f}/s",
            rate,
            None if rate is None else rate >= minimum,
        )
    rate = measured("100000", "ringfleet+nova", "allocations_per_s")
    add(
        "with Nova's ComputeCapabilitiesFilter at 100,000 nodes",
        ">= 1,000/s",
        rate,
        None if rate is None else rate >= 1000.0,
    )
    rate = measured("100000", "nova-defaults", "allocations_per_s")
    add(
        "with Nova's default filters and weighers at 100,000 nodes",
        ">= 1,000/s",
        rate,
        None if rate is None else rate >= 1000.0,
    )
    speedup = measured("100000", "speedup_vs_nova_mem")
    add(
        "speedup vs nova-mem at 100,000 nodes",
        ">= 10x",
        speedup,
        None if speedup is None else speedup >= 10,
    )
    for size in ("10000", "100000"):
        ratio = measured(size, "nova-defaults", "no_fit_quiet_ratio")
        add(
            f"'no valid node' (no change in 2 s) vs a placement, Nova's defaults, "
            f"at {int(size):,} nodes",
            "<= 2.0x",
            ratio,
            None if ratio is None else ratio <= 2.0,
        )
    build = measured("100000", "ringfleet", "index_build_s")
    add("index build at 100,000 nodes", "<= 1.0 s", build, None if build is None else build <= 1.0)
    return goals.items


def run(
    sizes: Sequence[int],
    *,
    request_count: int,
    baseline_seconds: float,
    synchronous: str,
    seed: int,
    workdir: Path | None = None,
    db_url: str | None = None,
    log: Callable[[str], None] = lambda _line: None,
) -> dict[str, Any]:
    """Run the whole benchmark; the JSON-ready report.

    ``results`` are SQLite's; with ``db_url`` (a PostgreSQL server the
    benchmark may create databases on) the same runs on PostgreSQL are in
    ``postgresql``, with the same keys.
    """
    results: dict[str, dict[str, Any]] = {}
    on_postgres: dict[str, dict[str, Any]] = {}
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sched-bench-")))
        stores: list[tuple[Store, dict[str, dict[str, Any]]]] = [
            (SqliteStore(workdir, synchronous), results)
        ]
        if db_url:
            postgres = PostgresStore(db_url)
            stack.callback(postgres.close)
            stores.append((postgres, on_postgres))
        for size in sizes:
            for store, into in stores:
                log(f"fleet of {size} nodes on {store.name}")
                into[str(size)] = bench_size(
                    size,
                    store,
                    request_count=request_count,
                    baseline_seconds=baseline_seconds,
                    seed=seed,
                    log=log,
                )
    report: dict[str, Any] = {
        "config": {
            "sizes": list(sizes),
            "requests": request_count,
            "baseline_seconds": baseline_seconds,
            "synchronous": synchronous,
            "databases": ["sqlite", "postgresql"] if db_url else ["sqlite"],
            "seed": seed,
            "agents": len(AGENTS),
            "resource_classes": len(RESOURCE_CLASSES),
            "flavors": [request.flavor.name for request in FLAVORS],
        },
        "environment": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "versions": {
                dist: importlib.metadata.version(dist)
                for dist in ("SQLAlchemy", "stevedore", "nova")
                if _installed(dist)
            },
        },
        "implementations": [
            name
            for name in IMPLEMENTATIONS
            if name not in _NEEDS_NOVA or any(name in res for res in results.values())
        ],
        "results": results,
        "goals": _goals(results),
    }
    if db_url:
        report["postgresql"] = on_postgres
        report["goals_postgresql"] = _goals(on_postgres)
    return report


def _installed(dist: str) -> bool:
    try:
        importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def format_report(report: dict[str, Any]) -> str:
    """The human-readable table of a :func:`run` report: with PostgreSQL, each
    implementation's SQLite and PostgreSQL columns side by side."""
    config = report["config"]
    postgres = report.get("postgresql") or {}
    database = f"SQLite (WAL, synchronous={config['synchronous'].upper()})"
    if postgres:
        database += " and PostgreSQL (columns 'pg')"
    lines = [
        f"scheduling benchmark: {database}, "
        f"{config['agents']} agents, {config['resource_classes']} resource classes, "
        f"{len(config['flavors'])} flavors, seed {config['seed']}, "
        f"Python {report['environment']['python']}, {report['environment']['cpus']} CPUs",
        "every decision includes its allocation, committed (compare-and-swap)",
        "ringfleet+nova: ringfleet's scheduler running Nova's ComputeCapabilitiesFilter; "
        "nova-defaults: Nova's default enabled_filters and weighers, as nova.conf names them; "
        "nova-mem: all nodes in memory, every filter on every node per request; "
        "nova-db: all nodes read from the database per request (Nova's HostManager)",
    ]
    names = report["implementations"]
    # wide enough for the longest heading ("ringfleet+nova pg") and a gap
    width = max(15, *(len(name) + (5 if postgres else 2) for name in names))
    for size, res in report["results"].items():
        # (heading, that database's results at this size)
        runs = [("", res)] + ([(" pg", postgres[size])] if size in postgres else [])
        columns = [(f"{name}{tag}", found[name]) for name in names for tag, found in runs]

        def row(
            label: str,
            fmt: Callable[[dict[str, Any]], str],
            columns: list[tuple[str, dict[str, Any]]] = columns,
        ) -> str:
            return f"{label:<32}" + "".join(f"{fmt(r):>{width}}" for _, r in columns)

        def per_db(
            label: str,
            fmt: Callable[[dict[str, Any]], str],
            note: str = "",
            runs: list[tuple[str, dict[str, Any]]] = runs,
        ) -> str:
            return f"{label:<32}" + "".join(f"{fmt(found):>{width}}" for _, found in runs) + note

        lines += [
            "",
            f"{int(size):,} nodes (index: {res['ringfleet']['index']['free']:,} free, "
            f"{res['ringfleet']['index']['profiles']} profiles in "
            f"{res['ringfleet']['index']['buckets']} buckets)",
            f"{'':<32}" + "".join(f"{heading:>{width}}" for heading, _ in columns),
            row("decisions measured", lambda r: str(r["decisions"])),
            row("committed allocations/s", lambda r: f"{r['allocations_per_s']:.1f}"),
            row("latency p50 (ms)", lambda r: f"{r['p50_ms']:.2f}"),
            row("latency p99 (ms)", lambda r: f"{r['p99_ms']:.2f}"),
            row("share of time in allocate()", lambda r: f"{r['db_share']:.0%}"),
            row("no valid node", lambda r: str(r["no_valid_node"])),
            row("'no valid node' p50 (ms)", lambda r: _no_fit_shown(r, "no_fit_p50_ms", "{:.2f}")),
            row("  / a placement's p50", lambda r: _no_fit_shown(r, "no_fit_ratio", "{:.2f}x")),
            row(
                "  2 s later (no change): p50 ms",
                lambda r: _no_fit_shown(r, "no_fit_quiet_p50_ms", "{:.2f}"),
            ),
            row(
                "  / a placement's p50",
                lambda r: _no_fit_shown(r, "no_fit_quiet_ratio", "{:.2f}x"),
            ),
        ]
        if postgres:
            lines.append(f"{'':<32}" + "".join(f"{db:>{width}}" for db in ("sqlite", "pg")))
        lines += [
            per_db("index build (s)", lambda r: f"{r['ringfleet']['index_build_s']:.3f}"),
            per_db("index memory per node (bytes)", lambda r: f"{r['index_bytes_per_node']:.0f}"),
            per_db("races lost (stale index)", lambda r: str(r["ringfleet"]["lost_races"])),
            per_db(
                "allocate() alone (/s)",
                lambda r: f"{r['db_floor_per_s']:.0f}",
                "   the compare-and-swap without any decision: the ceiling",
            ),
        ]
        for tag, found in runs:
            lines.append(
                f"speedup{tag}: {found['speedup_vs_nova_mem']:.0f}x vs nova-mem, "
                f"{found['speedup_vs_nova_db']:.0f}x vs nova-db"
            )
            if "ringfleet+nova" in found:
                lines.append(
                    f"ringfleet+nova{tag} placed {found['ringfleet+nova']['placements_differing']}"
                    f" of {config['requests']} requests differently from ringfleet (expected: 0)"
                )
    lines += format_goals(report["goals"], _shown)
    if postgres:
        lines += ["", "on PostgreSQL:", *format_goals(report["goals_postgresql"], _shown)]
    return "\n".join(lines)


def _no_fit_shown(result: dict[str, Any], key: str, fmt: str) -> str:
    value = result.get(key)
    return "-" if value is None else fmt.format(value)


def _shown(goal: dict[str, Any]) -> str:
    value, target = goal["value"], goal["target"]
    if value is None:
        return "n/a"
    if target.endswith("x"):
        return f"{value:.1f}x"
    if target.endswith("s") and "/s" not in target:
        return f"{value:.3f} s"
    return f"{value:,.0f}/s"


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not sizes or min(sizes) < 100:
        raise argparse.ArgumentTypeError("fleet sizes must be >= 100")
    return sizes


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command-line options."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.sched_bench",
        description="ringfleet's scheduler against a Nova-style one, on SQLite "
        "(and on PostgreSQL with --db-url).",
    )
    parser.add_argument(
        "--sizes", type=_sizes, default=[10_000, 100_000], help="fleet sizes (10000,100000)"
    )
    parser.add_argument(
        "--requests", type=_positive, default=2000, help="requests per size (default 2000)"
    )
    parser.add_argument(
        "--baseline-seconds",
        type=_seconds,
        default=8.0,
        help="time budget of each baseline run (default 8; at least 3 requests run)",
    )
    parser.add_argument(
        "--synchronous",
        choices=("normal", "full"),
        default="normal",
        help="SQLite synchronous mode in WAL (default normal; the engine's default is full)",
    )
    parser.add_argument(
        "--db-url",
        default=os.environ.get("RINGFLEET_TEST_DB_URL"),
        help="also run on this PostgreSQL server, side by side with SQLite: the benchmark "
        "creates and drops its own databases there (default: $RINGFLEET_TEST_DB_URL; "
        "'' for SQLite only)",
    )
    parser.add_argument("--seed", type=int, default=20261121, help="seed of fleet and requests")
    parser.add_argument("--json", type=Path, help="also write the report as JSON to this file")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return publish(
        "sched_bench",
        lambda: run(
            args.sizes,
            request_count=args.requests,
            baseline_seconds=args.baseline_seconds,
            synchronous=args.synchronous,
            seed=args.seed,
            db_url=args.db_url or None,
            log=log_line,
        ),
        format_report,
        args.json,
    )


if __name__ == "__main__":
    sys.exit(main())
