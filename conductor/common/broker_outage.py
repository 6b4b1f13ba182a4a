# SPDX-License-Identifier: Apache-2.0
"""One WARNING per broker outage, naming the broker, instead of oslo.messaging's flood.

While RabbitMQ cannot be reached, oslo.messaging's rabbit driver logs an
ERROR line at every connection attempt, for ever (every 1 to 32 s, per
connection), and none of them says which broker.  A service started
before its broker, or one whose broker went away, should say once, at
WARNING, which broker it waits for (its URL without the password), and
once, at INFO, that it is back.  :func:`watch` installs a filter on the
driver's logger that does exactly that; the retries it replaces stay
visible at DEBUG.

A broker that froze (SIGSTOP, a stalled disk) and comes back redelivers the
messages whose acknowledgement never reached it.  oslo.messaging recognises
each as one it already took (its unique id is in the listener's cache of
recent ids) and drops it, but says so as an ERROR with a traceback
(``DuplicateMessageError``), 9-27 of them per service after a 20 s freeze.
Dropping it is right: the message was dispatched already, and every RPC
ringfleet serves is idempotent besides.  :func:`watch` also makes that one
INFO line saying so, without a traceback.

A call whose broker connection closed while it was served (a cut, a
broker restart) cannot be answered: oslo.messaging's RPC server logs
that as an ERROR with two chained tracebacks (60 lines).  The caller's
call times out and is retried; the outage itself is said once.  So that
is one WARNING line naming the error, without the traceback; any other
failure to reply (a reply that cannot be serialised) stays an ERROR.

A stopping service closes its channels while the broker may still be
sending on them (a consumer's cancel, a delivery it will redeliver
elsewhere, unacknowledged): py-amqp ignores such a method and says so at
WARNING.  Nothing is lost and nothing is to be done, so that is INFO too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import kombu.exceptions
import oslo_messaging as messaging

__all__ = ["known_down", "on_reconnect", "reachable", "redacted", "warning_level", "watch"]

#: The logger oslo.messaging's rabbit driver writes its connection errors to.
DRIVER_LOGGER = "oslo.messaging._drivers.impl_rabbit"

#: The logger oslo.messaging's AMQP listener says a redelivered message on.
LISTENER_LOGGER = "oslo_messaging._drivers.amqpdriver"

#: The listener's words for a message it already took (then dropped).
_DUPLICATE = "ignoring duplicate message"

#: The logger oslo.messaging's RPC server says a reply it could not send on.
SERVER_LOGGER = "oslo_messaging.rpc.server"
_NO_REPLY = "Can not send reply for message"
#: py-amqp's logger, and its words for a method that arrived on a closing channel.
AMQP_LOGGER = "amqp"
_WHILE_CLOSING = "during closing channel"

#: The driver's messages: a failed (re)connection, and a connection made.
_FAILED = ("Connection failed: ", " is unreachable: ")
_CONNECTED = ("Reconnected to AMQP server", "Connected to AMQP server")

#: The driver's words for a connection made again (INFO), after a failure
#: or a broker that closed it.
_RECONNECTED = "Reconnected to AMQP server"

_install_lock = threading.Lock()

#: Called at each reconnection (see :func:`on_reconnect`).
_on_reconnect: list[Callable[[], None]] = []


def redacted(url: messaging.TransportURL) -> str:
    """The broker URL as the driver uses it (its defaults filled in), without passwords."""
    hosts = ",".join(
        f"{h.username or 'guest'}:***@{h.hostname or 'localhost'}:{h.port or 5672}"
        for h in url.hosts or [messaging.TransportHost()]
    )
    return f"{url.transport}://{hosts}/{url.virtual_host or ''}"


def watch(url: messaging.TransportURL) -> None:
    """Say broker outages of this process once each (idempotent; the first URL is named)."""
    driver = logging.getLogger(DRIVER_LOGGER)
    listener = logging.getLogger(LISTENER_LOGGER)
    with _install_lock:
        if not any(isinstance(f, _OutageFilter) for f in driver.filters):
            driver.addFilter(_OutageFilter(redacted(url)))
        if not any(isinstance(f, _DuplicateFilter) for f in listener.filters):
            listener.addFilter(_DuplicateFilter())
        channels = logging.getLogger(AMQP_LOGGER)
        if not any(isinstance(f, _ClosingFilter) for f in channels.filters):
            channels.addFilter(_ClosingFilter())
        server = logging.getLogger(SERVER_LOGGER)
        if not any(isinstance(f, _UnsentReplyFilter) for f in server.filters):
            server.addFilter(_UnsentReplyFilter())


class _UnsentReplyFilter(logging.Filter):
    """A reply lost with its connection: one WARNING line, no traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if _connection_lost(error) and record.getMessage().startswith(_NO_REPLY):
            _rewrite(
                record,
                logging.WARNING,
                f"Reply to a call not sent, its broker connection is gone "
                f"({type(error).__name__}: {error}): the caller times out and retries",
            )
        return True


def _connection_lost(error: BaseException | None) -> bool:
    """Whether ``error`` is what a reply meets when its connection is gone:
    the socket's, kombu's, or py-amqp's own (``amqp.exceptions``, matched
    by name: py-amqp is oslo.messaging's dependency, not ringfleet's)."""
    if isinstance(error, (OSError, kombu.exceptions.OperationalError)):
        return True
    return any(
        kind.__module__ == "amqp.exceptions" and kind.__name__.endswith("ConnectionError")
        for kind in type(error).__mro__
    )


class _ClosingFilter(logging.Filter):
    """A method the broker sent on a channel being closed: INFO, not WARNING."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and _WHILE_CLOSING in record.getMessage():
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


class _DuplicateFilter(logging.Filter):
    """A redelivered message the listener dropped: one INFO line, no traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith(_DUPLICATE):
            msg_id = message[len(_DUPLICATE) :].strip() or "(no id)"
            _rewrite(
                record,
                logging.INFO,
                f"Broker redelivered message {msg_id}, already taken (its "
                "acknowledgement did not reach the broker): dropped as the repeat it is",
            )
        return True


class _OutageFilter(logging.Filter):
    def __init__(self, broker: str) -> None:
        super().__init__()
        self._broker = broker
        self._lock = threading.Lock()
        self._down_since: float | None = None  # monotonic

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if any(marker in message for marker in _FAILED):
            with self._lock:
                first = self._down_since is None
                if first:
                    self._down_since = time.monotonic()
            if first:
                _rewrite(
                    record,
                    logging.WARNING,
                    f"Broker {self._broker} unreachable: {_reason(message)}; "
                    "waiting for it (retries logged at DEBUG)",
                )
                return True
            _rewrite(record, logging.DEBUG, message)
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        if any(marker in message for marker in _CONNECTED):
            back = self.back()
            if back is not None:
                _rewrite(record, logging.INFO, back)
            if _RECONNECTED in message:
                for callback in list(_on_reconnect):
                    callback()
        return True

    @property
    def down(self) -> bool:
        return self._down_since is not None

    def back(self) -> str | None:
        """The outage is over: what to say (None if there was none)."""
        with self._lock:
            since, self._down_since = self._down_since, None
        if since is None:
            return None
        return f"Broker {self._broker} reachable again after {time.monotonic() - since:.1f} s"


def on_reconnect(callback: Callable[[], None]) -> None:
    """Call *callback* each time one of this process's broker connections is
    made again (in the driver's thread: it must be quick and not raise).

    A fanout queue outlives its consumer's connection only until it expires
    (``rabbit_transient_queues_ttl``, 1800 s) or the broker restarts (it is
    not durable): what was cast to it meanwhile is then lost, and a service
    that relies on such casts reads what they would have said on this call.  (The
    driver's own hook is private; its INFO line is not, and :func:`watch`'s
    filter sees every one.)
    """
    with _install_lock:
        _on_reconnect.append(callback)


def known_down() -> bool:
    """Whether this process saw its broker fail and not come back since: a
    stop then skips what needs the broker (results, the restart hold) at
    once instead of waiting for their timeouts."""
    driver = logging.getLogger(DRIVER_LOGGER)
    return any(isinstance(f, _OutageFilter) and f.down for f in driver.filters)


def warning_level() -> int:
    """The level of a failure the broker outage may cause: WARNING, or INFO
    while this process has said its broker is down (that WARNING is the
    cause, and the one line the operator needs)."""
    return logging.INFO if known_down() else logging.WARNING


def reachable() -> None:
    """Say that the broker answers again, if this process said it did not.

    For a service whose RPC server started (its ``start()`` waits for the
    broker): a first connection is said at DEBUG only by the driver
    ("Connected to AMQP server", where a reconnection is INFO), below the
    driver logger's level (``oslo.messaging=INFO``), so the filter never
    sees it.  Without this a service started before its broker never said
    it was back, and kept the outage open: a later one went unsaid.
    """
    driver = logging.getLogger(DRIVER_LOGGER)
    for installed in driver.filters:
        if isinstance(installed, _OutageFilter):
            back = installed.back()
            if back is not None:
                driver.info(back)


def _reason(message: str) -> str:
    """The error out of the driver's line (without its retry schedule)."""
    for marker in _FAILED:
        if marker in message:
            reason = message.split(marker, 1)[1]
            return reason.split(" (retrying in ")[0].split(". Trying again in ")[0]
    return message


def _rewrite(record: logging.LogRecord, level: int, message: str) -> None:
    record.levelno, record.levelname = level, logging.getLevelName(level)
    record.msg, record.args = message, None
    record.exc_info = record.exc_text = None
