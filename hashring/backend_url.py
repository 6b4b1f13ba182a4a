# SPDX-License-Identifier: Apache-2.0
"""Which coordination back ends ringfleet accepts, and what their URLs configure.

tooz parses a back end's URL only when it connects, and the membership keeps
reconnecting: a URL it could never use would start and then fail on every
attempt, forever.  These checks refuse such a URL once, at start, saying
what to do instead, and read the membership TTL it configures.
"""

from __future__ import annotations

import importlib.util
import math
import urllib.parse

from hashring.exceptions import MembershipError

__all__ = ["check_backend_url", "redacted_url", "tooz_url", "ttl_from_url"]

#: tooz's own defaults when the URL names no timeout.
_DEFAULT_TTL = {"etcd3+http": 30.0, "etcd3+https": 30.0, "file": 10.0, "redis": 30.0}

#: Options tooz reads with int(): "2.5" would fail at every connection.
_WHOLE_SECONDS = {
    "etcd3+http": ("timeout", "membership_timeout", "lock_timeout"),
    "etcd3+https": ("timeout", "membership_timeout", "lock_timeout"),
    # The redis driver reads membership_timeout with float() (a lease in ms).
    "redis": ("timeout", "lock_timeout"),
}

#: etcd options that default to ``timeout`` in tooz: pinned to their value
#: when ringfleet sets ``timeout`` (:func:`tooz_url`).
_ETCD_TIMEOUTS = ("membership_timeout", "lock_timeout")

#: Redis socket options ringfleet sets when the URL does not (:func:`tooz_url`).
_REDIS_SOCKET_OPTIONS = ("socket_timeout", "socket_connect_timeout")


def ttl_from_url(backend_url: str, member_id: str = "-") -> float:
    """The membership TTL (seconds) that a tooz backend URL configures.

    The URL is checked whole first (:func:`check_backend_url`): a URL tooz
    would accept but fail on at every connection attempt is refused here,
    once, with what to do instead.

    :raises MembershipError: for a backend ringfleet does not support, an
        unusable location (several endpoints, a bad port) or a timeout that
        is not a positive number.
    """
    parsed = check_backend_url(backend_url, member_id)
    query = urllib.parse.parse_qs(parsed.query)
    values = query.get("membership_timeout") or query.get("timeout")
    if not values:
        return _DEFAULT_TTL[parsed.scheme]
    raw = values[-1]
    try:
        ttl = float(raw)
    except ValueError:
        ttl = -1.0
    if not ttl > 0:
        raise MembershipError(
            member_id, "backend_url", f"timeout must be a number > 0, got {raw!r}"
        )
    return ttl


def tooz_url(backend_url: str, ttl: float) -> str:
    """The URL handed to tooz: ``backend_url``, with a request timeout that
    follows the TTL.

    A back end that hangs (a frozen host, a partition that drops packets)
    would otherwise hold the heartbeat until it answers again, past the
    TTL, and the member would say nothing and re-join only that late:

    - tooz's Redis client waits ``timeout`` (default 30 s): unless the URL
      sets them, ``socket_timeout`` and ``socket_connect_timeout`` are a
      quarter of the TTL (the heartbeat period), so a hung call fails and is
      retried within one beat.
    - tooz's etcd driver hands its ``timeout`` option (default 30 s, also the
      default lease TTL) to etcd3gw as every request's timeout: unless the
      URL sets ``timeout``, it is half the TTL (whole seconds, at least 1; an
      etcd leader election, about a second, fits within it), and
      ``membership_timeout`` and ``lock_timeout`` keep the values they had,
      so the lease TTL does not change.  A hung etcd then fails a beat
      within half the TTL and the member says so (one WARNING) before its
      lease runs out.

    And on every back end, unless the URL names one, tooz's ``executor`` is
    ``sync``: the membership waits for each call's answer at once, so
    tooz's default (a thread per member that runs the call) only added a
    thread that woke five times a second, idle, for the whole life of the
    process (:mod:`conductor.common.prompt_stop` shortens futurist's idle
    wait).  The timeouts above bound a call the same way in either.
    """
    parsed = urllib.parse.urlsplit(backend_url)
    query = urllib.parse.parse_qsl(parsed.query, keep_blank_values=True)
    present = {name for name, _ in query}
    if parsed.scheme == "redis":
        timeout = f"{max(0.5, ttl / 4):g}"
        query += [(name, timeout) for name in _REDIS_SOCKET_OPTIONS if name not in present]
    elif parsed.scheme.startswith("etcd3") and "timeout" not in present:
        default = f"{_DEFAULT_TTL[parsed.scheme]:g}"
        query += [(name, default) for name in _ETCD_TIMEOUTS if name not in present]
        query.append(("timeout", str(max(1, math.ceil(ttl / 2)))))
    if "executor" not in present:
        query.append(("executor", "sync"))
    return urllib.parse.urlunsplit(parsed._replace(query=urllib.parse.urlencode(query)))


def check_backend_url(backend_url: str, member_id: str = "-") -> urllib.parse.SplitResult:
    """Refuse a tooz URL that could never work; return it parsed.

    tooz parses the URL only when it connects, and the membership keeps
    reconnecting: a URL naming several etcd endpoints (tooz's etcd driver
    talks to exactly one) would otherwise start and then fail on every
    attempt, forever.

    :raises MembershipError: about ``backend_url``, saying what is wrong.
    """
    parsed = urllib.parse.urlsplit(backend_url)
    if parsed.scheme not in _DEFAULT_TTL:
        raise MembershipError(
            member_id,
            "backend_url",
            f"unsupported scheme {parsed.scheme!r}; use one of {', '.join(sorted(_DEFAULT_TTL))}",
        )
    if parsed.scheme == "file":
        if not parsed.path.strip("/"):
            raise MembershipError(
                member_id, "backend_url", "a file:// URL needs a directory, e.g. file:///var/lib/x"
            )
        return parsed
    redis = parsed.scheme == "redis"
    netloc = parsed.netloc
    if "," in netloc or ";" in netloc or " " in netloc:
        if redis:
            advice = (
                f"names several Redis hosts ({netloc!r}), but tooz connects to one. "
                "For a Sentinel-monitored primary, name one sentinel and the others "
                "as options: redis://S1:26379?sentinel=NAME&sentinel_fallback=S2:26379"
                "&sentinel_fallback=S3:26379"
            )
        else:
            advice = (
                f"names several etcd endpoints ({netloc!r}), but tooz talks to exactly one. "
                "To survive the loss of any etcd member, run 'etcd gateway start "
                "--endpoints=A,B,C --listen-addr=127.0.0.1:PORT' on each host and point "
                "backend_url at it: etcd3+http://127.0.0.1:PORT"
            )
        raise MembershipError(member_id, "backend_url", advice)
    if "@" in netloc and not redis:
        # tooz's etcd driver ignores them: the operator would believe the
        # connection authenticated when it is not.  (Redis uses them.)
        raise MembershipError(
            member_id,
            "backend_url",
            "credentials in the URL are not used by tooz's etcd driver; remove them",
        )
    try:
        port = parsed.port
    except ValueError:
        port = -1
    if port is not None and not 0 < port <= 65535:
        raise MembershipError(
            member_id,
            "backend_url",
            f"bad port in {netloc!r}: must be a number in 1..65535",
        )
    query = urllib.parse.parse_qs(parsed.query)
    for name, values in query.items():
        _check_option(parsed.scheme, name, values[-1], member_id)
    if redis:
        _check_redis(parsed, query, member_id)
    return parsed


def _check_option(scheme: str, name: str, raw: str, member_id: str) -> None:
    """Refuse a timeout tooz would fail to read (int() or float() of it)."""
    if name in _WHOLE_SECONDS[scheme]:
        if not raw.isdigit() or int(raw) == 0:
            raise MembershipError(
                member_id,
                "backend_url",
                f"{name} must be a whole number of seconds > 0, got {raw!r}",
            )
    elif scheme == "redis" and name in (*_REDIS_SOCKET_OPTIONS, "membership_timeout"):
        try:
            seconds = float(raw)
        except ValueError:
            seconds = -1.0
        if not seconds > 0:
            raise MembershipError(
                member_id, "backend_url", f"{name} must be a number of seconds > 0, got {raw!r}"
            )


def _check_redis(
    parsed: urllib.parse.SplitResult, query: dict[str, list[str]], member_id: str
) -> None:
    """A redis:// URL: its client library, its host, its Sentinel options
    (the other sentinels as HOST:PORT)."""
    if importlib.util.find_spec("redis") is None:
        # tooz would fail on every connection attempt, forever.
        raise MembershipError(
            member_id,
            "backend_url",
            "a redis:// URL needs the redis client library, the 'redis' extra: "
            "pip install 'ringfleet[redis]'",
        )
    if not parsed.hostname:
        raise MembershipError(
            member_id, "backend_url", "a redis:// URL needs a host, e.g. redis://127.0.0.1:6379"
        )
    for fallback in query.get("sentinel_fallback", []):
        host, _, port_text = fallback.rpartition(":")
        if not host or not port_text.isdigit() or not 0 < int(port_text) <= 65535:
            raise MembershipError(
                member_id,
                "backend_url",
                f"sentinel_fallback must be HOST:PORT, got {fallback!r}",
            )
    if "sentinel_fallback" in query and "sentinel" not in query:
        raise MembershipError(
            member_id,
            "backend_url",
            "sentinel_fallback needs sentinel=NAME (the primary's name in Sentinel)",
        )


def redacted_url(backend_url: str) -> str:
    """``backend_url`` without its credentials and options, for the log."""
    parsed = urllib.parse.urlsplit(backend_url)
    netloc = parsed.hostname or ""
    if parsed.port:
        netloc = f"{netloc}:{parsed.port}"
    return urllib.parse.urlunsplit((parsed.scheme, netloc, parsed.path, "", ""))
