# SPDX-License-Identifier: Apache-2.0
"""What the membership adjusts on a back end's client: once it is connected, and to stop it.

etcd3gw sends every request (a heartbeat, a group read, a signature read)
through a ``requests`` session, and ``requests`` re-reads the process
environment for proxies (``*_proxy``), ``.netrc`` and a CA bundle at every request: two
walks over ``os.environ`` per request, about 30 % of the CPU of a small
request, paid once a second by every member of a fleet for its whole life.
The environment does not change under a running service, so it is read
once, at connect, with the answer ``requests`` itself would give, and the
session then stops asking.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import requests

__all__ = ["settle_environment", "stop_client"]


def settle_environment(coordinator: Any) -> None:
    """Resolve, once, what the etcd client's session would read from the
    environment at every request (proxies for its URL, ``.netrc``, a CA bundle); other
    back ends' clients are left as they are."""
    if type(coordinator).__module__ != "tooz.drivers.etcd3gw":
        return
    client = coordinator.client
    session: requests.Session = client.session
    if not session.trust_env:
        return
    url = client.get_url("/")
    session.proxies = {**requests.utils.get_environ_proxies(url), **session.proxies}
    if session.auth is None:
        session.auth = requests.utils.get_netrc_auth(url)
    if session.verify is True:
        # requests' own order for a session that verifies with its default.
        bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
        if bundle:
            session.verify = bundle
    session.trust_env = False


def stop_client(coordinator: Any, *, leave: bool) -> None:
    """Stop ``coordinator``, errors ignored; without ``leave`` its group
    entries stay until their lease expires, as after a crash."""
    redis_client = None
    if not leave:
        # tooz's stop() leaves every joined group; forget them so that the
        # entry stays until its lease expires, as after a crash.
        coordinator._joined_groups.clear()
        # Its Redis driver also deletes the member's heartbeat key on
        # stop, which peers read as "gone" at once: a restart's hold (or
        # a crash, in the demo) would end before its TTL.  Without its
        # client the driver skips that; the client is closed here.
        if type(coordinator).__module__ == "tooz.drivers.redis":
            redis_client, coordinator._client = coordinator._client, None
    with contextlib.suppress(Exception):
        coordinator.stop()
    if redis_client is not None:
        with contextlib.suppress(Exception):
            redis_client.close()
