# SPDX-License-Identifier: Apache-2.0
"""The agent's result reporter: batches, retries until taken, refusals, fallback."""

from __future__ import annotations

import logging
import threading
from typing import Any

import oslo_messaging as messaging
import pytest

from compute_agent.reporting import ResultReporter
from conductor.common.exception import FieldError, InvalidInput, ServiceUnavailable


def _result(n: int, **extra: Any) -> dict[str, Any]:
    return {
        "instance_uuid": f"instance-{n}",
        "node_uuid": f"node-{n}",
        "epoch": 1,
        "success": True,
        "fault": None,
        "node_clean": True,
        **extra,
    }


class Conductor:
    """Records calls; the first batched call blocks until released."""

    def __init__(self, *, batched: bool = True) -> None:
        self.batched = batched
        self.batches: list[list[dict[str, Any]]] = []
        self.singles: list[dict[str, Any]] = []
        self.release = threading.Event()
        self.entered = threading.Event()
        self.fail_with: Exception | None = None
        self.reply: Any = None

    def report_build_results(self, host: str, results: list[dict[str, Any]]) -> dict[str, Any]:
        if not self.batched:
            raise messaging.RemoteError("UnsupportedVersion", "Endpoint does not support 1.1")
        self.batches.append(list(results))
        self.entered.set()
        self.release.wait(10)
        if self.fail_with is not None:
            raise self.fail_with
        if self.reply is not None:
            return self.reply  # type: ignore[no-any-return]
        return {"results": [{"accepted": True} for _ in results]}

    def report_build_result(self, host: str, **result: Any) -> dict[str, Any]:
        self.singles.append(result)
        return {"accepted": True}

    def can_send_version(self, version: str) -> bool:
        return version <= self.pinned_at

    pinned_at = "1.5"


def test_results_queued_during_a_call_go_together_in_the_next() -> None:
    conductor = Conductor()
    reporter = ResultReporter("agent-1", conductor, max_batch=3)
    reporter.start()
    reporter.report(_result(0))
    assert conductor.entered.wait(10)  # the first result is sent alone, at once
    for n in range(1, 6):
        reporter.report(_result(n))
    conductor.release.set()
    assert reporter.stop(10)
    assert [[r["instance_uuid"] for r in b] for b in conductor.batches] == [
        ["instance-0"],
        ["instance-1", "instance-2", "instance-3"],  # max_batch
        ["instance-4", "instance-5"],
    ]
    assert reporter.calls == 3 and conductor.singles == []


def test_stop_sends_what_is_queued() -> None:
    conductor = Conductor()
    conductor.release.set()
    reporter = ResultReporter("agent-1", conductor)
    reporter.start()
    for n in range(4):
        reporter.report(_result(n))
    assert reporter.stop(10)
    assert sorted(r["instance_uuid"] for b in conductor.batches for r in b) == [
        f"instance-{n}" for n in range(4)
    ]


def test_abandon_drops_what_is_queued_and_stops() -> None:
    conductor = Conductor()
    reporter = ResultReporter("agent-1", conductor)
    reporter.start()
    reporter.report(_result(0))
    assert conductor.entered.wait(10)  # a call under way
    for n in range(1, 4):
        reporter.report(_result(n))
    conductor.release.set()
    reporter.abandon(10)
    assert not reporter._thread.is_alive()
    assert [[r["instance_uuid"] for r in b] for b in conductor.batches] == [["instance-0"]]


def test_an_older_conductor_gets_one_call_per_result() -> None:
    conductor = Conductor(batched=False)
    reporter = ResultReporter("agent-1", conductor)
    reporter.send([_result(0), _result(1)])
    reporter.send([_result(2)])
    assert [r["instance_uuid"] for r in conductor.singles] == [
        "instance-0",
        "instance-1",
        "instance-2",
    ]
    # It asked once; after that it knows.
    assert reporter.calls == 1 + 3


def test_an_undelivered_result_is_sent_again_until_taken(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="compute_agent.reporting")
    conductor = Conductor()
    conductor.release.set()
    conductor.fail_with = messaging.MessagingTimeout("no reply")
    reporter = ResultReporter("agent-1", conductor, first_retry=0.01, max_retry=0.05)
    reporter.start()
    reporter.report(_result(0))
    _wait(lambda: len(conductor.batches) >= 3)  # sent again, and again
    conductor.fail_with = None
    _wait(lambda: reporter.pending() == 0)
    reporter.report(_result(1))
    assert reporter.stop(10)
    sent = [[r["instance_uuid"] for r in b] for b in conductor.batches]
    assert all(b == ["instance-0"] for b in sent[:-1]) and sent[-1] == ["instance-1"]
    # One line when results stop getting through, one when they pass again.
    assert caplog.text.count("results not delivered (no reply)") == 1
    assert caplog.text.count("results delivered again") == 1


def test_a_conductor_without_its_database_gets_the_result_again() -> None:
    conductor = Conductor()
    conductor.release.set()
    conductor.fail_with = ServiceUnavailable("the database is unreachable")
    reporter = ResultReporter("agent-1", conductor, first_retry=0.01)
    reporter.start()
    reporter.report(_result(0))
    _wait(lambda: len(conductor.batches) >= 2)
    conductor.fail_with = None
    _wait(lambda: reporter.pending() == 0 and conductor.entered.is_set())
    assert reporter.stop(10)
    assert conductor.batches[-1][0]["instance_uuid"] == "instance-0"


def test_an_item_the_conductor_could_not_apply_now_is_sent_again() -> None:
    conductor = Conductor()
    conductor.release.set()
    conductor.reply = {
        "results": [
            {"accepted": False, "error": "service unavailable: db", "retry": True},
            {"accepted": True},
        ]
    }
    reporter = ResultReporter("agent-1", conductor, first_retry=0.01)
    reporter.start()
    reporter.report(_result(0))
    reporter.report(_result(1))
    _wait(lambda: len(conductor.batches) >= 2)
    conductor.reply = None
    assert reporter.stop(10)
    assert [r["instance_uuid"] for r in conductor.batches[1]] == ["instance-0"]


def test_a_refused_result_is_not_sent_again(caplog: pytest.LogCaptureFixture) -> None:
    conductor = Conductor()
    conductor.release.set()
    conductor.fail_with = InvalidInput([FieldError.about("epoch", "must be >= 0", -1)])
    reporter = ResultReporter("agent-1", conductor, first_retry=0.01)
    reporter.send([_result(0)])
    assert reporter.pending() == 0 and len(conductor.batches) == 1
    assert "Instance instance-0: build result refused by the conductor" in caplog.text


def test_teardown_results_are_retried_too() -> None:
    calls: list[dict[str, Any]] = []

    class Destroys(Conductor):
        def report_destroy_result(self, host: str, **result: Any) -> dict[str, Any]:
            calls.append(result)
            if len(calls) < 3:
                raise messaging.MessagingTimeout("no reply")
            return {"accepted": True}

    reporter = ResultReporter("agent-1", Destroys(), first_retry=0.01)
    reporter.start()
    reporter.report_destroy({"instance_uuid": "i", "node_uuid": "n", "epoch": 1, "success": True})
    _wait(lambda: len(calls) == 3)
    assert reporter.stop(10) and reporter.pending() == 0


def test_a_refused_item_is_logged_the_others_are_not(caplog: pytest.LogCaptureFixture) -> None:
    conductor = Conductor()
    conductor.release.set()
    conductor.reply = {
        "results": [{"accepted": False, "error": "RuntimeError: db"}, {"accepted": True}]
    }
    reporter = ResultReporter("agent-1", conductor)
    reporter.send([_result(0), _result(1)])
    assert "Instance instance-0: build result on node node-0 not applied" in caplog.text
    assert "instance-1" not in caplog.text


def test_max_batch_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_batch"):
        ResultReporter("agent-1", Conductor(), max_batch=0)


def _wait(predicate: Any, timeout: float = 10.0) -> None:
    done = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return
        done.wait(0.01)
    raise AssertionError("condition not reached")
