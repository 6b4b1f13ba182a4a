# SPDX-License-Identifier: Apache-2.0
"""Reading a service's Prometheus endpoint in tests."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    """Every sample of the endpoint on 127.0.0.1: (name, labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(port: int, name: str, **labels: str) -> float | None:
    """One sample's value, None when the endpoint does not export it."""
    return scrape(port).get((name, frozenset(labels.items())))
