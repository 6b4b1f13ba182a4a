# SPDX-License-Identifier: Apache-2.0
"""tooz's ``redis://`` driver on fakeredis: a Redis in this process, no server.

``ringfleet demo --backend redis`` and the unit tests run the real tooz
Redis driver (its Lua scripts, its heartbeat keys and their expiry) against
fakeredis, which needs two things tooz assumes of a real server:

* ``INFO``: tooz calls it once in ``start()`` to check the server version,
  and fakeredis does not implement it ("unknown command 'info'"): our client
  answers it with the version of the Redis the project tests against;
* Lua: the ``fakeredis[lua]`` extra (``lupa``).

:func:`in_process_redis` points every tooz Redis coordinator created meanwhile
at one :class:`fakeredis.FakeServer`, whatever host the URL names; it
restores tooz's own client factory on exit.  Its :class:`FakeRedisServer`
can also play a Redis outage (refused connections) and a restart that lost
its data.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from typing import Any

from conductor.common.extras import MissingExtra

__all__ = ["FakeRedisServer", "in_process_redis"]

_EXTRA = "demo-redis"
_FEATURE = "the in-process Redis (ringfleet demo --backend redis)"

#: What INFO reports: tooz only checks ``redis_version`` (>= 2.6.0).
REDIS_VERSION = "7.0.15"


class FakeRedisServer:
    """One fakeredis server shared by every coordinator of this process."""

    def __init__(self) -> None:
        try:
            import fakeredis  # noqa: PLC0415 -- optional extra (demo-redis)
        except ImportError as exc:
            raise MissingExtra(_EXTRA, _FEATURE, exc.name or "fakeredis") from None
        if importlib.util.find_spec("lupa") is None:  # tooz's group operations are Lua
            raise MissingExtra(_EXTRA, _FEATURE, "lupa")

        class _Client(fakeredis.FakeRedis):
            # The shim: fakeredis has no INFO (see the module docstring).
            def info(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
                return {"redis_version": REDIS_VERSION}

        self._server = fakeredis.FakeServer()
        self._client_class = _Client

    def client(self) -> Any:
        """A new client of this server (what tooz's driver connects with)."""
        return self._client_class(server=self._server)

    @property
    def up(self) -> bool:
        return bool(self._server.connected)

    def stop(self) -> None:
        """Refuse every command and connection until :meth:`start` (an outage)."""
        self._server.connected = False

    def start(self) -> None:
        self._server.connected = True

    def lose_data(self) -> None:
        """Drop every key: a Redis restarted without persistence."""
        self.client().flushall()


@contextlib.contextmanager
def in_process_redis() -> Iterator[FakeRedisServer]:
    """Every tooz ``redis://`` coordinator created inside uses one fake server.

    :raises conductor.common.extras.MissingExtra: when fakeredis or lupa (the
        ``demo-redis`` extra) is not installed.
    """
    server = FakeRedisServer()
    # tooz's Redis driver imports redis-py: the demo-redis extra, as fakeredis
    # is.  Imported here so that the default demo (file://) never needs it.
    from tooz.drivers import redis as tooz_redis  # noqa: PLC0415

    def make_client(cls: Any, parsed_url: Any, options: Any, default_socket_timeout: Any) -> Any:
        return server.client()

    original = tooz_redis.RedisDriver.__dict__["_make_client"]
    tooz_redis.RedisDriver._make_client = classmethod(make_client)  # type: ignore[method-assign,assignment]
    try:
        yield server
    finally:
        tooz_redis.RedisDriver._make_client = original  # type: ignore[method-assign]
