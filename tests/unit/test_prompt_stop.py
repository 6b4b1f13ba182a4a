# SPDX-License-Identifier: Apache-2.0
"""A graceful stop does not wait out the libraries' idle timeouts (conductor.common.prompt_stop)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import futurist._thread as futurist_thread
import pytest
from oslo_config import cfg
from oslo_messaging._drivers import amqpdriver

from conductor.common import prompt_stop, rpc


@pytest.fixture(autouse=True)
def _library_values() -> Iterator[None]:
    """Each test starts from the libraries' own values and leaves them so."""
    saved = amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MAX, futurist_thread.ThreadWorker.MAX_IDLE_FOR
    amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MAX = 5.0
    futurist_thread.ThreadWorker.MAX_IDLE_FOR = 1
    yield
    amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MAX, futurist_thread.ThreadWorker.MAX_IDLE_FOR = saved


def test_the_idle_waits_are_bounded_and_install_is_idempotent() -> None:
    for _ in range(2):
        prompt_stop.install()
        # The default reconnect delay (1 s) keeps the listener's timeout above 1 / 0.9 s.
        assert math.isclose(amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MAX, 1.0 / 0.9)
        assert futurist_thread.ThreadWorker.MAX_IDLE_FOR == prompt_stop.IDLE_WORKER_POLL_S


def test_the_listener_timeout_stays_above_the_reconnect_delay_and_below_the_library() -> None:
    prompt_stop.install(kombu_reconnect_delay=0.0)
    assert amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MAX == prompt_stop.LISTENER_POLL_S
    prompt_stop.install(kombu_reconnect_delay=3.0)
    assert math.isclose(amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MAX, 3.0 / 0.9)
    # Never longer than oslo.messaging's own 5 s, whatever the delay.
    prompt_stop.install(kombu_reconnect_delay=4.5)
    assert amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MAX == 5.0


def test_every_transport_installs_it_with_its_reconnect_delay() -> None:
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    conf([], project="ringfleet-test", default_config_files=[])
    conf.set_override("transport_url", "rabbit://guest:guest@127.0.0.1:1/")
    conf.set_override("kombu_reconnect_delay", 2.0, group="oslo_messaging_rabbit")
    transport = rpc.get_transport(conf)
    try:
        assert math.isclose(amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MAX, 2.0 / 0.9)
        assert futurist_thread.ThreadWorker.MAX_IDLE_FOR == prompt_stop.IDLE_WORKER_POLL_S
    finally:
        transport.cleanup()
