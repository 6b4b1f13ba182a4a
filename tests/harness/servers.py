# SPDX-License-Identifier: Apache-2.0
"""Faults on the servers of ``tools/with-test-servers.sh`` (etcd, RabbitMQ, PostgreSQL, Ironic)."""

from __future__ import annotations

import os
import subprocess

import pytest

__all__ = ["server_ctl"]


def server_ctl(action: str, timeout: float = 180) -> str:
    """Run one ``tools/test-servers-ctl.sh`` action (``restart-rabbit``, ``stop-pg``,
    ``start-pg``, ``restart-etcd``, ``kill-ironic``, ``pid etcd``...); its output.

    Starts block until the server is ready.  Skips the calling test when the
    servers were not started by ``tools/with-test-servers.sh``.
    """
    ctl = os.environ.get("RINGFLEET_TEST_CTL")
    if not ctl:
        pytest.skip("RINGFLEET_TEST_CTL is unset (run through tools/with-test-servers.sh)")
    done = subprocess.run(
        [ctl, *action.split()], check=True, timeout=timeout, capture_output=True, text=True
    )
    return done.stdout
