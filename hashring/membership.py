# SPDX-License-Identifier: Apache-2.0
"""Group membership over tooz: the live member set the ring is computed from.

A :class:`Membership` joins a tooz group (etcd 3 or Redis in production,
``file://`` for the embedded mode and tests), keeps its lease alive, polls the group at
least once a second and hands every changed :class:`MembershipView` to a
callback.  It also answers the one question an agent must ask before every
node action: *am I still certainly a member?*

Connection states, in the manner of kazoo:

``CONNECTED``
    the last heartbeat that reached the backend started less than half the
    TTL ago, and the member was last seen present in the group.
``SUSPENDED``
    no heartbeat has succeeded for more than half the TTL.  The lease may
    still be alive, but peers could see it expire before we notice: stop
    acting on nodes.
``LOST``
    the lease has certainly expired (no heartbeat for a full TTL, e.g. the
    process was paused), the member found itself missing from the group, or
    it was never joined.  Peers may have taken its nodes over; claims must be
    re-validated after the re-join.

The state is computed from a monotonic clock each time it is read, not set
by a background thread, so a process resumed after SIGSTOP sees ``LOST`` on
its very first read, before any thread has had a chance to run.

Why not tooz's own heart and watchers: tooz renews the lease but never
re-joins after it expired (the member silently stays absent), and its
watchers poll ``get_members`` anyway.  We poll
``get_members_with_capabilities`` ourselves, which is one consistent read of
the ids *and* their ring version and weight, so a view never mixes two
moments (the Nova bug 1841481 failure mode) -- on etcd and Redis only when
the group's signature says it changed (:mod:`hashring.group_read`), so that
a quiet group costs each reader one small answer per interval, whatever its
size.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from tooz import coordination

from hashring.backend_client import settle_environment, stop_client
from hashring.backend_outage import BackendOutage
from hashring.backend_url import redacted_url, tooz_url, ttl_from_url
from hashring.exceptions import MembershipError
from hashring.group_read import group_signature, parse_members
from hashring.member_args import checked_arguments
from hashring.view import Member, MembershipView, State

__all__ = [
    "DEFAULT_GROUP",
    "Member",
    "Membership",
    "MembershipView",
    "State",
]

LOG = logging.getLogger(__name__)

DEFAULT_GROUP = "ringfleet-compute"
#: Seconds before a beat the back end failed is tried again (at most the beat interval).
_RETRY_FAILED_BEAT = 0.25


class Membership:
    """Membership of one process in a tooz group.

    :param backend_url: tooz URL, ``etcd3+http://host:2379?membership_timeout=10``,
        ``redis://host:6379?membership_timeout=10`` (``&sentinel=NAME`` through
        a Sentinel) or ``file:///dir?timeout=5``.  The TTL is the URL's
        ``membership_timeout`` (else ``timeout``).
    :param member_id: this process's id in the group (the agent's host).
    :param group: the tooz group name.
    :param ring_version: the ring version this process computes with; peers
        announcing another are excluded from the view, loudly.
    :param weight: this member's ring weight.
    :param capabilities: extra data published with the membership.
    :param on_change: called with every new :class:`MembershipView`, from the
        watcher thread.
    :param on_state_change: called with ``(old, new)`` on every state change,
        from the membership's threads.
    :param watch_interval: seconds between two reads of the group (<= 1).
    :param join: ``False`` to watch the group without joining it (conductors).
    :param clock: monotonic clock, replaceable in unit tests.
    """

    def __init__(
        self,
        backend_url: str,
        member_id: str,
        *,
        group: str = DEFAULT_GROUP,
        ring_version: int = 1,
        weight: float = 1.0,
        capabilities: Mapping[str, Any] | None = None,
        on_change: Callable[[MembershipView], None] | None = None,
        on_state_change: Callable[[State, State], None] | None = None,
        watch_interval: float = 1.0,
        join: bool = True,
        clock: Callable[[], float] = time.monotonic,
        outage: BackendOutage | None = None,
    ) -> None:
        self._weight = checked_arguments(member_id, weight, ring_version)
        self._ttl = ttl_from_url(backend_url, member_id)
        if not 0 < watch_interval <= 1.0:
            raise MembershipError(
                member_id,
                "watch_interval",
                f"must be in (0, 1] s, got {watch_interval!r}",
            )
        if not group:
            raise MembershipError(member_id, "group", "must not be empty")
        self._backend_url = backend_url
        self._member_id = member_id
        self._group = group.encode("utf-8")
        self._ring_version = ring_version
        # Each start of a process is a new incarnation: it tells a stale entry
        # of our own from another live process that claims the same id.
        self._incarnation = uuid.uuid4().hex
        self._capabilities: dict[str, Any] = {
            **(capabilities or {}),
            "host": member_id,
            "ring_version": ring_version,
            "weight": self._weight,
            "incarnation": self._incarnation,
        }
        self._on_change = on_change
        self._on_state_change = on_state_change
        self._watch_interval = watch_interval
        self._join = join
        self._clock = clock
        # A beat every quarter TTL: one failed beat never suspends us.
        self._beat_interval = max(0.1, self._ttl / 4)

        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._wake_keeper = threading.Event()
        self._wake_watcher = threading.Event()
        self._coordinator: Any = None
        self._joined = False
        self._join_generation = 0
        self._last_beat: float | None = None
        self._superseded_by: str | None = None
        self._replaced_earlier = False  # see replaced_earlier_process
        # Why this member stays out of the group though it could be in it
        # (it cannot serve: see step_aside), or None.
        self._aside: str | None = None
        self._beating = False  # a SUSPENDED meanwhile: the outage says it when the beat fails
        self._beat_took = 0.0  # seconds the last beat took
        self._view: MembershipView | None = None
        self._reported_state: State | None = None
        self._excluded_logged: dict[str, str] = {}
        # (group signature, join generation) of the last full read.
        self._read_signature: tuple[object, int] | None = None
        self._threads: list[threading.Thread] = []
        # Shared with another membership on the same backend (a conductor's
        # two groups): one outage, said once; its actions then name the group.
        self._shared_outage = outage is not None
        self._outage = outage or BackendOutage(member_id, redacted_url(self._backend_url))

    def _action(self, name: str) -> str:
        """*name* as the outage knows it (with the group when it is shared)."""
        return f"{name} in group {self._group_name}" if self._shared_outage else name

    # -- public API ------------------------------------------------------

    @property
    def outage(self) -> BackendOutage:
        """This membership's backend outage, to share with another membership."""
        return self._outage

    @property
    def member_id(self) -> str:
        return self._member_id

    @property
    def ttl(self) -> float:
        """The membership TTL in seconds."""
        return self._ttl

    @property
    def incarnation(self) -> str:
        return self._incarnation

    @property
    def view(self) -> MembershipView | None:
        """The latest view of the group, ``None`` before the first read."""
        return self._view

    @property
    def join_generation(self) -> int:
        """How many times this member joined the group (0: never).

        It changes on every re-join, i.e. after every period in which peers
        may have seen this member gone: whoever keeps claims on the strength
        of the membership re-validates them when it changes.
        """
        with self._lock:
            return self._join_generation

    @property
    def replaced_earlier_process(self) -> bool:
        """Whether our first join found, and replaced, the entry of an earlier
        process under our id: a restart within the TTL, which may hold nodes."""
        return self._replaced_earlier

    @property
    def superseded_by(self) -> str | None:
        """Incarnation of another live process that took our member id, if any."""
        return self._superseded_by

    @property
    def state(self) -> State:
        """The current state, computed from the clock at each read."""
        with self._lock:
            last = self._last_beat
            present = self._joined or not self._join
            superseded = self._superseded_by is not None
        if last is None or superseded:
            return State.LOST
        elapsed = self._clock() - last
        if elapsed > self._ttl or not present:
            return State.LOST
        if elapsed > self._ttl / 2:
            return State.SUSPENDED
        return State.CONNECTED

    @property
    def backend_failing(self) -> bool:
        """Whether the backend fails now, and this member said so (one WARNING
        naming it, when the failures started)."""
        return self._outage.ongoing

    @property
    def aside(self) -> str | None:
        """Why this member stepped aside (left the group while it cannot
        serve), or None."""
        return self._aside

    def step_aside(self, why: str) -> None:
        """Leave the group while this process cannot serve, though it is alive.

        Its peers see it leave and take its share over as for a member that
        died (fenced); it keeps its connection and heartbeat, is ``LOST``
        meanwhile (no node action), and joins again on :meth:`step_back`.
        """
        with self._lock:
            if self._aside is not None or not self._join:
                return
            self._aside = why
        self._wake_keeper.set()

    def announce(self, name: str, value: Any) -> bool:
        """Set capability *name* of this member's entry (peers see it at their
        next read; a later join carries it); whether the entry took it now."""
        with self._lock:
            self._capabilities[name] = value
            coordinator = self._coordinator if self._joined else None
        if coordinator is None:
            return False
        try:
            coordinator.update_capabilities(self._group, dict(self._capabilities)).get()
        except Exception as exc:  # the backend is away: the next join carries it
            LOG.debug("Member %s: capability %s not announced: %s", self._member_id, name, exc)
            return False
        self._wake_watcher.set()
        return True

    def step_back(self) -> None:
        """Join the group again after :meth:`step_aside` (a new join generation)."""
        with self._lock:
            if self._aside is None:
                return
            self._aside = None
        self._wake_keeper.set()

    def read_soon(self) -> None:
        """Read the group now, not at the next watch interval (a peer saw a
        member leave that our view still has)."""
        self._wake_watcher.set()

    def can_act(self) -> bool:
        """Whether node actions are safe now (the state is ``CONNECTED``)."""
        return self.state is State.CONNECTED

    def start(self) -> None:
        """Start the keeper and watcher threads; they connect and join.

        Returns at once: the backend may be down at start, the threads keep
        trying.  Use :meth:`wait_connected` to wait for the first join.
        """
        if self._threads:
            raise MembershipError(self._member_id, None, "already started")
        self._stopping.clear()
        for name, target in (
            ("keeper", self._keeper_loop),
            ("watcher", self._watch_loop),
        ):
            thread = threading.Thread(
                target=target, name=f"membership-{name}-{self._member_id}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def wait_connected(self, timeout: float) -> bool:
        """Wait until ``CONNECTED`` and a first view exists; False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.state is State.CONNECTED and self._view is not None:
                return True
            self._stopping.wait(0.05)
        return False

    def stop(self, leave: bool = True) -> None:
        """Stop the threads and, when ``leave``, leave the group at once.

        Not leaving lets the entry expire after the TTL, as if we crashed.
        """
        self._stopping.set()
        self._wake_keeper.set()
        self._wake_watcher.set()
        for thread in self._threads:
            thread.join(timeout=max(5.0, self._ttl))
        self._threads = []
        with self._lock:
            coordinator, self._coordinator = self._coordinator, None
            was_joined, self._joined = self._joined, False
        if coordinator is None:
            return
        if leave and was_joined:
            try:
                coordinator.leave_group(self._group).get()
                LOG.info("Member %s left group %s", self._member_id, self._group_name)
            except coordination.ToozError as exc:
                LOG.warning(
                    "Member %s could not leave group %s: %s",
                    self._member_id,
                    self._group_name,
                    exc,
                )
        stop_client(coordinator, leave=leave)
        self._report_state()

    # -- keeper: connect, join, heartbeat, re-join -----------------------

    @property
    def _group_name(self) -> str:
        return self._group.decode("utf-8")

    def _keeper_loop(self) -> None:
        while not self._stopping.is_set():
            wait = self._beat_interval
            try:
                if not self._keep_once():
                    # A beat that timed out took TTL/2 already: a whole
                    # interval more left too little of the TTL for the next
                    # (LOST while an etcd cluster elected a leader).
                    wait = min(self._beat_interval, _RETRY_FAILED_BEAT)
                elif self._beat_took > self._beat_interval:
                    wait = 0.0  # a slow beat (sent in a freeze) is old: beat again now
            except Exception:  # a thread boundary: log, and try again
                LOG.exception("Membership keeper of %s failed", self._member_id)
            self._report_state()
            self._wake_keeper.wait(wait)
            self._wake_keeper.clear()

    def _keep_once(self) -> bool:
        """Connect, beat, (re-)join as needed; False if the back end failed."""
        if self._coordinator is None:
            try:
                self._connect()
            except Exception as exc:  # etcd3gw's own errors too: the backend is away
                self._outage.failed(self._action("connecting"), exc)
                return False
            self._outage.succeeded(self._action("connecting"))
        started = self._clock()
        previous, self._beat_took = self._last_beat, 0.0
        self._beating = True
        try:
            self._coordinator.heartbeat()
            self._beat_took = self._clock() - started
        except Exception as exc:  # etcd3gw raises its own, untranslated errors
            self._outage.failed(self._action("heartbeat"), exc)
            return False
        finally:
            self._beating = False
        # The outage said the gap already (one WARNING): the re-join is its end.
        said = self._outage.ongoing
        self._outage.succeeded(self._action("heartbeat"))
        if previous is not None and started - previous > self._ttl:
            # Our lease has certainly expired meanwhile (tooz just made a new
            # one): we are no longer in the group until we join again.
            LOG.log(
                logging.INFO if said else logging.WARNING,
                "Member %s went %.1f s without a heartbeat (TTL %.1f s); re-joining",
                self._member_id,
                started - previous,
                self._ttl,
            )
            with self._lock:
                self._joined = False
            # Say LOST before re-joining: callers must see the gap (and
            # re-validate what they hold), even though the re-join follows
            # within this very call.
            self._report_state()
        joined = True
        if self._aside is not None:
            self._stay_aside()
        elif self._join and not self._joined:
            if self._superseded_by is not None:
                return True
            try:
                self._join_group()
            except Exception as exc:  # etcd3gw's own errors too, as the heartbeat's
                # Mostly "Not Found": the lease just renewed expired before the
                # join used it (a process starved of CPU past its TTL).  The next
                # beat makes a new one; said once, not a traceback per try.
                self._outage.failed(self._action("joining"), exc)
                joined = False
            else:
                self._outage.succeeded(self._action("joining"))
        with self._lock:
            self._last_beat = started
        return joined

    def _stay_aside(self) -> None:
        """Out of the group while stepped aside: leave it once (said once)."""
        if not self._joined:
            return
        with contextlib.suppress(coordination.MemberNotJoined):
            self._coordinator.leave_group(self._group).get()
        with self._lock:
            self._joined = False
        LOG.info(
            "Member %s left group %s while it cannot serve: %s",
            self._member_id,
            self._group_name,
            self._aside,
        )
        self._wake_watcher.set()

    def _connect(self) -> None:
        coordinator = coordination.get_coordinator(
            tooz_url(self._backend_url, self._ttl), self._member_id.encode("utf-8")
        )
        coordinator.start(start_heart=False)
        settle_environment(coordinator)
        with contextlib.suppress(coordination.GroupAlreadyExist):
            coordinator.create_group(self._group).get()
        with self._lock:
            self._coordinator = coordinator
        self._wake_watcher.set()
        LOG.info(
            "Member %s connected to %s (TTL %.1f s)",
            self._member_id,
            redacted_url(self._backend_url),
            self._ttl,
        )

    def _join_group(self) -> None:
        coordinator = self._coordinator
        try:
            coordinator.join_group(self._group, self._capabilities).get()
        except coordination.MemberAlreadyExist:
            existing = self._entry_incarnation()
            if self._join_generation > 0 and existing not in (None, self._incarnation):
                # Re-joining, we find another live process in our place: it
                # took our id while our entry was away (its join replaces the
                # entry: leave, then join), so it is the newer one and wins.
                # Replacing it back would make both processes stop.
                with self._lock:
                    self._superseded_by = str(existing)
                LOG.error(
                    "Member %s was taken over by another process (incarnation %s, ours %s) "
                    "while re-joining: this process will perform no node action",
                    self._member_id,
                    existing,
                    self._incarnation,
                )
                return
            # A fast restart finds its previous incarnation's entry (its lease
            # has not expired yet): replace it.
            LOG.warning(
                "Member %s already in group %s (incarnation %s); replacing it with incarnation %s",
                self._member_id,
                self._group_name,
                existing,
                self._incarnation,
            )
            with contextlib.suppress(coordination.MemberNotJoined):
                coordinator.leave_group(self._group).get()
            coordinator.join_group(self._group, self._capabilities).get()
            self._replaced_earlier |= self._join_generation == 0 and existing != self._incarnation
        except coordination.GroupNotCreated:
            with contextlib.suppress(coordination.GroupAlreadyExist):
                coordinator.create_group(self._group).get()
            coordinator.join_group(self._group, self._capabilities).get()
        with self._lock:
            self._joined = True
            self._join_generation += 1
        self._wake_watcher.set()  # publish a view with us in it right away
        LOG.info(
            "Member %s joined group %s (ring version %d, weight %g)",
            self._member_id,
            self._group_name,
            self._ring_version,
            self._weight,
        )

    def _entry_incarnation(self) -> str | None:
        try:
            caps = self._coordinator.get_member_capabilities(
                self._group, self._member_id.encode("utf-8")
            ).get()
        except coordination.ToozError:
            return None
        return caps.get("incarnation") if isinstance(caps, dict) else None

    # -- watcher: read the group, detect our absence, report changes ------

    def _watch_loop(self) -> None:
        while not self._stopping.is_set():
            if self._coordinator is not None:
                reading = f"reading group {self._group_name}"
                try:
                    self._watch_once()
                except Exception as exc:  # a thread boundary: log, and try again
                    self._outage.failed(reading, exc)
                else:
                    self._outage.succeeded(reading)
            self._report_state()
            self._wake_watcher.wait(self._watch_interval)
            self._wake_watcher.clear()

    def _watch_once(self) -> None:
        with self._lock:
            generation = self._join_generation
            coordinator = self._coordinator
        if coordinator is None:
            return
        # Taken before the full read: a change made during it shows next time.
        signature = group_signature(coordinator, self._group)
        if signature is not None and (signature, generation) == self._read_signature:
            return  # the group has not changed since the last full read
        try:
            raw = coordinator.get_members_with_capabilities(self._group).get()
        except coordination.GroupNotCreated:
            if not self._join:
                raise  # an outage of the group for a watcher, until a member creates it
            self._group_gone(generation)
            return
        members, excluded = parse_members(raw, self._ring_version)
        self._check_self(raw, generation)
        self._read_signature = None if signature is None else (signature, generation)
        if self._join and self._member_id not in members:
            # A view without us is never published.  It is read while we are
            # joining (at start, or re-joining after the lease expired while
            # the backend was away) or it sees our lease gone: either way the
            # join follows within a beat, and an agent acting on this view
            # would release every unpinned node it owns only to claim them
            # back a moment later (agent -> none -> agent).
            LOG.debug(
                "Member %s: view of group %s without this member not published (joining)",
                self._member_id,
                self._group_name,
            )
            return
        self._log_exclusions(excluded)
        view = MembershipView(
            members=MappingProxyType(members),
            excluded=MappingProxyType(excluded),
            ring_version=self._ring_version,
        )
        previous = self._view
        if (
            previous is None
            or dict(previous.members) != members
            or dict(previous.excluded) != excluded
        ):
            self._view = view
            if previous is not None:
                LOG.info(
                    "Group %s seen by %s: %d members (+%s, -%s), %d excluded",
                    self._group_name,
                    self._member_id,
                    len(members),
                    sorted(members.keys() - previous.members.keys()) or "none",
                    sorted(previous.members.keys() - members.keys()) or "none",
                    len(excluded),
                )
            if self._on_change is not None:
                try:
                    self._on_change(view)
                except Exception:  # the callback's bug must not stop the watch
                    LOG.exception("Membership change callback of %s failed", self._member_id)

    def _group_gone(self, generation: int) -> None:
        """The group itself is gone (a Redis restarted without its data, or a
        failover to a replica that never received it): we are not in it any
        more, whatever our heartbeats say.  The re-join creates it again."""
        with self._lock:
            if not self._joined or generation != self._join_generation:
                return  # a join is under way, or happened during our read
            self._rejoin(
                "Group %s is gone from %s (backend restarted without its data?); %s re-joining",
                self._group_name,
                redacted_url(self._backend_url),
                self._member_id,
            )

    def _rejoin(self, message: str, *args: object) -> None:
        """We are not in the group (under the lock): say why once (INFO when
        a back-end outage just said it: our lease expired during it), and
        have the keeper join again at once."""
        LOG.log(
            logging.INFO if self._outage.said_within(self._ttl) else logging.WARNING,
            message,
            *args,
        )
        self._joined = False
        self._wake_keeper.set()

    def _check_self(self, raw: Mapping[bytes, Any], generation: int) -> None:
        if not self._join:
            return
        entry = raw.get(self._member_id.encode("utf-8"))
        with self._lock:
            if not self._joined or generation != self._join_generation:
                return  # a join is under way, or happened during our read
            if entry is None:
                self._rejoin(
                    "Member %s is missing from group %s (lease expired?); re-joining",
                    self._member_id,
                    self._group_name,
                )
                return
            incarnation = entry.get("incarnation") if isinstance(entry, dict) else None
            if incarnation != self._incarnation and self._superseded_by is None:
                # Another live process joined with our id: it wins, we stop
                # acting for good rather than take turns evicting each other.
                self._superseded_by = str(incarnation)
                LOG.error(
                    "Member %s was taken over by another process (incarnation %s, "
                    "ours %s): this process will perform no node action",
                    self._member_id,
                    incarnation,
                    self._incarnation,
                )

    def _log_exclusions(self, excluded: Mapping[str, str]) -> None:
        for member_id, reason in excluded.items():
            if self._excluded_logged.get(member_id) != reason:
                LOG.error(
                    "Member %s is excluded from the ring of %s: %s",
                    member_id,
                    self._member_id,
                    reason,
                )
        self._excluded_logged = dict(excluded)

    def _report_state(self) -> None:
        with self._lock:  # read and swapped together: no stale state last
            state = self.state
            old, self._reported_state = self._reported_state, state
        if old is state or old is None:
            return
        # A WARNING only for a change nothing else said: a back-end outage said its
        # own (also of a TTL after it), stepping aside and stopping are chosen.
        deliberate = (
            state is State.CONNECTED
            or self._stopping.is_set()
            or self._aside is not None
            or self._outage.said_within(self._ttl)
            or (state is State.SUSPENDED and self._beating)
        )
        log = LOG.info if deliberate else LOG.warning
        log(
            "Membership of %s in group %s: %s -> %s",
            self._member_id,
            self._group_name,
            old.value if old else "new",
            state.value,
        )
        if self._on_state_change is not None:
            try:
                self._on_state_change(old, state)
            except Exception:  # the callback's bug must not stop the keeper
                LOG.exception("Membership state callback of %s failed", self._member_id)
