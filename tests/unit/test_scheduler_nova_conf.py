# SPDX-License-Identifier: Apache-2.0
"""nova.conf's ``[filter_scheduler]``, pasted as written: read, or refused at start."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from oslo_config import cfg

from conductor.common.conf import scheduler as scheduler_conf
from conductor.common.exception import ConfigurationError
from conductor.db.engine import Database
from conductor.scheduler.scheduler import Scheduler


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    yield database
    database.dispose()


def conf_of(tmp_path: Path, text: str) -> cfg.ConfigOpts:
    path = tmp_path / "ringfleet.conf"
    path.write_text(text)
    conf = cfg.ConfigOpts()
    scheduler_conf.OPTIONS.register(conf)
    conf(["--config-file", str(path)], project="ringfleet", default_config_files=[])
    return conf


def test_enabled_filters_and_weight_classes_are_read(
    tmp_path: Path, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    conf = conf_of(
        tmp_path,
        "[filter_scheduler]\n"
        "enabled_filters = TraitsFilter,CapabilitiesFilter\n"
        "weight_classes = SpreadWeigher\n",
    )
    sched = Scheduler.from_conf(db, conf)
    assert [f.name for f in sched.filters][-1:] == ["CapabilitiesFilter"]
    assert [w.name for w in sched.weighers] == ["SpreadWeigher"]
    # oslo.config says once that these are nova.conf's names for ringfleet's.
    assert 'Use option "enabled_filters" from group "scheduler"' in caplog.text
    assert 'Use option "weighers" from group "scheduler"' in caplog.text


def test_an_empty_weight_classes_is_read_too(tmp_path: Path, db: Database) -> None:
    conf = conf_of(tmp_path, "[filter_scheduler]\nweight_classes =\n")
    assert Scheduler.from_conf(db, conf).weighers == ()


@pytest.mark.parametrize(
    ("text", "group", "option", "says"),
    [
        (
            "[scheduler]\nenabled_filters = CapabilitiesFilter\n"
            "[filter_scheduler]\nenabled_filters = ComputeFilter\n",
            "scheduler",
            "enabled_filters",
            "also set as nova.conf's [filter_scheduler] enabled_filters",
        ),
        (
            "[scheduler]\nweighers = SpreadWeigher\n[filter_scheduler]\nweight_classes = x\n",
            "scheduler",
            "weighers",
            "also set as nova.conf's [filter_scheduler] weight_classes",
        ),
        (
            "[filter_scheduler]\nio_ops_weight_multiplier = -2.0\n",
            "scheduler",
            "weigher_multipliers",
            "give it here as IoOpsWeigher:<multiplier>",
        ),
        (
            "[filter_scheduler]\nhost_subset_size = 2\n",
            "filter_scheduler",
            "host_subset_size",
            "no ringfleet equivalent",
        ),
    ],
)
def test_what_is_not_read_is_refused_naming_the_ringfleet_option(
    tmp_path: Path, db: Database, text: str, group: str, option: str, says: str
) -> None:
    conf = conf_of(tmp_path, text)
    with pytest.raises(ConfigurationError) as excinfo:
        Scheduler.from_conf(db, conf)
    error = excinfo.value
    assert (error.group, error.option) == (group, option)
    assert says in error.reason
    assert str(tmp_path / "ringfleet.conf") in error.reason
    assert "\n" not in str(error)
