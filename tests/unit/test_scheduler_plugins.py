# SPDX-License-Identifier: Apache-2.0
"""Loading filters and weighers: ringfleet's own, stevedore entry points, errors, config."""

from __future__ import annotations

import sys
import textwrap
import uuid as uuidlib
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from oslo_config import cfg
from stevedore import _cache
from stevedore.extension import Extension, ExtensionManager

from conductor.common.conf import scheduler as scheduler_conf
from conductor.common.exception import ConfigurationError
from conductor.common.objects import Flavor, Node
from conductor.db.engine import Database
from conductor.db.models import InstanceModel
from conductor.scheduler import BaseFilter, RequestSpec
from conductor.scheduler.filters import CapabilitiesFilter, TraitsFilter
from conductor.scheduler.plugins import (
    FILTER_NAMESPACE,
    WEIGHER_NAMESPACE,
    load_filters,
    load_weighers,
)
from conductor.scheduler.scheduler import Scheduler
from conductor.scheduler.weighers import SpreadWeigher
from tests.dbutil import add_nodes, migrated

PLUGIN_MODULE = "ringfleet_test_scheduler_plugins"


class EvenNameFilter(BaseFilter):
    """Only nodes whose number is even (``add_nodes`` names them node-<i>-<uuid8>)."""

    def filter(self, node: Node, request: RequestSpec) -> bool:
        return int(node.name.split("-")[1]) % 2 == 0


class NotAFilter:
    pass


class BrokenFilter(BaseFilter):
    def __init__(self) -> None:
        raise RuntimeError("no licence")


def fake_manager(namespace: str, **plugins: object) -> ExtensionManager[object]:
    extensions = [
        Extension(name, EntryPoint(name, f"tests:{name}", namespace), plugin, None)  # type: ignore[arg-type]
        for name, plugin in plugins.items()
    ]
    return ExtensionManager.make_test_instance(extensions, namespace=namespace)


# -- ringfleet's own, through its entry points ------------------------------------------------


def test_ringfleets_own_load_by_name() -> None:
    filters = load_filters(["CapabilitiesFilter", "TraitsFilter"])
    assert [type(f) for f in filters] == [CapabilitiesFilter, TraitsFilter]
    (weigher,) = load_weighers(["SpreadWeigher"], {"SpreadWeigher": "2.5"})
    assert isinstance(weigher, SpreadWeigher)
    assert weigher.multiplier == 2.5
    assert load_filters([]) == []
    assert load_weighers([]) == []


# -- through a stevedore manager ------------------------------------------------------------


def test_custom_filter_from_a_test_manager_is_applied(tmp_path: Path) -> None:
    manager = fake_manager(
        FILTER_NAMESPACE, TraitsFilter=TraitsFilter, EvenNameFilter=EvenNameFilter
    )
    filters = load_filters(["TraitsFilter", "EvenNameFilter"], manager=manager)
    assert [f.name for f in filters] == ["TraitsFilter", "EvenNameFilter"]

    db = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    try:
        add_nodes(db, 10, owner="agent-1", resource_class="gold")
        sched = Scheduler(db, filters=filters)
        assert [f.name for f in sched.filters][-2:] == ["RetryFilter", "EvenNameFilter"]
        chosen = []
        for _ in range(5):
            instance = str(uuidlib.uuid4())
            with db.transaction() as session:
                session.add(
                    InstanceModel(uuid=instance, name="vm", flavor="f", vm_state="building")
                )
            node, _ = sched.select_and_allocate(
                Flavor(name="f", resource_class="gold"), instance, live_members={"agent-1"}
            )
            chosen.append(node.name)
        assert sorted(int(name.split("-")[1]) for name in chosen) == [0, 2, 4, 6, 8]
    finally:
        db.dispose()


def test_names_are_looked_up_only_among_entry_points() -> None:
    # No second list of ringfleet's own: a manager without TraitsFilter does not know it.
    manager = fake_manager(FILTER_NAMESPACE, EvenNameFilter=EvenNameFilter)
    with pytest.raises(ConfigurationError) as excinfo:
        load_filters(["TraitsFilter"], manager=manager)
    assert "unknown filter 'TraitsFilter'" in excinfo.value.reason
    assert excinfo.value.reason.endswith("known: EvenNameFilter)")


def test_a_filter_registered_twice_is_refused() -> None:
    extensions = [
        Extension(
            "RackFilter",
            EntryPoint("RackFilter", f"pkg{i}:Rack", FILTER_NAMESPACE),
            EvenNameFilter,
            None,
        )  # type: ignore[arg-type]
        for i in (1, 2)
    ]
    manager = ExtensionManager.make_test_instance(extensions, namespace=FILTER_NAMESPACE)
    with pytest.raises(ConfigurationError) as excinfo:
        load_filters(["RackFilter"], manager=manager)
    assert excinfo.value.option == "enabled_filters"
    assert "filter RackFilter is registered more than once (pkg1:Rack, pkg2:Rack)" in (
        excinfo.value.reason
    )


@pytest.mark.parametrize(
    ("names", "plugins", "message"),
    [
        (["NoSuchFilter"], {}, "unknown filter 'NoSuchFilter'"),
        (["ResourceClassFilter"], {}, "ResourceClassFilter is always applied"),
        (["LiveOwnerFilter"], {}, "LiveOwnerFilter is always applied"),
        (["TraitsFilter", "TraitsFilter"], {}, "listed twice: TraitsFilter"),
        (["NotAFilter"], {"NotAFilter": NotAFilter}, "not a subclass of"),
        (["Weigher"], {"Weigher": SpreadWeigher}, "not a subclass of"),
        (["BrokenFilter"], {"BrokenFilter": BrokenFilter}, "failed to start: RuntimeError"),
    ],
)
def test_bad_filter_configuration_is_refused(
    names: list[str], plugins: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigurationError) as excinfo:
        load_filters(names, manager=fake_manager(FILTER_NAMESPACE, **plugins))
    assert (excinfo.value.group, excinfo.value.option) == ("scheduler", "enabled_filters")
    assert message in excinfo.value.reason


@pytest.mark.parametrize(
    ("names", "multipliers", "option", "message"),
    [
        (["Nope"], {}, "weighers", "unknown weigher 'Nope'"),
        (["SpreadWeigher"], {"Other": "1"}, "weigher_multipliers", "not a configured weigher"),
        (["SpreadWeigher"], {"SpreadWeigher": "lots"}, "weigher_multipliers", "finite"),
        (["SpreadWeigher"], {"SpreadWeigher": "inf"}, "weigher_multipliers", "finite"),
        (["TraitsFilter"], {}, "weighers", "unknown weigher 'TraitsFilter'"),
    ],
)
def test_bad_weigher_configuration_is_refused(
    names: list[str], multipliers: dict[str, str], option: str, message: str
) -> None:
    manager = fake_manager(WEIGHER_NAMESPACE, SpreadWeigher=SpreadWeigher)
    with pytest.raises(ConfigurationError) as excinfo:
        load_weighers(names, multipliers, manager=manager)
    assert excinfo.value.option == option
    assert message in excinfo.value.reason


# -- real entry points, installed as a distribution on sys.path --------------------------------


@pytest.fixture
def installed_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A distribution registering a filter and a weigher, found by importlib.metadata."""
    site = tmp_path / "site"
    site.mkdir()
    (site / f"{PLUGIN_MODULE}.py").write_text(
        textwrap.dedent(
            """
            from conductor.scheduler import BaseFilter, BaseWeigher


            class RackFilter(BaseFilter):
                per_profile = True

                def filter(self, node, request):
                    return node.group == "rack-1"


            class PreferAgentTwo(BaseWeigher):
                per_owner = True

                def weigh(self, node, request, context):
                    return 1.0 if node.owner == "agent-2" else 0.0
            """
        )
    )
    dist = site / f"{PLUGIN_MODULE}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PLUGIN_MODULE}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        f"[{FILTER_NAMESPACE}]\n"
        f"RackFilter = {PLUGIN_MODULE}:RackFilter\n"
        f"MissingFilter = {PLUGIN_MODULE}_missing:Nothing\n"
        f"[{WEIGHER_NAMESPACE}]\n"
        f"PreferAgentTwo = {PLUGIN_MODULE}:PreferAgentTwo\n"
    )
    # Keep stevedore's entry-point cache out of the home directory.
    cache = _cache.Cache(cache_dir=str(tmp_path / "cache"))
    monkeypatch.setattr(_cache, "get_group_all", cache.get_group_all)
    monkeypatch.setattr(_cache, "get_group_named", cache.get_group_named)
    monkeypatch.setattr(ExtensionManager, "ENTRY_POINT_CACHE", {})  # per-process memo
    monkeypatch.syspath_prepend(str(site))
    yield site
    sys.modules.pop(PLUGIN_MODULE, None)


def make_conf(tmp_path: Path, text: str = "") -> cfg.ConfigOpts:
    # A config file, not set_override: oslo.config shares a module-level
    # OptGroup's overrides between ConfigOpts instances.
    path = tmp_path / "ringfleet.conf"
    path.write_text("[scheduler]\n" + textwrap.dedent(text))
    conf = cfg.ConfigOpts()
    scheduler_conf.OPTIONS.register(conf)
    conf(["--config-file", str(path)], project="ringfleet", default_config_files=[])
    return conf


def test_plugins_load_through_installed_entry_points(
    installed_plugins: Path, tmp_path: Path
) -> None:
    (rack,) = load_filters(["RackFilter"])
    assert rack.name == "RackFilter"
    assert type(rack).__module__ == PLUGIN_MODULE

    conf = make_conf(
        tmp_path,
        """
        enabled_filters = TraitsFilter,RackFilter
        weighers = PreferAgentTwo,SpreadWeigher
        weigher_multipliers = PreferAgentTwo:10
        """,
    )
    db = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    try:
        sched = Scheduler.from_conf(db, conf)
        assert [f.name for f in sched.filters][-2:] == ["RetryFilter", "RackFilter"]
        assert [(w.name, w.multiplier) for w in sched.weighers] == [
            ("PreferAgentTwo", 10.0),
            ("SpreadWeigher", 1.0),
        ]
    finally:
        db.dispose()


def test_an_entry_point_that_fails_to_import_is_a_configuration_error(
    installed_plugins: Path,
) -> None:
    with pytest.raises(ConfigurationError) as excinfo:
        load_filters(["MissingFilter"])
    assert excinfo.value.option == "enabled_filters"
    assert "cannot load filter MissingFilter" in excinfo.value.reason
    assert "ModuleNotFoundError" in excinfo.value.reason


# -- configuration ---------------------------------------------------------------------------


def test_from_conf_defaults(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    try:
        sched = Scheduler.from_conf(db, make_conf(tmp_path))
        assert [f.name for f in sched.filters] == [
            "ResourceClassFilter",
            "GroupFilter",
            "AvailabilityFilter",
            "TraitsFilter",
            "LiveOwnerFilter",
            "RetryFilter",
            "CapabilitiesFilter",
        ]
        assert [(w.name, w.multiplier) for w in sched.weighers] == [
            ("FailedBuildsWeigher", 1000000.0),
            ("SpreadWeigher", 1.0),
        ]
    finally:
        db.dispose()


def test_options_are_documented() -> None:
    names = [opt.dest for opt in scheduler_conf.opts]
    assert names == [
        "enabled_filters",
        "per_node_filters",
        "weighers",
        "weigher_multipliers",
        "index_refresh_interval",
        "index_refresh_overlap",
        "index_resync_interval",
    ]
    for opt in scheduler_conf.opts:
        assert opt.help and len(opt.help) > 40
