# SPDX-License-Identifier: Apache-2.0
"""A call still running when its process closed the transport cannot reply:
oslo.messaging's ERROR and traceback become one WARNING, said once."""

from __future__ import annotations

import logging

import pytest

from conductor.common import rpc


class _Transport:
    def cleanup(self) -> None:
        pass


def test_late_replies_after_the_close_are_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    server_log = logging.getLogger("oslo_messaging.rpc.server")
    assert rpc.close_transport(_Transport(), timeout=5)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="oslo_messaging.rpc.server"):
        for _ in range(3):
            try:
                raise AttributeError("'NoneType' object has no attribute 'get'")
            except AttributeError:
                server_log.exception("Can not send reply for message")
        server_log.error("Something else")
    records = [(r.levelname, r.getMessage(), r.exc_info) for r in caplog.records]
    assert records == [
        (
            "WARNING",
            "A call still running at the stop could not be answered (its caller retries)",
            None,
        ),
        ("ERROR", "Something else", None),
    ]
