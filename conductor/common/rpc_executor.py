# SPDX-License-Identifier: Apache-2.0
"""The RPC server's thread pool: idle workers that sleep until there is work.

oslo.messaging runs each call it receives in a futurist thread pool of up to
``executor_thread_pool_size`` (64) threads.  futurist's pool has two habits
that cost a process CPU when nothing happens:

* it starts a new thread for every call until it has 64, even when idle
  threads are waiting, so every long-lived process ends up with 64;
* an idle thread waits for work with a timeout, only to look for a
  shutdown, and :mod:`conductor.common.prompt_stop` shortens that timeout
  to 0.2 s so that a stop is prompt.  64 threads waking 5 times a second
  cost a process about 13 ms of CPU a second, asleep; ten agents in one
  process (the scale benchmark) over a tenth of a core, and under load
  each wake-up competes for the GIL, so a hundred agents on two cores
  starved their own heartbeats.

:class:`QuietThreadPoolExecutor` keeps futurist's pool (its futures,
statistics and shutdown order) and changes both: a thread is added only when
no idle one can take the call, and an idle thread waits without polling
(:data:`IDLE_WAIT_S`, a safety net only): a shutdown wakes each waiting
thread with a no-op item instead.  A stop is as prompt as before, and an
idle pool costs nothing.
"""

from __future__ import annotations

import atexit
import threading
import weakref
from typing import Final

import futurist
from futurist import _thread as futurist_thread

__all__ = ["IDLE_WAIT_S", "QuietThreadPoolExecutor"]

#: How long an idle worker waits before it looks for a shutdown on its own:
#: only a pool that was never shut down (its process exiting without a
#: graceful stop) relies on it; a shutdown wakes the workers at once.
IDLE_WAIT_S: Final = 30.0


class _Wake:
    """A work item that does nothing: it returns a waiting worker from its
    wait, so that it sees it was told to stop."""

    def run(self) -> None:
        return None


class _QuietWorker(futurist_thread.ThreadWorker):
    # futurist types it int; only ever queue.get's timeout.
    MAX_IDLE_FOR = IDLE_WAIT_S  # type: ignore[assignment]


#: Pools not shut down yet: woken at the interpreter's exit (before futurist's
#: own exit handler joins their workers; atexit runs the later one first).
_LIVE: weakref.WeakSet[QuietThreadPoolExecutor] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


class QuietThreadPoolExecutor(futurist.ThreadPoolExecutor):
    """futurist's thread pool, with workers added only when needed and woken
    to stop (see the module's docstring)."""

    def __init__(self, max_workers: int | None = None) -> None:
        super().__init__(max_workers=max_workers)
        with _LIVE_LOCK:
            _LIVE.add(self)

    def _add_thread(self) -> None:
        worker = _QuietWorker.create_and_register(self, self._work_queue)
        self._workers.append(worker)
        worker.start()

    def _maybe_spin_up(self) -> bool:
        # Called under the pool's lock, before the item is queued: an idle
        # worker per queued item, and one for this item, or a new thread.
        idle = sum(1 for worker in self._workers if worker.idle)
        if idle > self._work_queue.qsize() or len(self._workers) >= self._max_workers:
            return False
        self._add_thread()
        return True

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """futurist's shutdown (queued work done first when ``wait``), with
        every worker woken from its wait instead of left to its timeout."""
        with self._shutdown_lock:
            if not self._shutdown:
                self._shutdown = True
                if wait:
                    self._work_queue.join()
                self.wake_to_stop()
        if wait:
            for worker in self._workers:
                worker.join()

    def wake_to_stop(self) -> None:
        """Tell every worker to stop, and wake each one that waits."""
        with _LIVE_LOCK:
            _LIVE.discard(self)
        for worker in self._workers:
            worker.stop()
        for _worker in self._workers:
            self._work_queue.put(_Wake())  # type: ignore[arg-type]


@atexit.register
def _wake_at_exit() -> None:
    with _LIVE_LOCK:
        pools = list(_LIVE)
    for pool in pools:
        pool.wake_to_stop()
