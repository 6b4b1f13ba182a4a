# SPDX-License-Identifier: Apache-2.0
"""Fixtures shared by the unit tests."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from oslo_context import context as request_context

# Before any test module imports oslo.messaging: the services' own choice of
# oslo.service's threading backend, and no eventlet (conductor.common.native_threads).
import conductor  # noqa: F401
from tests.harness.ports import free_port, silent_port


@pytest.fixture(autouse=True)
def _no_request_context_left() -> Iterator[None]:
    """Remove the oslo.context request context a test left on its thread.

    ``RequestContext(overwrite=True)`` makes a context the thread's current
    one, and nothing public takes it away: a later test on the same worker
    (which test follows which depends on how xdist spreads the files) saw it
    as its own.
    """
    yield
    store = request_context._request_store
    if hasattr(store, "context"):
        del store.context


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """Undo what a command run in-process did to the process's logging.

    cliff's ``App.run`` configures logging for a whole process: it adds
    handlers to the root logger bound to the test's captured stderr and sets
    library log levels.  Left in place, the handlers outlive the capture and
    a later test's background thread (a membership watcher logging a state
    change) hits "I/O operation on closed file".
    """
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {
        name: logger.level
        for name, logger in logging.root.manager.loggerDict.items()
        if isinstance(logger, logging.Logger)
    }
    yield
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)
    for name, logger in logging.root.manager.loggerDict.items():
        if isinstance(logger, logging.Logger):
            logger.setLevel(levels.get(name, logging.NOTSET))


@pytest.fixture
def closed_port() -> int:
    """A port nothing listens on."""
    return free_port()


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts TCP connections and never answers."""
    with silent_port() as port:
        yield port
