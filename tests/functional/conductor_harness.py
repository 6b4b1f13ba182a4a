# SPDX-License-Identifier: Apache-2.0
"""Conductor configs for functional tests, and an RPC client to drive them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oslo_config import cfg

from conductor.common import rpc
from conductor.rpcapi import ConductorAPI


def write_config(
    path: Path,
    *,
    host: str,
    db_url: str,
    transport_url: str,
    backend_url: str,
    group: str,
    log_file: Path,
    extra: str = "",
) -> Path:
    path.write_text(
        "[DEFAULT]\n"
        f"host = {host}\n"
        f"transport_url = {transport_url}\n"
        f"log_file = {log_file}\n"
        "debug = true\n"
        "[database]\n"
        f"connection = {db_url}\n"
        "[coordination]\n"
        f"backend_url = {backend_url}\n"
        f"group = {group}\n"
        "watch_interval = 0.2\n"
        "[scheduler]\n"
        "index_refresh_interval = 0.2\n"
        f"{extra}"
    )
    return path


def client(transport_url: str, timeout: float = 30) -> tuple[ConductorAPI, Any]:
    """A ConductorAPI over its own transport (clean it up with .cleanup())."""
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    conf([], project="ringfleet-test", default_config_files=[])
    conf.set_override("transport_url", transport_url)
    transport = rpc.get_transport(conf)
    return ConductorAPI(transport, timeout=timeout), transport
