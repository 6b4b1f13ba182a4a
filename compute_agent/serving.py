# SPDX-License-Identifier: Apache-2.0
"""Whether this agent can serve: a call to its own RPC topic every few seconds.

An agent's etcd lease proves that the process runs, not that the
conductors can reach it: cut from the broker alone (a firewall, a broken
connection the driver does not notice), it kept its whole ring share while
every build routed to it waited for the sweeper.  :class:`ServingCheck`
calls the agent's own ``ping`` through the broker, the way a conductor's
call travels (published to its topic, consumed by its RPC server, answered
on a reply queue).  When no call has succeeded for longer than the
membership TTL, the agent announces it (capability ``serving`` of its
group entry) and, once its peers had the time to announce theirs, steps
aside from the ring (:meth:`hashring.membership.Membership.step_aside`: its
peers take its share, fenced, as for a dead agent) -- unless no peer
serves either: a broker down for every agent is an outage of the broker,
which moving nodes would not help.  The first call that succeeds again
says it serves, and it takes its share back.  A blip shorter than the TTL
moves nothing.

Each call runs on a thread of its own (one at a time): a call on a cut
connection may block past its timeout, and the judgement must not wait for
it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import oslo_messaging as messaging

from compute_agent.backend_check import BackendCheck
from compute_agent.rpcapi import ComputeAPI
from conductor.common import broker_outage
from conductor.common.exception import first_line
from hashring.membership import Membership

__all__ = ["ServingCheck"]

LOG = logging.getLogger(__name__)

#: Seconds without an answer before an agent cannot serve, whatever the TTL:
#: a loaded broker or host must not move nodes; the tests' TTL is 3 s.
MIN_LIMIT_S = 5.0


class ServingCheck:
    """Calls *ping* every *interval* seconds and keeps the agent's place in
    the ring to what it can serve (see the module docstring)."""

    def __init__(
        self,
        host: str,
        ping: Callable[[float], object],
        membership: Membership,
        *,
        interval: float,
        clock: Callable[[], float] = time.monotonic,
        backend: BackendCheck | None = None,
    ) -> None:
        """*ping* (given its timeout) raises when the call fails; the agent
        cannot serve after ``membership.ttl`` seconds without a success (at
        least :data:`MIN_LIMIT_S`).  *backend*: the check of the agent's
        back end, started and stopped with this one."""
        self._backend = backend
        self._host = host
        self._ping = ping
        self._membership = membership
        self._limit = max(MIN_LIMIT_S, membership.ttl)
        self._interval = interval
        # Time for the peers to find their own calls failing and say so
        # (one interval to fail, one to announce, one read of the group).
        self._grace = 3 * interval
        self._clock = clock
        self._lock = threading.Lock()
        self._judging = threading.Lock()
        self._last_ok = clock()
        self._failing_since: float | None = None
        self._last_error = "no answer yet"
        self._calling = False
        self._said_all_down = False
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def through(
        cls,
        transport: messaging.Transport,
        host: str,
        membership: Membership,
        backend_problem: Callable[[], str | None],
    ) -> ServingCheck:
        """The check of agent *host*: a ``ping`` of its own topic over
        *transport* every TTL/3 s (at least 1 s), and *backend_problem*
        (the driver's) at the same pace."""
        compute = ComputeAPI(transport)
        interval = max(1.0, membership.ttl / 3)
        return cls(
            host,
            lambda timeout: compute.ping(host, timeout=timeout),
            membership,
            interval=interval,
            backend=BackendCheck(host, backend_problem, membership, interval=interval),
        )

    @property
    def serving(self) -> bool:
        """Whether a call to itself answered within the TTL."""
        return self._failing_since is None

    def start(self) -> None:
        self._last_ok = self._clock()  # the server just started serving
        self._thread = threading.Thread(
            target=self._loop, name=f"serving-check-{self._host}", daemon=True
        )
        self._thread.start()
        if self._backend is not None:
            self._backend.start()

    def stop(self, announce: str | None = None) -> None:
        """Stop checking (a stopping agent leaves the group its own way);
        *announce*: what its entry's ``serving`` says meanwhile."""
        self._stopped.set()
        if self._backend is not None:
            self._backend.stop()
        if announce is not None:
            self._membership.announce("serving", announce)
        if self._thread is not None:
            self._thread.join(self._interval + 1.0)

    def _loop(self) -> None:
        while not self._stopped.wait(self._interval):
            self.check()

    def check(self) -> None:
        """Start a call if none is in flight, then judge (one step of the loop)."""
        with self._lock:
            calling, self._calling = self._calling, True
        if not calling:
            threading.Thread(target=self._call, name="serving-ping", daemon=True).start()
        self.judge()

    def _call(self) -> None:
        try:
            self._ping(self._interval)
        except Exception as exc:  # judged: said once, when it matters
            with self._lock:
                self._last_error = first_line(exc)
                self._calling = False
            LOG.debug("Agent %s: a call to itself failed: %s", self._host, self._last_error)
            return
        with self._lock:
            self._last_ok = self._clock()
            self._calling = False
        self.judge()

    def judge(self) -> None:
        """Announce a change, and step aside or back as the peers allow.

        One judgement at a time: the loop and a call that just answered
        both judge, and must not both step back (or aside) on what each saw.
        """
        with self._judging:
            self._judge()

    def _judge(self) -> None:
        if self._stopped.is_set():
            return
        now = self._clock()
        with self._lock:
            silent = now - self._last_ok
            was_failing = self._failing_since is not None
            failing = silent > self._limit
            if failing and not was_failing:
                self._failing_since = now
            elif not failing:
                self._failing_since = None
            since, error = self._failing_since, self._last_error
        if failing != was_failing:
            self._membership.announce("serving", not failing)
        if not failing:
            self._serves_again(was_failing)
        elif self._membership.aside is None and since is not None and now - since >= self._grace:
            self._step_aside(silent, error)

    def _step_aside(self, silent: float, error: str) -> None:
        why = f"no call to itself through the broker answered for {silent:.0f} s ({error})"
        if not self._peers_serve():
            if not self._said_all_down:
                self._said_all_down = True
                LOG.info(
                    "Agent %s cannot serve (%s), nor can any peer: the broker is down for "
                    "all; it keeps its share",
                    self._host,
                    why,
                )
            return
        LOG.log(
            broker_outage.warning_level(),
            "Agent %s cannot serve: %s; it leaves the ring until it can (its nodes go to "
            "its peers)",
            self._host,
            why,
        )
        self._membership.step_aside(why)

    def _serves_again(self, was_failing: bool) -> None:
        self._said_all_down = False
        if self._membership.aside is not None:
            LOG.info("Agent %s serves again: it joins the ring and its share", self._host)
            self._membership.step_back()
        elif was_failing:
            LOG.info("Agent %s serves again", self._host)

    def _peers_serve(self) -> bool:
        """Whether another member of the group says it serves (an agent
        that says nothing, of an older release, or ``stopping`` does not
        count: stepping aside for it could leave the ring empty)."""
        view = self._membership.view
        if view is None:
            return False
        return any(
            member.capabilities.get("serving") is True
            for member_id, member in view.members.items()
            if member_id != self._host
        )
