# SPDX-License-Identifier: Apache-2.0
"""A broker outage is one WARNING naming the broker and one INFO when it is back.

The records are the rabbit driver's own (its logger, its messages, as
oslo.messaging 18 writes them), fed through the filter a service installs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from types import SimpleNamespace

import amqp.exceptions
import oslo_messaging as messaging
import pytest
from amqp.abstract_channel import AbstractChannel
from oslo_config import cfg
from oslo_messaging._drivers import amqp as rpc_amqp
from oslo_messaging._drivers import amqpdriver

from conductor.common import broker_outage

DRIVER = logging.getLogger(broker_outage.DRIVER_LOGGER)
LISTENER = logging.getLogger(broker_outage.LISTENER_LOGGER)
AMQP = logging.getLogger(broker_outage.AMQP_LOGGER)
SERVER = logging.getLogger(broker_outage.SERVER_LOGGER)


def _url(text: str) -> messaging.TransportURL:
    return messaging.TransportURL.parse(cfg.ConfigOpts(), text)


@pytest.fixture
def watched() -> Iterator[None]:
    """This test's broker watched, as in a fresh process (an earlier test's
    transport may have installed the filter in this one)."""
    before = {logger: list(logger.filters) for logger in (DRIVER, LISTENER, AMQP, SERVER)}
    for logger, installed in before.items():
        for old in installed:
            logger.removeFilter(old)
    broker_outage.watch(
        _url("rabbit://ringfleet:s3cret@mq1:5672,ringfleet:s3cret@mq2:5672/ringfleet")
    )
    yield
    for logger, installed in before.items():
        for added in list(logger.filters):
            logger.removeFilter(added)
        for old in installed:
            logger.addFilter(old)


def _outage(retries: int) -> None:
    for interval in range(retries):
        DRIVER.error(
            "Connection failed: %s (retrying in %s seconds)",
            "[Errno 111] Connection refused",
            float(interval),
        )
    DRIVER.error(
        "[%(connection_id)s] AMQP server on %(hostname)s:%(port)s is unreachable: "
        "%(err_str)s. Trying again in %(sleep_time)d seconds.",
        {
            "connection_id": "c1",
            "hostname": "mq1",
            "port": 5672,
            "err_str": "timed out",
            "sleep_time": 1,
        },
    )
    DRIVER.info(
        "[%(connection_id)s] Reconnected to AMQP server on %(hostname)s:%(port)s",
        {"connection_id": "c1", "hostname": "mq1", "port": 5672},
    )


def test_an_outage_is_one_warning_and_one_info(
    watched: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=broker_outage.DRIVER_LOGGER)
    _outage(retries=6)
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert said[0] == (
        "WARNING",
        "Broker rabbit://ringfleet:***@mq1:5672,ringfleet:***@mq2:5672/ringfleet unreachable: "
        "[Errno 111] Connection refused; waiting for it (retries logged at DEBUG)",
    )
    assert said[1][0] == "INFO" and said[1][1].startswith(
        "Broker rabbit://ringfleet:***@mq1:5672,ringfleet:***@mq2:5672/ringfleet "
        "reachable again after "
    )
    assert len(said) == 2 and "s3cret" not in caplog.text
    caplog.clear()
    _outage(retries=1)  # the next outage is said again
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]


def test_each_reconnection_calls_back_and_a_first_connection_does_not(
    watched: None, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fanout cast sent while a connection was down is lost if its queue went:
    a service asks to be told of every reconnection (not of the first
    connection, which lost nothing)."""
    caplog.set_level(logging.DEBUG, logger=broker_outage.DRIVER_LOGGER)
    monkeypatch.setattr(broker_outage, "_on_reconnect", [])
    calls: list[str] = []
    broker_outage.on_reconnect(lambda: calls.append("one"))
    broker_outage.on_reconnect(lambda: calls.append("two"))
    DRIVER.debug("[c1] Connected to AMQP server on mq1:5672")
    assert calls == []
    _outage(retries=2)
    assert calls == ["one", "two"]
    # A reconnection with no outage said before (the broker closed the
    # connection, the driver connected again at once) calls back too.
    DRIVER.info("[c2] Reconnected to AMQP server on mq1:5672")
    assert calls == ["one", "two", "one", "two"]


def test_with_debug_the_retries_stay_visible(
    watched: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=broker_outage.DRIVER_LOGGER)
    _outage(retries=3)
    assert [r.levelname for r in caplog.records] == ["WARNING", "DEBUG", "DEBUG", "DEBUG", "INFO"]


def test_watching_twice_installs_one_filter(watched: None) -> None:
    broker_outage.watch(_url("rabbit://other:pw@mq9:5672/"))
    assert sum(type(f).__name__ == "_OutageFilter" for f in DRIVER.filters) == 1


def test_a_first_connection_ends_the_outage_when_the_server_started(
    watched: None, caplog: pytest.LogCaptureFixture
) -> None:
    """The driver says a first connection at DEBUG, below its logger's level:
    a service started before its broker says it is back once its RPC server
    started, and the next outage is said again."""
    caplog.set_level(logging.INFO, logger=broker_outage.DRIVER_LOGGER)
    DRIVER.error("Connection failed: %s (retrying in %s seconds)", "[Errno 111] refused", 1.0)
    DRIVER.debug("[c1] Connected to AMQP server on mq1:5672 via [amqp] client with port 1.")
    broker_outage.reachable()
    broker_outage.reachable()  # said once
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in said] == ["WARNING", "INFO"]
    assert said[1][1].startswith(
        "Broker rabbit://ringfleet:***@mq1:5672,ringfleet:***@mq2:5672/ringfleet "
        "reachable again after "
    )
    caplog.clear()
    _outage(retries=1)
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]


def test_a_redelivered_message_is_dropped_in_one_info_line_without_a_traceback(
    watched: None, caplog: pytest.LogCaptureFixture
) -> None:
    """After a frozen broker comes back it redelivers what it never saw
    acknowledged: oslo.messaging's own listener drops the repeat, and says
    so as one INFO line instead of an ERROR with a traceback."""
    cache = rpc_amqp._MsgIdCache()
    cache.add("u1")  # taken once already
    listener = SimpleNamespace(msg_id_cache=cache, use_cache=False, incoming=[])
    message = {rpc_amqp.UNIQUE_ID: "u1", "_msg_id": "m1", "method": "ping", "args": {}}
    with caplog.at_level(logging.DEBUG, logger=broker_outage.LISTENER_LOGGER):
        amqpdriver.AMQPListener.__call__(listener, message)  # type: ignore[arg-type]
    assert listener.incoming == []  # dropped: never dispatched again
    [record] = [r for r in caplog.records if r.name == broker_outage.LISTENER_LOGGER]
    assert (record.levelname, record.exc_info, record.exc_text) == ("INFO", None, None)
    assert "m1" in record.getMessage() and "dropped as the repeat" in record.getMessage()


def test_a_method_arriving_on_a_closing_channel_is_info(
    watched: None, caplog: pytest.LogCaptureFixture
) -> None:
    """A stop closes its channels while the broker still sends (a consumer's
    cancel): py-amqp ignores the method, and it is said at INFO, not WARNING."""
    channel = SimpleNamespace(
        is_closing=True, _ALLOWED_METHODS_WHEN_CLOSING=(), channel_id=1, _pending={}
    )
    with caplog.at_level(logging.INFO, logger=broker_outage.AMQP_LOGGER):
        AbstractChannel.dispatch_method(channel, (60, 30), b"", None)  # type: ignore[arg-type]
    [record] = [r for r in caplog.records if r.name == broker_outage.AMQP_LOGGER]
    assert record.levelname == "INFO" and "during closing channel 1" in record.getMessage()


def _unsent_reply(error: BaseException) -> None:
    """What oslo.messaging's RPC server does when a reply fails."""
    try:
        raise error
    except Exception:
        SERVER.exception("Can not send reply for message")


def test_a_reply_lost_with_its_connection_is_one_warning_without_a_traceback(
    watched: None, caplog: pytest.LogCaptureFixture
) -> None:
    """A call served while the broker connection went away (a cut) cannot
    be answered: one WARNING line, not an ERROR with two tracebacks."""
    with caplog.at_level(logging.INFO, logger=broker_outage.SERVER_LOGGER):
        _unsent_reply(OSError("Server unexpectedly closed connection"))
        _unsent_reply(amqp.exceptions.RecoverableConnectionError("connection already closed"))
        _unsent_reply(TypeError("Object of type set is not JSON serializable"))
    *lost, unserialisable = [r for r in caplog.records if r.name == broker_outage.SERVER_LOGGER]
    assert [(r.levelname, r.exc_info, r.exc_text) for r in lost] == [("WARNING", None, None)] * 2
    assert "OSError: Server unexpectedly closed connection" in lost[0].getMessage()
    assert "RecoverableConnectionError: connection already closed" in lost[1].getMessage()
    # Not the connection's: a bug to see whole.
    assert unserialisable.levelname == "ERROR" and unserialisable.exc_info is not None
