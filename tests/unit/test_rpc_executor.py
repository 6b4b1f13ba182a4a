# SPDX-License-Identifier: Apache-2.0
"""The RPC server's pool: threads only when needed, asleep when idle, woken to stop."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import oslo_messaging as messaging
import pytest
from oslo_config import cfg

from conductor.common import rpc, rpc_executor
from conductor.common.rpc_executor import QuietThreadPoolExecutor


class _CountedGets:
    """Counts the pool's waits for work (each idle wake-up is one)."""

    def __init__(self, pool: QuietThreadPoolExecutor) -> None:
        self.calls = 0
        queue = pool._work_queue
        original = queue.get

        def get(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return original(*args, **kwargs)

        queue.get = get  # type: ignore[method-assign]


@pytest.fixture
def pool() -> Iterator[QuietThreadPoolExecutor]:
    executor = QuietThreadPoolExecutor(max_workers=8)
    yield executor
    executor.shutdown(wait=True)


def test_calls_one_after_another_take_one_thread(pool: QuietThreadPoolExecutor) -> None:
    # futurist's own pool starts a thread per call up to its maximum.
    for number in range(20):
        assert pool.submit(lambda n=number: n * 2).result(timeout=30) == number * 2
    assert len(pool._workers) == 1


def test_concurrent_calls_get_a_thread_each_up_to_the_maximum(
    pool: QuietThreadPoolExecutor,
) -> None:
    everyone_in = threading.Barrier(8, timeout=30)
    futures = [pool.submit(everyone_in.wait) for _ in range(8)]
    assert sorted(future.result(timeout=30) for future in futures) == list(range(8))
    assert len(pool._workers) == 8


def test_idle_workers_do_not_wake_up(pool: QuietThreadPoolExecutor) -> None:
    everyone_in = threading.Barrier(4, timeout=30)
    for future in [pool.submit(everyone_in.wait) for _ in range(4)]:
        future.result(timeout=30)
    gets = _CountedGets(pool)  # installed after the workers entered their wait
    time.sleep(1.0)  # futurist's workers (0.2 s under prompt_stop) would wake 20 times
    assert gets.calls == 0


def test_a_shutdown_wakes_every_waiting_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rpc_executor._QuietWorker, "MAX_IDLE_FOR", 3600.0)
    pool = QuietThreadPoolExecutor(max_workers=4)
    everyone_in = threading.Barrier(4, timeout=30)
    for future in [pool.submit(everyone_in.wait) for _ in range(4)]:
        future.result(timeout=30)
    stopper = threading.Thread(target=pool.shutdown, daemon=True)
    stopper.start()
    stopper.join(60)  # an hour if the workers were left to their timeout
    assert not stopper.is_alive()
    assert not any(worker.is_alive() for worker in pool._workers)


def test_queued_work_is_done_before_a_shutdown_ends() -> None:
    pool = QuietThreadPoolExecutor(max_workers=1)
    release = threading.Event()
    done: list[int] = []
    pool.submit(release.wait, 30)
    futures = [pool.submit(done.append, number) for number in range(5)]
    release.set()
    pool.shutdown(wait=True)
    assert done == list(range(5))
    assert all(future.done() for future in futures)


def test_the_rpc_server_runs_its_calls_in_the_quiet_pool() -> None:
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    conf([], project="ringfleet-test")
    transport = messaging.get_rpc_transport(conf, url="fake:/")

    class Endpoint:
        target = messaging.Target(version="1.0")

        def ping(self, context: dict[str, Any]) -> str:
            return threading.current_thread().__class__.__name__

    server = rpc.get_server(transport, "quiet-pool", "host-1", [Endpoint()])
    server.start()
    try:
        client = messaging.get_rpc_client(transport, messaging.Target(topic="quiet-pool"))
        assert client.prepare(timeout=30).call({}, "ping") == "_QuietWorker"
        assert isinstance(server._work_executor, QuietThreadPoolExecutor)
    finally:
        server.stop()
        server.wait()
        transport.cleanup()


@pytest.mark.parametrize("left", [True, False])
def test_a_stopping_server_leaves_only_the_calls_it_is_told_to_leave(left: bool) -> None:
    """A call inside a request to a hung back end is left running (its
    caller times out and retries); any other call is waited for."""
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    conf([], project="ringfleet-test")
    transport = messaging.get_rpc_transport(conf, url="fake:/")
    running, release = threading.Event(), threading.Event()
    inside: set[int] = set()

    class Endpoint:
        target = messaging.Target(version="1.0")

        def hang(self, context: dict[str, Any]) -> None:
            inside.add(threading.get_ident())
            running.set()
            release.wait(30)

    server = rpc.get_server(transport, "leaving", "host-1", [Endpoint()])
    server.start()
    try:
        client = messaging.get_rpc_client(transport, messaging.Target(topic="leaving"))
        client.cast({}, "hang")
        assert running.wait(10)
        outcome: list[int] = []
        stopping = threading.Thread(
            target=lambda: outcome.append(
                rpc.stop_server(server, left=lambda: inside if left else frozenset())
            )
        )
        stopping.start()
        if left:
            stopping.join(10)  # returns while the call still runs
            assert outcome == [1] and not release.is_set()
        else:
            stopping.join(2.0)
            assert stopping.is_alive()  # waits for the call
            release.set()
            stopping.join(10)
            assert outcome == [0]
    finally:
        release.set()
        transport.cleanup()
