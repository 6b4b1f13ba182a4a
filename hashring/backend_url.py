"""Which coordination back ends ringfleet accepts, and what their URLs configure.

tooz parses a back end's URL only when it connects, and the membership keeps
reconnecting: a URL it could never use would start and then fail on every
attempt, forever.  These checks refuse such a URL once, at start, saying
what to do instead, and read the membership TTL it configures.
"""

from __future__ import annotations

import urllib.parse

from hashring.exceptions import MembershipError

__all__ = ["check_backend_url", "ttl_from_url"]

#: tooz's own defaults when the URL names no timeout.
_DEFAULT_TTL = {"etcd3+http": 30.0, "etcd3+https": 30.0, "file": 10.0}


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
    netloc = parsed.netloc
    if "," in netloc or ";" in netloc or " " in netloc:
        raise MembershipError(
            member_id,
            "backend_url",
            f"names several etcd endpoints ({netloc!r}), but tooz talks to exactly one. "
            "To survive the loss of any etcd member, run 'etcd gateway start "
            "--endpoints=A,B,C --listen-addr=127.0.0.1:PORT' on each host and point "
            "backend_url at it: etcd3+http://127.0.0.1:PORT",
        )
    if "@" in netloc:
        # tooz's etcd driver ignores them: the operator would believe the
        # connection authenticated when it is not.
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
    for name, values in urllib.parse.parse_qs(parsed.query).items():
        # The etcd driver reads these with int(): "2.5" would fail at connect.
        if name in ("timeout", "membership_timeout", "lock_timeout"):
            raw = values[-1]
            if not raw.isdigit() or int(raw) == 0:
                raise MembershipError(
                    member_id,
                    "backend_url",
                    f"{name} must be a whole number of seconds > 0, got {raw!r}",
                )
    return parsed
