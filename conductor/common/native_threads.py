# SPDX-License-Identifier: Apache-2.0
"""Native threads only: eventlet is never imported into a ringfleet process.

ringfleet runs on threads (``threading``, oslo.messaging's threading
executor); nothing in it is green.  Yet three libraries it uses reach for
eventlet on their own, because oslo.service still requires it and so it is
always installed: oslo.messaging imports oslo.service, whose default
backend *is* eventlet (which prints an 8-line ``EventletDeprecationWarning``
into every service's journal at start), and futurist (through tooz) and
oslo.concurrency import it when they can, to check for monkey-patching.

:func:`use_native_threads` runs first in every process, from the
``conductor`` and ``compute_agent`` package initialisers (before any module
of theirs imports oslo.messaging): it selects oslo.service's threading
backend and makes ``import eventlet`` fail, which each of those libraries
handles as "eventlet is not installed".
"""

from __future__ import annotations

import sys

from oslo_service import backend

__all__ = ["use_native_threads"]


def use_native_threads() -> None:
    """Choose oslo.service's threading backend and block eventlet's import.

    Idempotent.  Where eventlet was imported already (a test runner that
    loaded it first), it is left alone.
    """
    # A None entry makes every later "import eventlet" raise ImportError.
    sys.modules.setdefault("eventlet", None)  # type: ignore[arg-type]
    if backend.get_backend_type() is None:
        backend.register_backend_default_hook(lambda: backend.BackendType.THREADING)
