# SPDX-License-Identifier: Apache-2.0
"""A service's garbage collector runs at the pace of :mod:`conductor.common.gc_pace`.

Each case runs in a process of its own: the pace is the process's.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from conductor.common.gc_pace import THRESHOLDS
from tests.harness.process import REPO

#: A heap as a node index makes it (long-lived objects), then as many new
#: ones kept (an import or a cold start replacing the entries): the full
#: collections that made, counted.
_FULL_COLLECTIONS = textwrap.dedent(
    """
    import gc
    from conductor.common import gc_pace
    if {paced}:
        gc_pace.set_pace()
    full = []
    gc.callbacks.append(
        lambda phase, info: full.append(1) if phase == "stop" and info["generation"] == 2 else None
    )
    index = [{{"uuid": str(i), "traits": [i]}} for i in range(100_000)]
    replaced = [{{"uuid": str(i), "traits": [i]}} for i in range(100_000)]
    print(len(full))
    """
)


def _full_collections(paced: bool) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _FULL_COLLECTIONS.format(paced=paced)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return int(out)


def test_a_large_heap_replaced_makes_fewer_full_collections_at_the_pace() -> None:
    default, paced = _full_collections(False), _full_collections(True)
    assert default >= 3, default  # what CPython's own pace does (the cost measured)
    assert paced < default / 2, (paced, default)


def test_a_service_runs_at_the_pace() -> None:
    code = textwrap.dedent(
        """
        import gc, sys
        from conductor.common.runner import run_service

        class Service:
            stop_step = "not stopping"
            def run(self):
                print(gc.get_threshold(), flush=True)  # then returns: the service ends
            def terminate(self): pass
            def reload(self): pass
            def stop_timeout(self): return 2.0
            def threads_left(self): return 0

        sys.exit(run_service(Service(), "svc"))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(THRESHOLDS)
