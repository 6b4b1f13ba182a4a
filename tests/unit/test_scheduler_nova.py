# SPDX-License-Identifier: Apache-2.0
"""Nova filters and weighers run unchanged (conductor.scheduler.nova), against real Nova code.

Nova is installed by the test environment (the ``ringfleet[nova-filters]``
extra, tools/venv.sh); these tests import its real filters.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import re
import sys
import warnings
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from nova.scheduler import filters as nova_host_filters
from nova.scheduler import weights as nova_weights
from stevedore.extension import Extension, ExtensionManager

from conductor.common.exception import ConfigurationError, InvalidInput
from conductor.common.objects import Flavor, Node
from conductor.scheduler import nova
from conductor.scheduler.decide import Chooser
from conductor.scheduler.filters import CapabilitiesFilter, TraitsFilter
from conductor.scheduler.index import NodeIndex
from conductor.scheduler.plugins import load_filters, load_weighers
from conductor.scheduler.request import RequestSpec, flavor_key
from conductor.scheduler.scheduler import Scheduler
from conductor.scheduler.weighers import SpreadWeigher, WeighingContext
from conductor.validation.capabilities import CapabilityExpression
from tests import nova_filters
from tests.dbutil import migrated
from tests.unit import test_scheduler_index
from tests.unit.test_scheduler_index import OWNERS
from tests.unit.test_scheduler_plugins import make_conf

CCF = "nova.scheduler.filters.compute_capabilities_filter.ComputeCapabilitiesFilter"
JSON_FILTER = "nova.scheduler.filters.json_filter.JsonFilter"
RACK = "tests.nova_filters.RackHintFilter"
COUNTING = "tests.nova_filters.CountingFilter"
PER_NODE = "tests.nova_filters.PerNodeCountingFilter"
BROKEN = "tests.nova_filters.BrokenStatFilter"
SCORE = "tests.nova_filters.ScoreWeigher"


def make_node(i: int, **fields: object) -> Node:
    """The index tests' node, with the properties Nova's host state reads."""
    properties = {"cpus": 8, "memory_mb": 4096, "local_gb": 100}
    return test_scheduler_index.make_node(i, **{"properties": properties, **fields})


def make_request(
    flavor: Flavor | None = None, hints: dict[str, object] | None = None
) -> RequestSpec:
    return RequestSpec.build(
        flavor or Flavor(name="f", resource_class="gold"),
        "inst-0",
        live_members=frozenset(OWNERS),
        scheduler_hints=hints,
    )


def index_of(nodes: list[Node]) -> NodeIndex:
    index = NodeIndex()
    for node in nodes:
        index.put(node)
    return index


@pytest.fixture(autouse=True)
def _reset_counters() -> None:
    nova_filters.CountingFilter.calls = []
    nova_filters.PerNodeCountingFilter.calls = []


# -- loading -----------------------------------------------------------------------------


def test_nova_filters_load_by_import_path() -> None:
    ccf, rack, per_node = load_filters([CCF, RACK, PER_NODE])
    assert isinstance(ccf, nova.NovaFilter)
    assert ccf.name == CCF
    assert type(ccf.nova_filter).__name__ == "ComputeCapabilitiesFilter"
    assert ccf.per_profile and rack.per_profile
    assert not per_node.per_profile  # the class says ringfleet_per_node = True
    (json_filter,) = load_filters([JSON_FILTER], per_node=[JSON_FILTER])
    assert not json_filter.per_profile
    (weigher,) = load_weighers([SCORE], {SCORE: "2.5"})
    assert isinstance(weigher, nova.NovaWeigher)
    assert (weigher.name, weigher.multiplier) == (SCORE, 2.5)


def test_mixed_with_ringfleet_filters_from_conf(tmp_path: Path) -> None:
    conf = make_conf(
        tmp_path,
        f"""
        enabled_filters = TraitsFilter,{CCF},{JSON_FILTER}
        per_node_filters = {JSON_FILTER}
        weighers = SpreadWeigher,{SCORE}
        weigher_multipliers = {SCORE}:3
        """,
    )
    db = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    try:
        sched = Scheduler.from_conf(db, conf)
        assert [f.name for f in sched.filters][-3:] == ["RetryFilter", CCF, JSON_FILTER]
        assert [f.per_profile for f in sched.filters][-3:] == [False, True, False]
        assert [(w.name, w.multiplier) for w in sched.weighers] == [
            ("SpreadWeigher", 1.0),
            (SCORE, 3.0),
        ]
    finally:
        db.dispose()


@pytest.mark.parametrize(
    ("loader", "name", "option", "reason"),
    [
        (load_filters, "tests.nova_filters.NotAFilter", "enabled_filters", "not a subclass of"),
        (
            load_filters,
            "os.path.join",
            "enabled_filters",
            "not a subclass of nova.scheduler.filters.BaseHostFilter",
        ),
        (load_filters, SCORE, "enabled_filters", "not a subclass of"),
        (
            load_weighers,
            RACK,
            "weighers",
            "not a subclass of nova.scheduler.weights.BaseHostWeigher",
        ),
        (load_filters, "tests.nova_filters.Missing", "enabled_filters", "has no 'Missing'"),
        (
            load_filters,
            "mycompany.filters.RackFilter",
            "enabled_filters",
            "cannot import mycompany.filters",
        ),
    ],
)
def test_bad_nova_class_is_a_configuration_error(
    loader: object, name: str, option: str, reason: str
) -> None:
    with pytest.raises(ConfigurationError) as excinfo:
        loader([name])  # type: ignore[operator]
    assert excinfo.value.group == "scheduler"
    assert excinfo.value.option == option
    assert reason in excinfo.value.reason
    assert name in str(excinfo.value)


def test_per_node_filters_must_be_enabled_nova_filters() -> None:
    with pytest.raises(ConfigurationError) as excinfo:
        load_filters([CCF], per_node=[JSON_FILTER])
    assert excinfo.value.option == "per_node_filters"
    assert JSON_FILTER in excinfo.value.reason


def test_without_nova_installed_the_error_names_the_option_and_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for module in list(sys.modules):
        if module == "nova" or module.startswith("nova."):
            monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, "nova", None)  # import nova -> ModuleNotFoundError
    with pytest.raises(ConfigurationError) as excinfo:
        load_filters(["TraitsFilter", CCF])
    assert excinfo.value.option == "enabled_filters"
    assert "ringfleet[nova-filters]" in excinfo.value.reason
    with pytest.raises(ConfigurationError) as excinfo:
        load_weighers([SCORE])
    assert excinfo.value.option == "weighers"
    assert "ringfleet[nova-filters]" in excinfo.value.reason
    # ringfleet's own filters need no Nova.
    assert [f.name for f in load_filters(["TraitsFilter", "CapabilitiesFilter"])] == [
        "TraitsFilter",
        "CapabilitiesFilter",
    ]


# -- what Nova code sees ----------------------------------------------------------------


def _documented(cls: type) -> set[str]:
    # ":ivar a:" or ":ivar a, b, c:" (attributes documented together)
    groups = re.findall(r":ivar (\w+(?:,\s+\w+)*):", cls.__doc__ or "")
    return {name for group in groups for name in re.split(r",\s+", group)}


@pytest.mark.parametrize("cls", [nova.HostState, nova.NovaFlavor, nova.NovaRequestSpec])
def test_every_attribute_is_documented(cls: type) -> None:
    assert _documented(cls) == set(cls.__slots__)  # type: ignore[attr-defined]


def test_node_and_profile_views() -> None:
    node = make_node(0, capabilities={"boot_mode": "uefi"}, traits=frozenset({"HW_A"}))
    view = nova.HostState(node, per_node=True)
    assert (view.host, view.nodename, view.uuid, view.ringfleet_name) == (
        "agent-1",
        node.uuid,
        node.uuid,
        "node-0",
    )
    # Nova's ironic driver reports no sizes, whatever the node's properties.
    assert (view.vcpus_total, view.free_ram_mb, view.free_disk_mb) == (0, 0, 0)
    assert view.stats == {"cpu_arch": None, "boot_mode": "uefi"}
    assert view.ringfleet_traits == {"HW_A"}
    assert view.service["disabled"] is False and view.hypervisor_version == 1
    profile = nova.HostState(node, per_node=False)
    assert profile.stats == view.stats and profile.ringfleet_resource_class == "gold"
    assert (profile.host, profile.nodename, profile.uuid, profile.free_ram_mb) == (
        None,
        None,
        None,
        0,
    )
    spec = nova.NovaRequestSpec(
        make_request(
            Flavor(name="f", resource_class="gold", extra_specs={"capabilities:a": "b"}),
            hints={"rack": "r1", "n": 3},
        )
    )
    assert "extra_specs" in spec.flavor
    assert spec.flavor.extra_specs == {"capabilities:a": "b"}
    assert spec.scheduler_hints == {"rack": ["r1"], "n": [3]}
    assert spec.get_scheduler_hint("rack") == "r1"
    assert spec.get_scheduler_hint("missing", "dflt") == "dflt"
    assert spec.obj_attr_is_set("flavor") and not spec.obj_attr_is_set("project_id")
    assert spec.image.properties.get("hw_architecture") is None
    clone = spec.obj_clone()
    clone.scheduler_hints["rack"] = ["r2"]
    assert spec.get_scheduler_hint("rack") == "r1"


# -- per profile, per node ------------------------------------------------------------------


def test_nova_filter_is_called_once_per_profile_and_request() -> None:
    nodes = [make_node(i, capabilities={"rack": f"r{i % 2}"}) for i in range(300)]
    index = index_of(nodes)
    chooser = Chooser(load_filters([COUNTING, RACK]), [SpreadWeigher()], random.Random(0))
    request = make_request()
    for _ in range(20):
        assert chooser.choose(index, request) is not None
    calls = nova_filters.CountingFilter.calls
    assert len(calls) == 2  # two profiles, one flavor and no hints
    assert all(state.nodename is None and state.host is None for state in calls)
    # Hints are part of the cache key: another hint is another verdict.
    for rack in ("r0", "r1"):
        hinted = make_request(hints={"rack": rack})
        for _ in range(10):
            chosen = chooser.choose(index, hinted)
            assert chosen is not None and chosen.capabilities["rack"] == rack
    assert len(calls) == 6
    assert chooser.choose(index, make_request(hints={"rack": "r9"})) is None


@pytest.mark.parametrize(
    ("good", "bad", "spec"),
    [
        # ringfleet parses both texts to boot_mode=uefi; Nova keeps the value as written.
        ({"capabilities": "boot_mode:uefi"}, {"capabilities": "boot_mode:uefi "}, "s== uefi"),
        # The same capabilities, another architecture (in Nova's stats).
        (
            {"capabilities": "boot_mode:uefi", "cpu_arch": "aarch64"},
            {"capabilities": "boot_mode:uefi", "cpu_arch": "x86_64"},
            None,
        ),
    ],
)
def test_a_cached_verdict_is_novas_for_every_node_of_its_profile(
    good: dict[str, str], bad: dict[str, str], spec: str | None
) -> None:
    """Nodes that ringfleet parses alike but Nova does not are not one profile."""
    extra_specs = {"capabilities:boot_mode": spec} if spec else {"capabilities:cpu_arch": "aarch64"}
    nodes = [
        make_node(i, capabilities={"boot_mode": "uefi"}, properties=good if i % 2 else bad)
        for i in range(40)
    ]
    index = index_of(nodes)
    chooser = Chooser(load_filters([CCF]), [SpreadWeigher()], random.Random(1))
    request = make_request(Flavor(name="f", resource_class="gold", extra_specs=extra_specs))
    for _ in range(10):
        chosen = chooser.choose(index, request)
        assert chosen is not None and chosen.properties == good
    assert dict(chooser.explain(index, request).removed)[CCF] == 20
    # Nova's own verdicts, node by node, for the record.
    (per_node,) = load_filters([CCF], per_node=[CCF])
    assert [per_node.filter(n, request) for n in nodes[:2]] == [False, True]


def test_simple_cidr_affinity_filter_is_decided_per_profile_and_owner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """host_state.host_ip is the owner's announced address (its [DEFAULT] my_ip)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        (cidr,) = load_filters(["SimpleCIDRAffinityFilter"])
    assert cidr.per_owner and not cidr.per_profile
    calls: list[tuple[str | None, str | None, str | None]] = []
    real = cidr.nova_filter.host_passes  # type: ignore[attr-defined]

    def counting(host_state: nova.HostState, spec_obj: object) -> bool:
        calls.append((host_state.host, host_state.host_ip, host_state.nodename))
        return bool(real(host_state, spec_obj))

    monkeypatch.setattr(cidr.nova_filter, "host_passes", counting)  # type: ignore[attr-defined]
    nodes = [make_node(i) for i in range(60)]  # one profile, three owners
    index = index_of(nodes)
    chooser = Chooser([cidr], [SpreadWeigher()], random.Random(2))
    ips = {"agent-1": "10.0.0.5", "agent-2": "10.1.0.5"}  # agent-3 announces none

    def near(address: str, ips: dict[str, str] = ips) -> RequestSpec:
        return RequestSpec.build(
            Flavor(name="f", resource_class="gold"),
            "inst-0",
            live_members=frozenset(OWNERS),
            scheduler_hints={"build_near_host_ip": address},
            host_ips=ips,
        )

    for _ in range(10):
        chosen = chooser.choose(index, near("10.0.0.1"))
        assert chosen is not None and chosen.owner == "agent-1"
    # Once per owner (agent-3's fails: no address), not per node or per decision.
    assert sorted(calls) == [
        ("agent-1", "10.0.0.5", None),
        ("agent-2", "10.1.0.5", None),
        ("agent-3", None, None),
    ]
    assert dict(chooser.explain(index, near("10.0.0.1")).removed)[cidr.name] == 40
    # An agent's new address is another verdict.
    moved = {**ips, "agent-2": "10.0.0.6"}
    owners = {chooser.choose(index, near("10.0.0.1", moved)).owner for _ in range(30)}  # type: ignore[union-attr]
    assert owners == {"agent-1", "agent-2"}
    assert chooser.choose(index, near("192.0.2.1")) is None


def test_hints_are_in_the_cache_key_only_when_a_cached_filter_reads_them(
    tmp_path: Path,
) -> None:
    db = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    flavor = Flavor(name="f", resource_class="gold")
    try:
        keys = {}
        for config in (["TraitsFilter", "CapabilitiesFilter"], ["TraitsFilter", RACK]):
            sched = Scheduler(db, filters=load_filters(config))
            keys[config[-1]] = [
                sched._request(flavor, "i", OWNERS, None, (), scheduler_hints=hints).flavor_key
                for hints in ({"rack": "r1"}, {"rack": "r2"}, None)
            ]
    finally:
        db.dispose()
    ours = keys["CapabilitiesFilter"]
    assert ours[0] == ours[1] == ours[2]  # no filter reads hints: one cache entry
    theirs = keys[RACK]
    assert len(set(theirs)) == 3
    assert theirs[2] == ours[2]  # without hints, the flavor's key as before


def test_project_and_image_reach_nova_filters_and_split_their_cache(tmp_path: Path) -> None:
    db = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    flavor = Flavor(name="f", resource_class="gold")
    image = {"source": "https://img.example/a.raw", "checksum": "0" * 32, "disk_format": "raw"}
    try:
        sched = Scheduler(db, filters=load_filters(["tests.nova_filters.ProjectStatFilter"]))
        requests = [
            sched._request(
                flavor, "i", OWNERS, None, (), scheduler_hints=None, project_id=p, image=i
            )
            for p, i in (("a", None), ("b", None), ("a", image), (None, None))
        ]
    finally:
        db.dispose()
    assert len({r.flavor_key for r in requests}) == 4
    assert requests[3].flavor_key == flavor_key(flavor)  # no context: as before
    spec = nova.NovaRequestSpec(requests[2])
    assert spec.project_id == "a"
    assert spec.image.disk_format == "raw"
    assert not spec.image.obj_attr_is_set("checksum")  # not in the cache key: not shown
    other = {**image, "checksum": "1" * 32}
    assert (
        requests[2].flavor_key
        == sched._request(
            flavor, "i", OWNERS, None, (), scheduler_hints=None, project_id="a", image=other
        ).flavor_key
    )
    # The project steers a per-profile Nova filter, each project with its verdict.
    index = index_of([make_node(i, capabilities={"project": "ab"[i % 2]}) for i in range(6)])
    chooser = Chooser(load_filters(["tests.nova_filters.ProjectStatFilter"]), [])
    for request, wanted in ((requests[0], "a"), (requests[1], "b")):
        for _ in range(5):
            chosen = chooser.choose(index, request)
            assert chosen is not None and chosen.capabilities["project"] == wanted


def test_per_node_nova_filter_sees_nodes_and_decides_per_node() -> None:
    nodes = [make_node(i) for i in range(40)]
    index = index_of(nodes)
    chooser = Chooser(load_filters([PER_NODE]), [SpreadWeigher()], random.Random(1))
    for _ in range(30):
        chosen = chooser.choose(index, make_request())
        assert chosen is not None and int(chosen.uuid[-1], 16) % 2 == 0
    calls = nova_filters.PerNodeCountingFilter.calls
    assert calls and all(state.nodename is not None for state in calls)
    assert {state.host for state in calls} <= set(OWNERS)


def test_no_valid_node_names_the_nova_filter() -> None:
    nodes = [make_node(i, capabilities={"rack": "r1"}) for i in range(10)]
    nodes += [make_node(10 + i, resource_class="silver") for i in range(5)]
    index = index_of(nodes)
    chooser = Chooser(load_filters(["TraitsFilter", RACK]), [SpreadWeigher()])
    request = make_request(hints={"rack": "r2"})
    assert chooser.choose(index, request) is None
    error = chooser.explain(index, request)
    assert dict(error.removed)[RACK] == 10
    assert f"{RACK} removed 10" in str(error)
    assert "ResourceClassFilter removed 5" in str(error)


def test_explain_calls_a_per_profile_nova_filter_once_per_profile() -> None:
    nodes = [make_node(i, capabilities={"rack": f"r{i % 3}"}) for i in range(600)]
    nodes += [make_node(600 + i, instance_uuid=f"i-{i}") for i in range(50)]  # not free
    index = index_of(nodes)
    chooser = Chooser(load_filters([COUNTING, RACK]), [SpreadWeigher()])
    request = make_request(hints={"rack": "r7"})
    error = chooser.explain(index, request)
    assert dict(error.removed)[RACK] == 600
    assert dict(error.removed)["AvailabilityFilter"] == 50
    assert len(nova_filters.CountingFilter.calls) == 3  # 3 profiles, not 600 nodes


# -- failures -------------------------------------------------------------------------------


def test_a_raising_filter_fails_only_its_nodes_and_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    nodes = [make_node(i, capabilities={"broken": "yes" if i < 20 else "no"}) for i in range(30)]
    nodes += [make_node(30 + i, capabilities={"broken": "yes", "x": str(i)}) for i in range(5)]
    index = index_of(nodes)
    (broken,) = filters = load_filters([BROKEN])
    chooser = Chooser(filters, [SpreadWeigher()], random.Random(2))
    caplog.set_level(logging.DEBUG, logger="conductor.scheduler.nova")
    for _ in range(20):
        chosen = chooser.choose(index, make_request())
        assert chosen is not None and chosen.capabilities["broken"] == "no"
    error = chooser.explain(index, make_request(Flavor(name="g", resource_class="gold")))
    assert dict(error.removed)[BROKEN] == 25
    assert isinstance(broken, nova.NovaFilter)
    assert broken.failures.count >= 6  # 6 failing profiles
    logged = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(logged) == 1
    assert BROKEN in logged[0].getMessage()
    assert "ValueError: cannot parse this host's stats" in logged[0].getMessage()
    assert logged[0].exc_info is not None


def test_nova_json_filter_with_a_bad_query_fails_nodes_without_killing_scheduling(
    caplog: pytest.LogCaptureFixture,
) -> None:
    nodes = [make_node(i) for i in range(8)]
    index = index_of(nodes)
    chooser = Chooser(load_filters([JSON_FILTER], per_node=[JSON_FILTER]), [SpreadWeigher()])
    wanted = {nodes[6].uuid, nodes[7].uuid}
    good = make_request(
        hints={"query": f'["in", "$nodename", "{nodes[6].uuid}", "{nodes[7].uuid}"]'}
    )
    for _ in range(10):
        chosen = chooser.choose(index, good)
        assert chosen is not None and chosen.uuid in wanted
    bad = make_request(hints={"query": '["~", "$free_ram_mb", 1]'})  # unknown operator
    assert chooser.choose(index, bad) is None
    assert dict(chooser.explain(index, bad).removed)[JSON_FILTER] == 8
    logged = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(logged) == 1 and "KeyError" in logged[0].getMessage()
    # Scheduling goes on.
    assert chooser.choose(index, good) is not None


def test_nova_weigher_ranks_nodes_and_a_raising_one_weighs_zero() -> None:
    nodes = [make_node(i, capabilities={"score": str(i)}) for i in range(12)]
    index = index_of(nodes)
    chooser = Chooser([], load_weighers([SCORE]), random.Random(3))
    assert chooser.choose(index, make_request()) == nodes[-1]
    (weigher,) = load_weighers([SCORE])
    bad = make_node(99, capabilities={"score": "high"})
    context = WeighingContext({})
    assert weigher.weigh(bad, make_request(), context) == 0.0
    assert weigher.weigh(nodes[5], make_request(), context) == 5.0


def test_novas_in_tree_weighers_are_left_out_of_decisions(monkeypatch: pytest.MonkeyPatch) -> None:
    """They weigh every free node alike (test_nova_differential): 0 once normalized;
    but for BuildFailureWeigher, which weighs nodes by their failed builds."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        everyone = load_weighers([nova.ALL_WEIGHERS])
    (failures,) = [w for w in everyone if w.name.endswith(".BuildFailureWeigher")]
    assert failures.per_owner and failures.reads_failed_builds and not failures.per_request
    weighers = [w for w in everyone if w is not failures]
    assert all(w.per_request and w.per_owner and not w.reads_failed_builds for w in weighers)
    calls: list[str] = []
    for weigher in weighers:
        monkeypatch.setattr(
            weigher.nova_weigher, "_weigh_object", lambda *args: calls.append("x") or 1.0
        )
    nodes = [make_node(i) for i in range(30)]
    with_novas = Chooser([], [*weighers, SpreadWeigher()], random.Random(5))
    without = Chooser([], [SpreadWeigher()], random.Random(5))
    index_a, index_b = index_of(nodes), index_of(nodes)
    for i in range(10):
        request = make_request()
        chosen = with_novas.choose(index_a, request)
        assert chosen is not None and chosen == without.choose(index_b, request)
        for index in (index_a, index_b):
            index.put(dataclasses.replace(chosen, instance_uuid=f"i-{i}"))
    assert calls == []


# -- differential: Nova's ComputeCapabilitiesFilter vs ringfleet's CapabilitiesFilter --------

KEYS = ("boot_mode", "cpu_arch", "disk_label", "gen", "memory", "profile")
WORDS = ("bios", "uefi", "x86_64", "arm64", "gpu", "big", "a", "ab", "abc")
NUMBERS = ("0", "1", "2", "2.5", "10", "64", "-3", "1e3", "128")
VALUES = st.sampled_from(WORDS + NUMBERS)
TEXT_OPS = ("<in>", "<all-in>", "<or>")


@st.composite
def expressions(draw: st.DrawFn) -> CapabilityExpression:
    """Well-formed expressions: every operator of the ComputeCapabilitiesFilter language."""
    op = draw(
        st.sampled_from(
            [None, "=", "==", "!=", ">=", "<=", "s==", "s!=", "s>=", "s<=", "s>", "s<", *TEXT_OPS]
        )
    )
    if op is None:
        return CapabilityExpression(None, (draw(VALUES),))
    if op in ("=", "==", "!=", ">=", "<="):
        return CapabilityExpression(op, (draw(st.sampled_from(NUMBERS)),))
    if op == "<all-in>":
        return CapabilityExpression(op, tuple(draw(st.lists(VALUES, min_size=1, max_size=3))))
    if op == "<or>":
        return CapabilityExpression(op, tuple(draw(st.lists(VALUES, min_size=2, max_size=4))))
    return CapabilityExpression(op, (draw(VALUES),))


_BIOS = CapabilityExpression(None, ("bios",))


@settings(max_examples=400, deadline=None)
@given(
    capabilities=st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=4),
    requirements=st.dictionaries(st.sampled_from(KEYS), expressions(), max_size=3),
    # Unscoped keys (Nova: checked on hosts having them); cpu_arch is a
    # documented difference (Nova's stats always hold it).
    unscoped=st.dictionaries(st.sampled_from(KEYS[:1] + KEYS[2:]), expressions(), max_size=2),
)
@example(
    capabilities={"memory": "big"},
    requirements={"memory": CapabilityExpression(">=", ("2",))},
    unscoped={},
)
@example(capabilities={}, requirements={"gen": CapabilityExpression("s!=", ("a",))}, unscoped={})
@example(
    capabilities={"boot_mode": "uefi"},
    requirements={},
    unscoped={"boot_mode": CapabilityExpression(None, ("bios",)), "gen": _BIOS},
)
def test_nova_and_ringfleet_capabilities_filters_agree(
    capabilities: dict[str, str],
    requirements: dict[str, CapabilityExpression],
    unscoped: dict[str, CapabilityExpression],
) -> None:
    """Same verdict on every well-formed flavor (what ringfleet's validation accepts).

    Nova raises ValueError where a numeric operator meets a non-numeric node
    value; through the adapter that fails the node, as ringfleet's filter does.
    """
    flavor = Flavor(
        name="f",
        resource_class="gold",
        extra_specs={
            **{f"capabilities:{key}": str(expr) for key, expr in requirements.items()},
            **{key: str(expr) for key, expr in unscoped.items()},
        },
    )
    request = make_request(flavor)
    node = make_node(0, capabilities=capabilities)
    ours = CapabilitiesFilter().filter(node, request)
    (theirs,) = _CCF
    assert theirs.filter(node, request) is ours
    # Also through the per-node view (the profile view is what the scheduler uses).
    assert nova.HostState(node, per_node=True).stats == {"cpu_arch": None, **capabilities}


_CCF = load_filters([CCF])


@pytest.mark.parametrize(
    ("capabilities", "extra_specs", "ours", "novas"),
    [
        # Unscoped keys named like an attribute or a stat Nova's host state
        # always has: Nova checks them on every node; ringfleet's filter only
        # on nodes with a capability of that name.
        ({}, {"cpu_arch": "x86_64"}, True, False),
        ({"boot_mode": "uefi"}, {"hypervisor_type": "kvm"}, True, False),
        # A capability named like a HostState attribute Nova's host state
        # has: Nova reads the attribute (here "ironic"), ringfleet the capability.
        ({"hypervisor_type": "kvm"}, {"capabilities:hypervisor_type": "s== kvm"}, True, False),
    ],
)
def test_documented_differences(
    capabilities: dict[str, str], extra_specs: dict[str, str], ours: bool, novas: bool
) -> None:
    flavor = Flavor(name="f", resource_class="gold", extra_specs=extra_specs)
    node = make_node(0, capabilities=capabilities)
    request = make_request(flavor)
    assert CapabilitiesFilter().filter(node, request) is ours
    assert _CCF[0].filter(node, request) is novas


def test_malformed_expressions_nova_accepts_are_refused_by_ringfleet() -> None:
    """``<in> a zzz``: Nova silently reads only ``a``; ringfleet refuses the flavor."""
    flavor = Flavor(name="f", resource_class="gold", extra_specs={"capabilities:gen": "<in> a zzz"})
    with pytest.raises(InvalidInput) as excinfo:
        make_request(flavor)
    assert "extra_specs.capabilities:gen" in str(excinfo.value)
    nova_request = RequestSpec(
        flavor=flavor, instance_uuid="i", live_members=frozenset(OWNERS), flavor_key="k"
    )
    assert _CCF[0].filter(make_node(0, capabilities={"gen": "abc"}), nova_request) is True


def test_traits_filter_still_applies_beside_nova_filters() -> None:
    index = index_of(
        [make_node(i, traits=frozenset({"HW_A"}) if i % 2 else frozenset()) for i in range(10)]
    )
    chooser = Chooser([TraitsFilter(), *_CCF], [SpreadWeigher()])
    flavor = Flavor(name="f", resource_class="gold", required_traits=frozenset({"HW_A"}))
    for _ in range(10):
        chosen = chooser.choose(index, make_request(flavor))
        assert chosen is not None and "HW_A" in chosen.traits


# -- names as nova.conf writes them -----------------------------------------------------

NOVA_DEFAULT_FILTERS = [
    "ComputeFilter",
    "ComputeCapabilitiesFilter",
    "ImagePropertiesFilter",
    "ServerGroupAntiAffinityFilter",
    "ServerGroupAffinityFilter",
]


def test_novas_default_filters_pasted_from_nova_conf_load_as_novas_classes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    filters = load_filters(NOVA_DEFAULT_FILTERS)
    assert [type(f).nova_class.__name__ for f in filters] == NOVA_DEFAULT_FILTERS  # type: ignore[attr-defined]
    assert filters[0].name == "nova.scheduler.filters.compute_filter.ComputeFilter"
    # Server-group filters cannot act without Nova's services: one line each.
    lines = [
        r.getMessage() for r in caplog.records if "needs Nova's own services" in r.getMessage()
    ]
    assert len(lines) == 2 and all("ServerGroup" in line for line in lines)
    # ... and pass every node; ComputeFilter and ImagePropertiesFilter pass live nodes.
    nodes = [make_node(i, properties={"cpu_arch": "x86_64"}) for i in range(6)]
    chooser = Chooser(filters, [SpreadWeigher()])
    assert chooser.choose(index_of(nodes), make_request()) is not None


def test_all_filters_and_all_weighers_stand_for_every_in_tree_class() -> None:
    with warnings.catch_warnings():
        # Importing every Nova filter imports Nova's policies, which warn on import.
        warnings.simplefilter("ignore", DeprecationWarning)
        filters = load_filters([nova.ALL_FILTERS])
    assert {type(f).nova_class for f in filters} == set(nova_host_filters.all_filters())  # type: ignore[attr-defined]
    weighers = load_weighers([nova.ALL_WEIGHERS], {"IoOpsWeigher": 2.0})
    assert {type(w).nova_class for w in weighers} == set(nova_weights.all_weighers())  # type: ignore[attr-defined]
    by_name = {w.name.rpartition(".")[2]: w.multiplier for w in weighers}
    # Nova's default multipliers, unless configured (by class name or path).
    assert by_name["IoOpsWeigher"] == 2.0
    assert by_name["BuildFailureWeigher"] == -1000000.0  # Nova negates its option
    assert by_name["RAMWeigher"] == 1.0


def test_ringfleet_names_keep_priority_and_a_clash_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    manager = ExtensionManager.make_test_instance(
        [Extension("ComputeFilter", None, TraitsFilter, None)]
    )
    (loaded,) = load_filters(["ComputeFilter"], manager=manager)
    assert isinstance(loaded, TraitsFilter)
    clashes = [r.getMessage() for r in caplog.records if "not Nova's" in r.getMessage()]
    assert clashes == [
        "[scheduler] enabled_filters: ComputeFilter is ringfleet's filter, not Nova's "
        "nova.scheduler.filters.compute_filter.ComputeFilter (give Nova's by its import path)"
    ]


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("nova.scheduler.filter.compute_filter.ComputeFilter", "no module nova.scheduler.filter"),
        ("nova.scheduler.filters.compute_filter.ComputFilter", "did you mean Nova's ComputeFilter"),
        ("nova.scheduler.filters.ComputeFilter", "Nova's ComputeFilter is nova.scheduler.filters"),
    ],
)
def test_a_misspelled_nova_path_names_the_option_and_the_name(name: str, says: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        load_filters([name])
    message = str(info.value)
    assert "enabled_filters" in message and name in message and says in message
    assert "install the extra" not in message


def test_a_bare_name_nova_does_not_know_is_unknown() -> None:
    with pytest.raises(ConfigurationError) as info:
        load_filters(["ComputeFiltr"])
    message = str(info.value)
    assert "enabled_filters" in message and "'ComputeFiltr'" in message


def test_nova_weighers_of_a_decision_share_one_host_state_per_node() -> None:
    nova_filters.RecordingWeigher.seen = []
    path = "tests.nova_filters.RecordingWeigher"
    with warnings.catch_warnings():
        # Nova's weighers import its policies, which warn on import.
        warnings.simplefilter("ignore", DeprecationWarning)
        weighers = load_weighers([path, "nova.scheduler.weights.ram.RAMWeigher"])
    nodes = [make_node(i) for i in range(3)]
    request = make_request()
    for weigher in weighers:
        for node in nodes:
            weigher.weigh(node, request, WeighingContext({}))
    weighers[0].weigh(nodes[0], request, WeighingContext({}))
    seen = nova_filters.RecordingWeigher.seen
    assert [state.nodename for state in seen] == [n.uuid for n in nodes] + [nodes[0].uuid]
    assert seen[3] is seen[0]  # the same node object: the same host state
    # A node's change (a new object in the index) gets a new host state.
    changed = make_node(0, properties={"cpu_arch": "aarch64"})
    weighers[0].weigh(changed, request, WeighingContext({}))
    assert seen[-1] is not seen[0]
    assert seen[-1].supported_instances == [["aarch64", "baremetal", "hvm"]]


def test_aggregate_extra_specs_filter_does_what_its_start_line_says(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    (aggregate,) = load_filters(["AggregateInstanceExtraSpecsFilter"])
    (line,) = [
        r.getMessage() for r in caplog.records if "needs Nova's own services" in r.getMessage()
    ]
    assert "removes every node for a flavor with an unscoped or" in line
    node = make_node(0, capabilities={"boot_mode": "uefi"})

    def passes(extra_specs: dict[str, str]) -> bool:
        flavor = Flavor(name="f", resource_class="gold", extra_specs=extra_specs)
        return aggregate.filter(node, make_request(flavor))

    assert passes({})
    assert passes({"capabilities:boot_mode": "uefi", "mycompany:racks": "r1"})
    assert not passes({"boot_mode": "uefi"})  # unscoped: no aggregate has the key
    assert not passes({"aggregate_instance_extra_specs:ssd": "true"})
