# SPDX-License-Identifier: Apache-2.0
"""A graceful stop that waits for the work, not for idle library threads.

A conductor's or an agent's graceful stop took 5-6.5 s with nothing in
flight.  None of it was work; it was three idle waits in the libraries, each
of which only notices a stop request when its blocking call times out:

* oslo.messaging's RabbitMQ listener (the RPC server's, and the reply
  waiter of a process that made calls) blocks in ``drain_events`` for a
  consume timeout that doubles while the queue is idle, up to
  ``ACK_REQUEUE_EVERY_SECONDS_MAX`` (5 s).  ``RPCServer.stop()`` sets a flag
  and then joins that thread: up to 5 s for the RPC server, and up to 5 s
  more for the transport's reply waiter.
* futurist's idle worker threads (tooz's executor) wait for work in
  ``queue.get`` with a 1 s timeout (``ThreadWorker.MAX_IDLE_FOR``) and see
  a shutdown only after it: tooz's ``stop()`` (the membership's) and
  futurist's exit handler each joined them for up to 1 s.  (The RPC
  server's pool, up to 64 threads, is not polled at all: its shutdown wakes
  its workers, :mod:`conductor.common.rpc_executor`.)

:func:`install` shortens those two timeouts, process-wide, so each of these
waits ends within about a second or less.  The order and the meaning of the
stop are unchanged: the RPC server still stops taking requests and finishes
those in flight before the workers stop, and ``graceful_timeout`` still
bounds the whole stop.  The cost is idle wake-ups: a listener polls its
connection about once a second instead of every 5 s (a RabbitMQ poll that
finds nothing), an idle futurist worker checks for a shutdown every
:data:`IDLE_WORKER_POLL_S` instead of every second.

oslo.messaging keeps ``kombu_reconnect_delay`` below 0.9 times the listener's
longest consume timeout (the option's maximum): the shorter timeout keeps
that relation for the configured delay (default 1 s, so 1.1 s).
"""

from __future__ import annotations

from typing import Final

import futurist._thread as futurist_thread
from oslo_messaging._drivers import amqpdriver

__all__ = ["IDLE_WORKER_POLL_S", "LISTENER_POLL_S", "install"]

#: Longest consume timeout of an idle oslo.messaging RabbitMQ listener (the
#: longest a stop waits for the listener's thread), unless the reconnect delay
#: asks for more (oslo.messaging: 5 s).
LISTENER_POLL_S: Final = 0.5

#: oslo.messaging's bound: ``kombu_reconnect_delay`` <= this * the timeout.
_RECONNECT_DELAY_SHARE: Final = 0.9

#: How often an idle futurist worker looks for a shutdown: the longest a
#: stop or the exit waits for one (futurist: 1 s).
IDLE_WORKER_POLL_S: Final = 0.2

# The libraries' own values, before any install(): what a wait is never made longer than.
_LIBRARY_LISTENER_POLL_S: Final = float(amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MAX)
_LIBRARY_IDLE_WORKER_POLL_S: Final = float(futurist_thread.ThreadWorker.MAX_IDLE_FOR)


def install(kombu_reconnect_delay: float = 1.0) -> None:
    """Bound the libraries' idle waits (above) in this process (idempotent).

    ``kombu_reconnect_delay`` is ``[oslo_messaging_rabbit]``'s: the listeners'
    timeout stays above it (see the module's docstring).  Both values are
    read by the libraries at each wait, so listeners and workers that
    already exist follow them from their next wait on.
    """
    listener_poll = max(LISTENER_POLL_S, kombu_reconnect_delay / _RECONNECT_DELAY_SHARE)
    # Never longer than the library's own: a version with a shorter wait keeps it.
    amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MAX = min(_LIBRARY_LISTENER_POLL_S, listener_poll)
    # Typed int by futurist, but only ever queue.get's timeout: a float is fine.
    futurist_thread.ThreadWorker.MAX_IDLE_FOR = min(  # type: ignore[assignment]
        _LIBRARY_IDLE_WORKER_POLL_S, IDLE_WORKER_POLL_S
    )
