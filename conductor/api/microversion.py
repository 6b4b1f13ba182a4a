# SPDX-License-Identifier: Apache-2.0
"""API microversions, in the OpenStack manner.

A client asks for a version with ``OpenStack-API-Version: baremetal-fleet
1.0`` (the header may list several services, comma-separated; others are
ignored) or ``latest``; without the header it gets :data:`MIN_VERSION`.
Every answer carries the version served in the same header, and
``Vary: OpenStack-API-Version``.  A malformed value is 400, a version
outside :data:`MIN_VERSION`..:data:`MAX_VERSION` is 406.

History (a new microversion adds a line, bumps :data:`MAX_VERSION`, and
the routes or fields it adds name it as their ``min_version``):

* 1.0 - Initial version: nodes, flavors, instances, fleet, agents' drain.
* 1.1 - Images and config drives: ``POST /v1/instances`` takes ``image``,
  ``user_data``, ``meta_data`` and ``network_data``; ``POST /v1/flavors``
  takes ``default_image``.  Under 1.0 a body with any of them is refused
  (400 naming the field).
* 1.2 - Tenancy: instances show ``project_id`` and ``user_id``;
  ``GET /v1/instances`` takes ``all_projects`` and ``project_id`` (admins);
  quotas: ``GET /v1/quotas``, ``GET``/``PUT``/``DELETE
  /v1/quotas/{project_id}``.  (Every version scopes instances to the
  caller's project, and refuses a build over a quota, 403.)
* 1.3 - Power and lifecycle verbs: ``POST /v1/instances/{id}/action``
  (``reboot``, ``os-stop``, ``os-start``, ``rebuild`` with the instance's
  own image), ``PUT /v1/nodes/{id}/states/power`` and
  ``DELETE /v1/nodes/{id}`` (admin).
* 1.4 - Rebuild with a new image and/or config drive: ``{"rebuild":
  {"image": {...}, "user_data": "...", "meta_data": {...},
  "network_data": {...}}}``, each optional and checked as a build's; each
  given replaces the stored one, the others are kept.  Under 1.4 a rebuild
  with any of them is refused (400 naming the field).
* 1.5 - Flavors' extra specs of any namespace: ``POST /v1/flavors`` keeps
  keys other than ``capabilities:<key>`` and ``trait:<TRAIT>`` (an
  operator's ``mycompany:racks``, Nova's unscoped ``boot_mode``) for Nova
  filters.  Under 1.5 such a key is refused (400 naming it), as before.
* 1.6 - ``POST /v1/nodes/import`` takes ``every_clash``: a clash with the
  stored nodes is a 400 naming every clashing entry (as ``dry_run``), not
  a 409 on the first, so that a file is checked and imported in one request.
* 1.7 - ``user_data`` is base64-encoded, as in Nova's API (in builds and
  rebuilds): the server decodes it; not base64, longer than 65,535
  characters encoded, or not UTF-8 once decoded is a 400 naming
  ``user_data``.  Below 1.7 it is the raw text, as before.
* 1.8 - Key pairs (Nova's ``os-keypairs``): ``GET``/``POST /v1/keypairs``,
  ``GET``/``DELETE /v1/keypairs/{keypair}``, the caller's user's own; a
  build takes ``key_name`` (its public key into meta_data ``public_keys``)
  and instances show ``key_name``.
* 1.9 - Instance metadata and tags (Nova's server metadata and server tags):
  ``GET``/``PUT``/``POST /v1/instances/{id}/metadata``,
  ``GET``/``PUT``/``DELETE /v1/instances/{id}/metadata/{key}``,
  ``GET``/``PUT``/``DELETE /v1/instances/{id}/tags``,
  ``GET``/``PUT``/``DELETE /v1/instances/{id}/tags/{tag}``; a build takes
  ``metadata`` and ``tags``; instances show ``metadata`` and ``tags``.
* 1.10 - Nova's listing habits: instances show Nova's ``status`` (ACTIVE,
  BUILD, SHUTOFF, REBOOT, HARD_REBOOT, REBUILD, ERROR, DELETED) beside
  ``vm_state`` and ``addresses`` from their network data;
  ``GET /v1/instances`` takes ``name`` (a regular expression),
  ``status``, ``changes-since`` (deleted instances included) and
  ``sort_key``/``sort_dir``.
* 1.11 - ``GET /v1/limits``: the caller's project's limits and usage in
  Nova's ``/limits`` shape (``tenant_id``: another project's, admins).
* 1.12 - Instance action history (Nova's ``os-instance-actions``):
  ``GET /v1/instances/{id}/actions`` and
  ``GET /v1/instances/{id}/actions/{request_id}``.
* 1.13 - Nova's habits, the rest: the ``key_pairs`` quota (per user, as
  Nova's) in the quota routes (shown, set) and in ``/v1/limits``
  (``maxTotalKeypairs``, ``totalKeyPairsUsed``); a rebuild's ``key_name``
  (Nova's 2.54: a new key pair, or null for none); the instance list's tag
  filters ``tags``, ``tags-any``, ``not-tags``, ``not-tags-any`` (Nova's
  2.26); the action history's ``limit``, ``marker``, ``changes-since`` and
  ``changes-before`` (Nova's 2.58 and 2.66), with a ``next`` link.
* 1.14 - Nova's answers to markers and its key pair habits: a list's
  ``marker`` that is not in the list (an instance list sorted by
  ``sort_key``, an action history) is a 400 naming ``marker``, as Nova's
  (404 below 1.14); ``GET /v1/keypairs`` takes ``limit`` and ``marker``
  (Nova's 2.35) and, for admins, ``user_id`` (Nova's 2.10), as do ``GET``
  and ``DELETE /v1/keypairs/{keypair}`` and a creation's ``keypair.user_id``;
  ``GET /v1/limits`` shows ``maxServerMeta`` (Nova's: the metadata items an
  instance may have, 128).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

__all__ = [
    "ANY_EXTRA_SPECS",
    "EVERY_CLASH",
    "HEADER",
    "IMAGES",
    "INSTANCE_ACTIONS",
    "KEY_PAIRS",
    "LABELS",
    "LIMITS",
    "MAX_VERSION",
    "MIN_VERSION",
    "NOVA_ANSWERS",
    "NOVA_HABITS",
    "NOVA_LISTING",
    "REBUILD_IMAGE",
    "SERVICE_TYPE",
    "TENANCY",
    "USER_DATA_BASE64",
    "VERBS_VERSION",
    "BadVersion",
    "UnsupportedVersion",
    "Version",
    "requested",
]

#: The service type named in the header.
SERVICE_TYPE = "baremetal-fleet"
HEADER = "OpenStack-API-Version"

_VERSION = re.compile(r"^(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})$")


class BadVersion(ValueError):
    """The header's value for our service is not a version (400)."""


class UnsupportedVersion(ValueError):
    """A well-formed version this service does not serve (406)."""


@total_ordering
@dataclass(frozen=True)
class Version:
    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> Version:
        match = _VERSION.match(text)
        if match is None:
            raise BadVersion(f"invalid version {text[:40]!r}: expected MAJOR.MINOR, e.g. 1.0")
        return cls(int(match.group(1)), int(match.group(2)))

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return (self.major, self.minor) < (other.major, other.minor)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


MIN_VERSION = Version(1, 0)
MAX_VERSION = Version(1, 14)
#: Images and config drives in build requests, flavors' default image.
IMAGES = Version(1, 1)
#: Tenancy: instances show their project and user, quotas.
TENANCY = Version(1, 2)
#: The microversion of the power and lifecycle verbs.
VERBS_VERSION = Version(1, 3)
#: A rebuild's new image and config drive.
REBUILD_IMAGE = Version(1, 4)
#: Flavors' extra specs of any namespace.
ANY_EXTRA_SPECS = Version(1, 5)
#: An import that names every clash with the stored nodes.
EVERY_CLASH = Version(1, 6)
#: ``user_data`` base64-encoded, as Nova's.
USER_DATA_BASE64 = Version(1, 7)
#: Key pairs, and a build's ``key_name``.
KEY_PAIRS = Version(1, 8)
#: Instance metadata and tags.
LABELS = Version(1, 9)
#: Nova's status and addresses; name, status, changes-since filters and sorting.
NOVA_LISTING = Version(1, 10)
#: ``GET /v1/limits`` (Nova's ``/limits``).
LIMITS = Version(1, 11)
#: The instance action history (Nova's ``os-instance-actions``).
INSTANCE_ACTIONS = Version(1, 12)
#: The key_pairs quota, a rebuild's key_name, tag filters, action history pages.
NOVA_HABITS = Version(1, 13)
#: Nova's answers: a marker not in its list is 400; key pairs a page at a
#: time, another user's for admins; /limits' maxServerMeta.
NOVA_ANSWERS = Version(1, 14)


def requested(header: str | None) -> Version:
    """The version a request asks for, from its ``OpenStack-API-Version`` header.

    :raises BadVersion: malformed (for our service type).
    :raises UnsupportedVersion: outside the range served.
    """
    if header is None:
        return MIN_VERSION
    ours: str | None = None
    for item in header.split(","):
        parts = item.strip().split(None, 1)
        if not parts or parts[0].lower() != SERVICE_TYPE:
            continue
        if len(parts) != 2:
            raise BadVersion(f"{HEADER}: {SERVICE_TYPE} without a version")
        if ours is not None:
            raise BadVersion(f"{HEADER}: {SERVICE_TYPE} given twice")
        ours = parts[1].strip()
    if ours is None:
        return MIN_VERSION
    if ours.lower() == "latest":
        return MAX_VERSION
    version = Version.parse(ours)
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise UnsupportedVersion(
            f"version {version} is not supported: this service serves "
            f"{MIN_VERSION} to {MAX_VERSION}"
        )
    return version
