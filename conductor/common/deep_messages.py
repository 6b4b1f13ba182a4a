# SPDX-License-Identifier: Apache-2.0
"""An error reply, not silence, for an RPC message nested too deeply to decode.

oslo.messaging decodes a message's body (``oslo.message``, JSON in a JSON
envelope) with the recursive ``json`` module before any code of ours runs:
a body nested about 975 levels deep (``sys.getrecursionlimit()`` less the
stack in use) raises ``RecursionError`` there, the message is dropped with a
traceback, and the caller waits out its whole RPC timeout (issue 16).

The only hook before that decode is kombu's, which decodes the envelope:
:func:`install` wraps kombu's JSON decoder so that a body which cannot be
decoded for its depth is replaced by one which can: the same method,
version, reply queue and message ids (read without recursion), no
arguments, and the names of the too-deep fields in the context key
``ringfleet_too_deep``.  The RPC server (:mod:`conductor.common.rpc`) refuses
such a call with :class:`~conductor.common.exception.InvalidInput`, so the
caller gets its answer at once.  Every other message decodes as before.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, Final

import kombu.serialization
from kombu.utils import json as kombu_json

__all__ = ["TOO_DEEP_KEY", "install"]

#: The context key (``_context_`` + it, in the message) naming the fields refused.
TOO_DEEP_KEY: Final = "ringfleet_too_deep"

_BODY: Final = "oslo.message"  # oslo.messaging's envelope key of the body
_CONTENT_TYPE: Final = "application/json"
#: Members of a refused body kept when at most this deep (the reply's routing:
#: method, version, _msg_id, _reply_q, _context_request_id... are scalars).
_KEPT_DEPTH: Final = 4
#: One JSON token that matters for nesting: a whole string (brackets inside it
#: do not count), a bracket, or a separator.
_TOKEN: Final = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{},:]', re.DOTALL)


def install() -> None:
    """Make kombu's JSON decoder (process-wide) replace too-deep bodies (idempotent)."""
    current = kombu.serialization.registry._decoders.get(_CONTENT_TYPE)
    if current is _loads:
        return
    kombu.serialization.register(  # type: ignore[no-untyped-call]
        "json", kombu_json.dumps, _loads, content_type=_CONTENT_TYPE, content_encoding="utf-8"
    )


def _loads(data: Any) -> Any:
    """kombu's JSON decoding, with a too-deep oslo.messaging body replaced."""
    envelope = kombu_json.loads(data)  # type: ignore[no-untyped-call]
    body = envelope.get(_BODY) if isinstance(envelope, dict) else None
    # A body can only be too deep with that many brackets: the common case
    # costs two str.count calls, not a second decode.  Only a call (it has a
    # reply queue) is checked: a cast has nobody waiting for an answer, and a
    # reply -- an agent's 5,000-node inventory page -- is not decoded twice.
    if (
        isinstance(body, str)
        and body.count("[") + body.count("{") > sys.getrecursionlimit() // 2
        and '"_reply_q"' in body
    ):
        try:
            # Decoded here a few frames deeper than oslo.messaging decodes it
            # (inside kombu's decoding): what fails there fails here first.
            json.loads(body)
        except RecursionError:
            envelope[_BODY] = json.dumps(_refused(body))
    return envelope


def _refused(body: str) -> dict[str, Any]:
    """``body``'s shallow members, no arguments, and the names of the too-deep fields."""
    kept: dict[str, Any] = {}
    too_deep: list[str] = []
    for key, raw, depth in _members(body):
        if key == "args":
            too_deep += [name for name, _, arg_depth in _members(raw) if arg_depth > _KEPT_DEPTH]
        elif depth <= _KEPT_DEPTH:
            kept[key] = json.loads(raw)
        elif key.startswith("_context_"):
            too_deep.append("context")
    kept["args"] = {}
    kept[f"_context_{TOO_DEEP_KEY}"] = sorted(set(too_deep)) or ["message"]
    return kept


def _members(text: str) -> list[tuple[str, str, int]]:
    """(key, raw JSON value, its nesting depth) of each member of the JSON object
    ``text``, read without recursion; empty if ``text`` is no object."""
    members: list[tuple[str, str, int]] = []
    depth = deepest = 0
    key: str | None = None
    start = 0
    for match in _TOKEN.finditer(text):
        part = match.group()
        if part in ("[", "{"):
            if depth == 0 and part == "[":
                return []
            depth += 1
            deepest = max(deepest, depth)
        elif part in ("]", "}"):
            depth -= 1
            if depth == 0:  # the object's end
                if key is not None:
                    members.append((key, text[start : match.start()].strip(), deepest - 1))
                return members
        elif depth != 1:
            continue
        elif part == ":":
            start, deepest = match.end(), 1
        elif part == ",":
            if key is not None:
                members.append((key, text[start : match.start()].strip(), deepest - 1))
            key = None
        elif key is None:  # a string at depth 1 before ":" is a key
            key = json.loads(part)
    return members
