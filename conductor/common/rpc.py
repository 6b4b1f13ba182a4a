# SPDX-License-Identifier: Apache-2.0
"""RPC plumbing shared by the conductor, the agents and the CLI.

One place builds transports, clients and servers so that every process
agrees on the exchange, the serializer, the access policy and which of our
exceptions are re-raised as themselves on the caller's side (instead of an
opaque ``RemoteError``).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import threading
import time
import uuid
from collections.abc import Callable, Container, Iterator, Sequence
from typing import Any, Final

import oslo_messaging as messaging
from oslo_config import cfg
from oslo_context import context as request_context
from oslo_messaging import opts as messaging_opts
from oslo_messaging._metrics import client as metrics_client
from oslo_messaging._tracing import client as tracing_client
from oslo_messaging.rpc import dispatcher

from conductor.common import broker_outage, checks, deep_messages, prompt_stop, tenancy
from conductor.common.exception import FieldError, InvalidInput, NotUpgraded, RingfleetError
from conductor.common.rpc_executor import QuietThreadPoolExecutor

__all__ = [
    "COMPUTE_TOPIC",
    "CONDUCTOR_TOPIC",
    "NOT_SERVED",
    "CpuObserver",
    "NoConsumer",
    "RpcObserver",
    "call",
    "get_client",
    "get_server",
    "get_transport",
    "observed",
    "outcome_of",
    "outgoing_context",
    "register_opts",
    "size_send_pool",
    "stop_server",
]

LOG = logging.getLogger(__name__)

#: ``RemoteError.exc_type`` of a call the server does not know (an older
#: peer): callers fall back to an older method.
NOT_SERVED = ("UnsupportedVersion", "NoSuchMethod")

CONDUCTOR_TOPIC = "ringfleet-conductor"
COMPUTE_TOPIC = "ringfleet-compute"

#: Modules whose exceptions travel over RPC as themselves (one: both services' exceptions).
ALLOWED_EXMODS = ["conductor.common.exception"]

#: Told of every RPC call made or served: (method, outcome, seconds).
RpcObserver = Callable[[str, str, float], None]

#: Told of every RPC call served: (method, CPU seconds of the thread that served it).
CpuObserver = Callable[[str, float], None]


class NoConsumer(messaging.MessagingTimeout):  # type: ignore[misc]
    """No server has ever consumed the call's topic: the broker returned the call at once.

    A call to a topic without a queue (no server of it has started since the
    broker did) is dropped by the broker, and would only fail after the whole
    RPC timeout: a client made with ``get_client(..., fail_fast=True)`` sends
    it ``mandatory`` and gets this at once.  A :class:`MessagingTimeout`, so
    callers that handle "no answer" handle it alike.
    """

    def __init__(self, topic: str) -> None:
        super().__init__(
            f"no server consumes topic {topic} on this transport (none has started since "
            "the broker did)"
        )
        self.topic = topic


def _ignore(method: str, outcome: str, seconds: float) -> None:
    """The default :data:`RpcObserver`: calls are not measured."""


def _ignore_cpu(method: str, cpu_seconds: float) -> None:
    """The default :data:`CpuObserver`: calls are not measured."""


def outcome_of(exc: BaseException | None) -> str:
    """The ``outcome`` label of a call: a handful of values, never the error text.

    ``refused`` is one of our exceptions (bad input, not the owner, a
    conflict: the caller's business); ``timeout`` is no reply in time;
    ``error`` is anything else.
    """
    if exc is None:
        return "ok"
    if isinstance(exc, messaging.MessagingTimeout):
        return "timeout"
    if isinstance(exc, RingfleetError):
        return "refused"
    return "error"


@contextlib.contextmanager
def observed(observe: RpcObserver, method: str) -> Iterator[None]:
    """Time the block as one call of ``method`` and tell ``observe`` how it ended."""
    start = time.monotonic()
    failure: BaseException | None = None
    try:
        yield
    except BaseException as exc:
        failure = exc
        raise
    finally:
        observe(method, outcome_of(failure), time.monotonic() - start)


def call(client: Any, method: str, observe: RpcObserver | None, **kwargs: Any) -> Any:
    """``client.call`` (a prepared RPC client) with a fresh request id, timed
    by ``observe`` when given: what both RPC API clients do for each call.

    The request id appears in every log line the callee writes for the call
    (see :class:`_ExpectedErrors`).  It is the thread's current request id
    when there is one (an HTTP request of ``ringfleet-api``, or a call a
    conductor serves), so one id follows a request across the services.
    A global request id (``X-OpenStack-Request-ID`` given to
    ``ringfleet-api`` by another service) travels along the same way, and
    so does the caller's project, user and roles when the thread speaks for
    one (a :class:`~conductor.common.tenancy.CallerContext`); without them
    the callee takes the call for the operator's.
    """
    ctxt = outgoing_context()
    if observe is None:
        return _call(client, ctxt, method, kwargs)
    with observed(observe, method):
        return _call(client, ctxt, method, kwargs)


def outgoing_context() -> dict[str, Any]:
    """The RPC context of a call made now by this thread (see :func:`call`)."""
    current = request_context.get_current()
    request_id = _well_formed(getattr(current, "request_id", None)) or f"req-{uuid.uuid4()}"
    ctxt: dict[str, Any] = {"request_id": request_id}
    global_request_id = _well_formed(getattr(current, "global_request_id", None))
    if global_request_id is not None:
        ctxt["global_request_id"] = global_request_id
    if isinstance(current, tenancy.CallerContext):
        ctxt.update(current.tenancy())
    return ctxt


def _call(client: Any, ctxt: dict[str, Any], method: str, kwargs: dict[str, Any]) -> Any:
    try:
        return client.call(ctxt, method, **kwargs)
    except messaging.MessageUndeliverable as exc:
        # Its own message is empty: say what it means.
        raise NoConsumer(client.target.topic) from exc
    except messaging.RPCVersionCapError as exc:
        # A call newer than [upgrade_levels] allows: oslo.messaging's message
        # names versions only; say which call, which option, and what to do.
        raise NotUpgraded(
            field="version",
            value=exc.version,
            reason=(
                f"{method} needs the {client.target.topic} RPC API {exc.version}; "
                f"[upgrade_levels] pins it at {exc.version_cap} while services are "
                "upgraded: finish the upgrade (and lift the pin) first"
            ),
        ) from None


def _well_formed(request_id: object) -> str | None:
    """``request_id`` if it is a request id (``req-...``, short), else None."""
    if isinstance(request_id, str) and request_id.startswith("req-") and len(request_id) < 100:
        return request_id
    return None


def register_opts(conf: cfg.ConfigOpts) -> None:
    """Register oslo.messaging's options (transport_url & co) on ``conf``.

    oslo.messaging registers most of them lazily, but a private ConfigOpts
    also needs the tracing and metrics groups before the first call.
    """
    for group, opts in messaging_opts.list_opts():
        conf.register_opts(opts, group=group)
    # Registered by oslo.messaging on the global CONF only, at import time.
    conf.register_opts(tracing_client.oslo_messaging_tracing, group="oslo_messaging_tracing")
    conf.register_opts(metrics_client.oslo_messaging_metrics, group="oslo_messaging_metrics")


#: Threads of a process that send on their own, besides its RPC executor's
#: (an agent's loops, a conductor's sweeps and build workers' casts).
_OWN_SENDERS = 10


def size_send_pool(conf: cfg.ConfigOpts) -> None:
    """Default ``[oslo_messaging_rabbit] rpc_conn_pool_size`` to what can send at once:
    ``executor_thread_pool_size`` plus :data:`_OWN_SENDERS` (74, not
    oslo.messaging's 30), unless the configuration sets it.

    Every RPC executor thread sends its call's reply through a connection of
    this pool: a conductor serving many agents ran 64 threads on a pool of
    30, so replies queued for a connection (oslo.messaging's "Connection
    pool limit exceeded", seen at 50 agents).  The connections are opened on
    demand and closed after ``conn_pool_ttl`` idle, so a limit that is not
    reached costs nothing.
    """
    conf.set_default(
        "rpc_conn_pool_size",
        conf.executor_thread_pool_size + _OWN_SENDERS,
        group="oslo_messaging_rabbit",
    )


def set_sample_defaults() -> None:
    """The ``oslo.config.opts.defaults`` hook of the ``ringfleet.common``
    namespace: the sample config shows the pool size a process gets with
    ``executor_thread_pool_size`` at its default (:func:`size_send_pool`
    sets it per process, from the value configured)."""
    # Imported here: the sample generator's hook only; a service sets the
    # default on its own ConfigOpts (size_send_pool).
    from oslo_messaging import server  # noqa: PLC0415
    from oslo_messaging._drivers import impl_rabbit  # noqa: PLC0415

    (executor,) = (opt for opt in server._pool_opts if opt.dest == "executor_thread_pool_size")
    cfg.set_defaults(impl_rabbit.rabbit_opts, rpc_conn_pool_size=executor.default + _OWN_SENDERS)


def get_transport(conf: cfg.ConfigOpts) -> messaging.Transport:
    """The RPC transport of ``[DEFAULT] transport_url``; its outages are said
    once each (:mod:`conductor.common.broker_outage`), and its listeners stop
    within about a second (:mod:`conductor.common.prompt_stop`)."""
    register_opts(conf)
    size_send_pool(conf)
    prompt_stop.install(float(conf.oslo_messaging_rabbit.kombu_reconnect_delay))
    url = messaging.TransportURL.parse(conf, conf.transport_url)
    broker_outage.watch(url)
    return messaging.get_rpc_transport(conf, url=url, allowed_remote_exmods=ALLOWED_EXMODS)


#: Seconds a stopping service gives its transport to close its connections.
CLOSE_TIMEOUT = 5.0


class _LateReplies(logging.Filter):
    """oslo.messaging's ERROR and traceback for a reply a call could not send,
    once this process closed its transport, as one WARNING.

    A stop does not wait for a call stuck on a hung back end (the stop's
    steps have deadlines); when that call ends, its reply has no connection
    left.  Its caller times out and retries on the node's next owner: an
    expected end of a stop, to be said once, not as an error.
    """

    def __init__(self) -> None:
        super().__init__()
        self._said = False

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Can not send reply"):
            return True
        if self._said:
            return False
        self._said = True
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.exc_info, record.exc_text = None, None
        record.msg = "A call still running at the stop could not be answered (its caller retries)"
        record.args = ()
        return True


def close_transport(transport: messaging.Transport, timeout: float = CLOSE_TIMEOUT) -> bool:
    """Close *transport*'s connections, giving up after *timeout* s; whether it closed.

    With the broker gone, closing waits on the driver's reconnection and
    never ends: a stopping service leaves it behind (one WARNING) rather
    than miss its stop deadline.  A call still running then cannot reply:
    said once (:class:`_LateReplies`).
    """
    logging.getLogger("oslo_messaging.rpc.server").addFilter(_LateReplies())
    closing = threading.Thread(target=transport.cleanup, name="transport-close", daemon=True)
    closing.start()
    closing.join(timeout)
    if closing.is_alive():
        LOG.warning(
            "Connection to the broker not closed within %.0f s (it is unreachable); left open",
            timeout,
        )
        return False
    return True


def get_client(
    transport: messaging.Transport,
    topic: str,
    *,
    version: str,
    server: str | None = None,
    timeout: float | None = None,
    version_cap: str | None = None,
    fail_fast: bool = False,
) -> messaging.RPCClient:
    """A client of ``topic`` speaking up to ``version``, or ``version_cap`` when pinned.

    ``fail_fast``: a call to a topic no server has consumed raises
    :class:`NoConsumer` at once (RabbitMQ returns it, as ``mandatory``),
    not :class:`MessagingTimeout` after the whole timeout.

    Works on any transport, also one built without :func:`get_transport` on
    a private ``cfg.ConfigOpts()``: its first call would otherwise fail with
    ``NoSuchOptError('oslo_messaging_tracing')`` (oslo.messaging registers
    that group on the global ``CONF`` only).
    """
    # transport.conf proxies the transport's ConfigOpts; registering twice is a no-op.
    register_opts(transport.conf)
    target = messaging.Target(topic=topic, version=version, server=server)
    return messaging.get_rpc_client(
        transport,
        target,
        timeout=timeout,
        version_cap=version_cap,
        transport_options=messaging.TransportOptions(at_least_once=fail_fast),
    )


class _ExpectedErrors:
    """Serves an endpoint with our exceptions marked as expected outcomes.

    A refused payload or a missing node is the caller's business: the server
    logs it at debug level instead of an ERROR with a traceback, and the
    caller still receives the exception itself.  The endpoint objects stay
    plain (their methods raise our exceptions when called directly).

    Each call also runs under the caller's request id (the ``request_id``
    of the RPC context, see :meth:`conductor.rpcapi.ConductorAPI._call`),
    made the thread's current oslo.context, so that every log line of the
    call carries it (oslo.log's ``logging_context_format_string``, and the
    ``context`` of ``use_json`` records), and is timed for ``observe``.
    """

    def __init__(
        self, endpoint: Any, observe: RpcObserver = _ignore, observe_cpu: CpuObserver = _ignore_cpu
    ) -> None:
        self._endpoint = endpoint
        self._observe = observe
        self._observe_cpu = observe_cpu
        self.target = getattr(endpoint, "target", None)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._endpoint, name)
        if name.startswith("_") or not callable(attribute):
            return attribute
        observe, observe_cpu = self._observe, self._observe_cpu
        signature = inspect.signature(attribute)

        def served(ctxt: Any, *args: Any, **kwargs: Any) -> Any:
            # Timed inside expected_exceptions: it re-raises ours wrapped.
            cpu = time.thread_time()
            try:
                with _request_context(ctxt), observed(observe, name):
                    _check_decodable(ctxt)
                    # Arguments the method does not take are the caller's
                    # mistake, not a TypeError (an ERROR with a traceback here).
                    _check_arguments(signature, kwargs)
                    # The one rule for strings (and nesting) of every call.
                    checks.check_text_everywhere(kwargs)
                    return attribute(ctxt, *args, **kwargs)
            finally:
                observe_cpu(name, time.thread_time() - cpu)

        return messaging.expected_exceptions(RingfleetError)(served)


def _check_decodable(ctxt: Any) -> None:
    """Refuse a call whose message was too deep to decode (see :mod:`.deep_messages`)."""
    too_deep = ctxt.get(deep_messages.TOO_DEEP_KEY) if isinstance(ctxt, dict) else None
    if too_deep:
        names = too_deep if isinstance(too_deep, list) else ["message"]
        reason = (
            "is nested too deeply to be decoded "
            f"(arguments may nest at most {checks.MAX_NESTING} levels)"
        )
        raise InvalidInput([FieldError(str(name), reason) for name in names[:20]])


def _check_arguments(signature: inspect.Signature, kwargs: dict[str, Any]) -> None:
    """Refuse keyword arguments the method does not take, or lacks, naming each."""
    parameters = list(signature.parameters.values())[1:]  # after the context
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return
    known = {p.name for p in parameters}
    errors = [
        FieldError(key, "is not an argument of this method") for key in kwargs if key not in known
    ]
    errors += [
        FieldError(p.name, "is required")
        for p in parameters
        if p.default is inspect.Parameter.empty
        and p.kind is not inspect.Parameter.VAR_POSITIONAL
        and p.name not in kwargs
    ]
    if errors:
        errors.sort(key=lambda error: error.field)
        raise InvalidInput(errors)


class _ClientMistakes(logging.Filter):
    """Turns oslo.messaging's ERROR-with-traceback about a caller's mistake into one INFO line.

    An unknown method or an unsupported version is refused by the dispatcher
    before any endpoint runs, and oslo.messaging logs it as "Exception during
    message handling" with a traceback: 2,400 ERROR lines for one barrage of
    bad calls (issue 16).  The caller still receives the error; the operator
    reads one line, ERROR being kept for our own faults.
    """

    _MISTAKES = (dispatcher.NoSuchMethod, dispatcher.UnsupportedVersion)

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, self._MISTAKES):
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.msg, record.args = "RPC call refused: %s: %s", (type(error).__name__, error)
            record.exc_info = record.exc_text = None
        return True


def _quiet_client_mistakes() -> None:
    server_log = logging.getLogger("oslo_messaging.rpc.server")
    if not any(isinstance(f, _ClientMistakes) for f in server_log.filters):
        server_log.addFilter(_ClientMistakes())


class _ApiMethodsOnly(dispatcher.RPCAccessPolicyBase):  # type: ignore[misc]
    """Only the API's methods are callable: functions the endpoint's class defines.

    oslo.messaging's default policy refuses only names starting with ``_``:
    an endpoint's ``target`` attribute was then "callable" over RPC and
    answered a ``TypeError``.  Anything else asked for is ``NoSuchMethod``.
    """

    def is_allowed(self, endpoint: Any, method: str) -> bool:
        if method.startswith("_"):
            return False
        served = getattr(endpoint, "_endpoint", endpoint)  # unwrap _ExpectedErrors
        return inspect.isfunction(getattr(type(served), method, None))


@contextlib.contextmanager
def _request_context(ctxt: Any) -> Iterator[None]:
    """The caller's request id (and global request id, when it sent one) as
    the thread's current logging context, for the block.

    A caller without a (well-formed) request id gets a fresh one: the
    call's lines still belong together.  The thread's previous context is
    put back afterwards, so the id never shows on lines outside the call.
    """
    if not isinstance(ctxt, dict):
        ctxt = {}
    previous = request_context.get_current()
    request_context.RequestContext(
        request_id=_well_formed(ctxt.get("request_id")),
        global_request_id=_well_formed(ctxt.get("global_request_id")),
        overwrite=True,
    )
    try:
        yield
    finally:
        if previous is not None:
            previous.update_store()
        else:
            # oslo.context has no public way to clear the thread's context;
            # this is what its own ClearRequestContext fixture does.
            vars(request_context._request_store).pop("context", None)


def get_server(
    transport: messaging.Transport,
    topic: str,
    server: str,
    endpoints: Sequence[Any],
    *,
    observe: RpcObserver = _ignore,
    observe_cpu: CpuObserver = _ignore_cpu,
) -> messaging.RPCServer:
    """An RPC server (threading executor, idle threads asleep) for ``endpoints``.

    Only the API methods of the endpoints are callable (functions their class
    defines, not starting with ``_``): not an attribute such as ``target``.
    ``observe`` is told of every call served (method, outcome, seconds);
    ``observe_cpu`` of the CPU time each took (its thread's: work it left
    to another thread is not counted).
    """
    target = messaging.Target(topic=topic, server=server)
    _quiet_client_mistakes()
    deep_messages.install()
    rpc_server = messaging.get_rpc_server(
        transport,
        target,
        [_ExpectedErrors(endpoint, observe, observe_cpu) for endpoint in endpoints],
        serializer=messaging.NoOpSerializer(),
        access_policy=_ApiMethodsOnly,
    )
    # The threading executor's class, which start() instantiates: its idle
    # workers sleep instead of polling (rpc_executor's docstring).
    rpc_server._executor_cls = QuietThreadPoolExecutor
    return rpc_server


def stop_server(
    server: messaging.RPCServer, *, left: Callable[[], Container[int]] = frozenset
) -> int:
    """Stop *server* without losing a call sent to it: every call the broker
    delivered is answered, every later one goes to a peer of its topic.
    How many calls it left running: the calls in threads that *left* names
    (inside a request to a hung back end) are not waited for -- their
    callers time out and retry, as after a crash.

    oslo.messaging's ``stop()`` ends the listener's poll but leaves its
    consumers registered until the connection closes, after ``wait()``: the
    broker goes on delivering calls meanwhile, and those that reach the
    closing connection are lost (RabbitMQ, measured: the caller times out).
    So the consumers are cancelled first; a cancel returns once the broker
    confirmed it, after every delivery before it, which the listener
    received and answers before ``stop()`` returns.  Through the driver's
    own ``reset()`` (it cancels every consumer under the connection's
    lock); a driver without it is stopped as before.
    """
    listener = getattr(getattr(server, "listener", None), "_poll_style_listener", None)
    reset = getattr(getattr(listener, "conn", None), "reset", None)
    if callable(reset):
        try:
            reset()
        except Exception as exc:  # the broker is away: nothing more is delivered anyway
            LOG.debug("RPC server's consumers not cancelled: %s", exc)
    server.stop()
    failed: list[Exception] = []

    def wait() -> None:
        try:
            server.wait()
        except Exception as exc:  # raised below, in the stopping thread
            failed.append(exc)

    waiting = threading.Thread(target=wait, name="rpc-server-wait", daemon=True)
    waiting.start()
    while True:
        waiting.join(_RECHECK_LEFT_S)
        if failed:
            raise failed[0]
        if not waiting.is_alive():
            return 0
        busy, leaving = _busy_threads(server), left()
        if busy and all(ident in leaving for ident in busy):
            return len(busy)


#: Seconds between two looks at which calls a stopping server may leave.
_RECHECK_LEFT_S: Final = 0.1


def _busy_threads(server: messaging.RPCServer) -> set[int]:
    """The threads of *server*'s executor running a call now (idents)."""
    workers = getattr(getattr(server, "_work_executor", None), "_workers", ())
    return {
        worker.ident
        for worker in workers
        if worker.ident is not None and worker.is_alive() and not worker.idle
    }
