# SPDX-License-Identifier: Apache-2.0
"""Reading a group from the coordination backend: its members, and whether it changed.

Every member (agent or conductor) reads its group every ``watch_interval``.
A full read returns every member's capabilities, which each reader decodes:
with 100 members, about 2 ms of CPU per read, per process, every interval,
although the group almost never changes.  etcd can say whether it changed
for the price of one key: a range read of the group's keys sorted by
modification revision, limited to one, returns how many keys there are and
the newest modification.  Any change moves one of the two -- a join or an
announcement writes a key (revisions only grow), a leave or an expired lease
only deletes (the count drops) -- so an unchanged pair means an unchanged
group, and the full read is skipped.

Redis keeps no revision, and a member's lease is a key of its own (tooz
drops an entry whose heartbeat key expired when the group is next read in
full), so there the signature is computed by the server, in one Lua script:
a digest of every entry and of whether its heartbeat key is still there.
The server does the work of a full read; the reader gets 40 hex digits,
whatever the group's size.  The file backend (the embedded mode: a few
members on one host) has neither, and is read in full every time.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from hashring.exceptions import InvalidMemberError
from hashring.ring import _validate_member_id, _validate_weight
from hashring.view import Member

__all__ = ["group_signature", "parse_members"]

#: etcd's RangeRequest enums: sort_order DESCEND, sort_target MOD.
_DESCEND, _BY_MOD_REVISION = 2, 3

#: A Redis group's signature (KEYS[1]: the group's hash; ARGV[1]: the prefix
#: of the members' heartbeat keys; ARGV[2]: tooz's "group exists" field).
#: Sorted: a large hash's order may change as Redis rehashes it.  Lengths
#: before values: capabilities are binary (msgpack).  No group: nil, and the
#: full read says GroupNotCreated as before.  ``redis.sha1hex`` is Redis's
#: own; a server without it (fakeredis, in the unit tests) returns the text.
_REDIS_SIGNATURE = """
local entries = redis.call("hgetall", KEYS[1])
if #entries == 0 then
  return false
end
local parts = {}
for i = 1, #entries, 2 do
  local member, caps = entries[i], entries[i + 1]
  if member ~= ARGV[2] then
    local alive = redis.call("exists", ARGV[1] .. member)
    parts[#parts + 1] = #member .. ":" .. member .. #caps .. ":" .. caps .. alive
  end
end
table.sort(parts)
local text = table.concat(parts)
if redis.sha1hex then
  return redis.sha1hex(text)
end
return text
"""
_REDIS_SIGNATURE_SHA1 = hashlib.sha1(_REDIS_SIGNATURE.encode(), usedforsecurity=False).hexdigest()


def parse_members(
    raw: Mapping[bytes, Any], ring_version: int
) -> tuple[dict[str, Member], dict[str, str]]:
    """The members of a full read, and those excluded from the ring (id -> why)."""
    members: dict[str, Member] = {}
    excluded: dict[str, str] = {}
    for raw_id, caps in raw.items():
        member_id = raw_id.decode("utf-8", "replace")
        member, reason = _parse_member(member_id, caps, ring_version)
        if reason is None:
            members[member_id] = member
        else:
            excluded[member_id] = reason
    return members, excluded


def _parse_member(member_id: str, caps: Any, ring_version: int) -> tuple[Member, str | None]:
    caps = caps if isinstance(caps, dict) else {}
    version = caps.get("ring_version")
    weight = caps.get("weight", 1.0)
    member = Member(
        member_id,
        version if isinstance(version, int) else None,
        weight if isinstance(weight, (int, float)) else None,
        MappingProxyType(caps),
    )
    if version != ring_version:
        return member, f"ring version {version!r}, expected {ring_version}"
    try:
        _validate_member_id(member_id)
        _validate_weight(member_id, weight)
    except InvalidMemberError as exc:
        return member, exc.reason
    return member, None


def group_signature(coordinator: Any, group: bytes) -> object | None:
    """What changes whenever the group's members, capabilities or leases do
    (compare two with ``==``), or None for a backend that cannot tell (read
    the group in full then).

    :raises Exception: what the backend's client raises (the read failed)
    """
    # The driver's module, not an isinstance: tooz loads a driver (and its
    # client library) only for a URL of its scheme.
    driver = type(coordinator).__module__
    if driver == "tooz.drivers.etcd3gw":
        return _etcd_signature(coordinator, group)
    if driver == "tooz.drivers.redis":
        return _redis_signature(coordinator, group)
    return None


def _etcd_signature(coordinator: Any, group: bytes) -> tuple[int, int]:
    """(keys under the group, newest modification revision)."""
    prefix = b"%s%s/" % (coordinator.GROUP_PREFIX, group)
    client = coordinator.client
    answer = client.post(
        client.get_url("/kv/range"),
        json={
            "key": _b64(prefix),
            "range_end": _b64(_prefix_end(prefix)),
            "keys_only": True,
            "limit": 1,
            "sort_order": _DESCEND,
            "sort_target": _BY_MOD_REVISION,
        },
    )
    # proto3's JSON leaves zeroes out: no "count" and no "kvs" for no key.
    newest = answer.get("kvs") or [{}]
    return int(answer.get("count", 0)), int(newest[0].get("mod_revision", 0))


def _redis_signature(coordinator: Any, group: bytes) -> bytes | None:
    """The server's digest of the group's entries and leases (None: no group)."""
    client = coordinator._client
    if client is None:  # stopped meanwhile: the full read says so
        return None
    keys = [coordinator._encode_group_id(group)]
    args = [coordinator._encode_beat_id(b""), coordinator.GROUP_EXISTS]
    # Loaded with the driver already: a Redis URL is in use.
    from redis.exceptions import NoScriptError  # noqa: PLC0415

    try:
        # By its digest: the script's text goes to the server once (again
        # after a restart, which empties the server's script cache).
        answer = client.evalsha(_REDIS_SIGNATURE_SHA1, len(keys), *keys, *args)
    except NoScriptError:
        answer = client.eval(_REDIS_SIGNATURE, len(keys), *keys, *args)
    return None if answer is None else bytes(answer)


def _prefix_end(prefix: bytes) -> bytes:
    """The first key after every key that starts with *prefix* (etcd's range_end)."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
