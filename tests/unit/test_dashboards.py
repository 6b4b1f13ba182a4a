# SPDX-License-Identifier: Apache-2.0
"""etc/grafana/ringfleet.json and etc/prometheus/ringfleet-rules.yml ask only
for series the services export.

The exported names come from the services' own registries (a conductor's and
an agent's metrics objects, as the services build them), never from a list
kept here; the names queried come from every PromQL expression of the
dashboard and the rules.  ``promtool check rules`` and ``promtool test rules``
(tools/run-tests.sh) check the rules' syntax and behaviour.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from compute_agent.metrics import AgentMetrics
from conductor.metrics import ConductorMetrics

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "etc" / "grafana" / "ringfleet.json"
RULES = REPO / "etc" / "prometheus" / "ringfleet-rules.yml"

#: Series Prometheus makes itself for every target.
PROMETHEUS_SERIES = frozenset({"up"})

_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "gauge": ("",),
}
_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
     "unless", "offset", "inf", "nan"}
)  # fmt: skip
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_LABEL_LIST = re.compile(
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE
)
_IDENT = re.compile(r"(?<![\w:.])([A-Za-z_:][\w:]*+)(?!\s*\()")


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression selects (not functions, label
    names, keywords, numbers or durations)."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _LABEL_LIST.sub(" ", text)
    return {n for n in _IDENT.findall(text) if n.lower() not in _KEYWORDS}


def exported_names() -> set[str]:
    """Every series name a conductor or an agent serves on /metrics."""
    conductor = ConductorMetrics("c")
    conductor.watch_fleet(lambda: {"orphaned": 0}, lambda: True)  # the scrape-time ones
    names: set[str] = set()
    for metrics in (conductor, AgentMetrics("a")):
        for family in metrics.registry.collect():
            names.update(family.name + suffix for suffix in _SUFFIXES[family.type])
    return names


def _rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def _dashboard_exprs() -> Iterator[tuple[str, str]]:
    def walk(panels: list[dict[str, Any]]) -> Iterator[tuple[str, str]]:
        for panel in panels:
            for target in panel.get("targets", []):
                yield panel["title"], target["expr"]
            yield from walk(panel.get("panels", []))

    yield from walk(json.loads(DASHBOARD.read_text())["panels"])


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            'histogram_quantile(0.99, sum by (job, le) (rate(a_bucket{job=~"x|y"}[5m])))',
            {"a_bucket"},
        ),
        (
            'x:y:rate5m{outcome="error"} / ignoring(outcome) sum without (outcome) (x:y)',
            {"x:y:rate5m", "x:y"},
        ),
        ('count(up{job="a"} == 0) or vector(0)', {"up"}),
        ("max by (kind) (m) > 0 and on (host) n offset 5m", {"m", "n"}),
    ],
)
def test_names_are_read_from_promql(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_exported_names_come_from_the_registries() -> None:
    names = exported_names()
    # A few of each kind, to show the expansion works (not a list to keep).
    assert {
        "ringfleet_conductor_builds_total",
        "ringfleet_rpc_server_duration_seconds_bucket",
        "ringfleet_agent_nodes_owned",
        "ringfleet_fleet_problems",
    } <= names
    assert "ringfleet_conductor_builds" not in names  # a counter's family name is no series


def test_rules_query_only_exported_series() -> None:
    exported = exported_names()
    recorded = {rule["record"] for rule in _rules() if "record" in rule}
    assert recorded, "no recording rule"
    unknown = {
        f"{rule.get('record') or rule.get('alert')}: {name}"
        for rule in _rules()
        for name in metric_names(rule["expr"])
        if name not in exported | recorded | PROMETHEUS_SERIES
    }
    assert not unknown, sorted(unknown)


def test_dashboard_queries_only_exported_or_recorded_series() -> None:
    exported = exported_names()
    recorded = {rule["record"] for rule in _rules() if "record" in rule}
    exprs = list(_dashboard_exprs())
    assert len(exprs) > 10
    unknown = {
        f"{title}: {name}"
        for title, expr in exprs
        for name in metric_names(expr)
        if name not in exported | recorded | PROMETHEUS_SERIES
    }
    assert not unknown, sorted(unknown)


def test_the_alerts_docs_metrics_lists_are_the_rules_alerts() -> None:
    text = (REPO / "docs" / "metrics.rst").read_text()
    section = text[text.index("Dashboard and alerts") : text.index("Structured (JSON) logs")]
    documented = set(re.findall(r"``(Ringfleet\w+)``", section))
    alerts = {rule["alert"] for rule in _rules() if "alert" in rule}
    assert documented == alerts
