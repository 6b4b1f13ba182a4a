# SPDX-License-Identifier: Apache-2.0
"""The conductor's start-up refuses a database whose schema it does not know."""

from __future__ import annotations

import threading
from pathlib import Path

from oslo_config import cfg

from conductor.common import conf as common_conf
from conductor.common import rpc
from conductor.common.exception import ConfigurationError
from conductor.db import migration
from conductor.service import ConductorService


def _conf(tmp_path: Path) -> cfg.ConfigOpts:
    path = tmp_path / "conductor.conf"
    path.write_text(
        "[DEFAULT]\n"
        "host = cond-schema\n"
        "transport_url = kombu+memory:////\n"
        "[database]\n"
        f"connection = sqlite:///{tmp_path / 'ringfleet.db'}\n"
        "[coordination]\n"
        f"backend_url = file://{tmp_path / 'group'}\n"
        "[metrics]\n"
        "enabled = false\n"
    )
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    common_conf.register_opts(conf, common_conf.CONDUCTOR)
    conf(["--config-file", str(path)], project="ringfleet", default_config_files=[])
    return conf


def test_a_database_not_upgraded_stops_the_start_naming_dbsync(tmp_path: Path) -> None:
    service = ConductorService(_conf(tmp_path))
    raised: list[BaseException] = []

    def run() -> None:
        try:
            service.run()
        except BaseException as exc:  # handed to the test's thread
            raised.append(exc)

    # In a thread: a start that went on would serve until terminated.
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(30)
    try:
        assert not thread.is_alive(), "the conductor started on an empty database"
        [error] = raised
        assert isinstance(error, ConfigurationError)
        assert (error.group, error.option) == ("database", "connection")
        assert error.reason == (
            f"schema is at nothing, this conductor needs {migration.head_version()}: "
            "run ringfleet-dbsync upgrade"
        )
        assert not service.wait_started(0)
    finally:
        service.terminate()
        thread.join(30)
