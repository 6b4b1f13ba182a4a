# SPDX-License-Identifier: Apache-2.0
"""A member process for the functional tests: joins a group, reports events.

Run as ``python -m tests.functional.member_proc --config-file FILE``.  It
prints one JSON object per line on stdout:

``{"event": "view", "members": [...], "excluded": {...}}`` on every change
of the group; ``{"event": "state", "state": "connected"}`` whenever the state
it reads changes.  Its main loop reads ``membership.state`` every 20 ms, the
way an agent checks before every node action, so a resumed process reports
what an agent would have seen first.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from typing import Any

from oslo_config import cfg

from conductor.common.coordination import membership_from_conf
from conductor.common.prepare import prepare_service
from hashring.membership import MembershipView, State

_print_lock = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    with _print_lock:
        print(json.dumps({"event": event, "t": time.time(), **fields}), flush=True)


def main() -> int:
    conf = cfg.ConfigOpts()
    prepare_service(sys.argv, conf, default_config_files=[])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def on_change(view: MembershipView) -> None:
        emit("view", members=sorted(view.members), excluded=dict(view.excluded))

    last: list[State | None] = [None]
    said = threading.Lock()

    def say(state: State) -> None:
        with said:
            if state is not last[0]:
                emit("state", state=state.value)
                last[0] = state

    # Every transition the membership reports (a re-join after a pause goes
    # LOST -> CONNECTED within a millisecond, which a poll would miss), and
    # a poll for what the clock alone changes while its threads are blocked
    # (a hung backend: SUSPENDED, then LOST, with nobody reporting it).
    membership = membership_from_conf(
        conf, on_change=on_change, on_state_change=lambda _old, new: say(new)
    )
    membership.start()
    while not stop.is_set():
        say(membership.state)
        stop.wait(0.02)
    membership.stop(leave=True)
    emit("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
