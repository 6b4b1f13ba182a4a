# SPDX-License-Identifier: Apache-2.0
"""What a build deploys: its image and its config drive (since API 1.11 / HTTP 1.1).

An image is where Ironic fetches the disk image (an http(s) URL: Ironic
fetches it itself, so a ``file://`` or ``ftp://`` source would only fail
later, on the node), how it checks it (``os_hash_algo``/``os_hash_value``,
or the legacy md5 ``checksum``) and its disk format; ``kernel`` and
``ramdisk`` come together, for a partition image.  Its ``properties``
(Glance's, for Nova's filters: ``hw_architecture``...) are checked by
Nova's rules (:mod:`conductor.validation.image_properties`); they are the
scheduler's, not sent to the agent that deploys it.

A config drive is what a booted machine reads of itself (cloud-init):
``user_data`` (a string of at most :data:`MAX_USER_DATA` bytes, which may
hold secrets: it is never put in an error message or a log line, only its
size), ``meta_data`` (``meta_data.json``: ``public_keys``, ``meta``...)
and ``network_data`` (``network_data.json``).  Ironic builds the drive
from these JSON documents itself.

The fields and limits are those of :data:`conductor.common.schemas.IMAGE_SCHEMA`
and :data:`~conductor.common.schemas.BUILD_REQUEST`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from conductor.common.schemas import (
    DISK_FORMATS,
    HASH_LENGTHS,
    MAX_CONFIG_DRIVE_JSON,
    MAX_URL_LENGTH,
    MAX_USER_DATA,
)
from conductor.validation.fields import Errors, join, optional_field, unknown_fields
from conductor.validation.image_properties import check_image_properties
from conductor.validation.tenant_data import check_key_name

__all__ = ["KeyChange", "RebuildRequest", "check_config_drive", "check_image", "validate_rebuild"]

_IMAGE_FIELDS: Final[frozenset[str]] = frozenset(
    (
        "source",
        "os_hash_algo",
        "os_hash_value",
        "checksum",
        "disk_format",
        "kernel",
        "ramdisk",
        "properties",
    )
)
_HEX_RE: Final = re.compile(r"[0-9A-Fa-f]+")
#: Nesting of a config drive's JSON documents (network_data.json is 3 deep).
_MAX_DEPTH: Final = 16
#: meta_data keys the conductor sets from the instance: a client's would be wrong.
_RESERVED_META: Final = ("uuid", "name")
_MAX_KEY_NAME: Final = 255
#: An SSH public key line (an RSA-16384 key is about 2.8 KB).
_MAX_PUBLIC_KEY: Final = 16384
_MAX_META_TEXT: Final = 255
_NETWORK_LISTS: Final = ("links", "networks", "services")


def _check_url(value: object, field: str, errors: Errors) -> str | None:
    if not isinstance(value, str):
        errors.add(field, "must be an http(s) URL string", value)
        return None
    if len(value) > MAX_URL_LENGTH:
        errors.add(field, f"must be at most {MAX_URL_LENGTH} characters", len(value))
        return None
    scheme, sep, rest = value.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        # Ironic fetches the image itself, over HTTP: another scheme would
        # fail on the node, minutes later, or read the conductor's files.
        errors.add(field, "must be an http:// or https:// URL (Ironic fetches it)", value)
        return None
    if not rest or rest[0] in "/?#" or any(c.isspace() for c in value):
        errors.add(field, "must be an http(s) URL with a host and no spaces", value)
        return None
    return value


def _check_hex(value: object, field: str, errors: Errors, length: int, what: str) -> str | None:
    if not isinstance(value, str) or not _HEX_RE.fullmatch(value):
        errors.add(field, f"must be the hex digest of {what}", value)
        return None
    if len(value) != length:
        errors.add(field, f"must be {length} hex digits for {what}", len(value))
        return None
    return value.lower()


def _check_checksums(value: Mapping[Any, Any], field: str, errors: Errors) -> dict[str, str]:
    """``os_hash_algo`` with ``os_hash_value``, and/or the md5 ``checksum``: one is required."""
    found: dict[str, str] = {}
    algo, digest = value.get("os_hash_algo"), value.get("os_hash_value")
    if algo is not None or digest is not None:
        if not isinstance(algo, str) or algo not in HASH_LENGTHS:
            errors.add(
                join(field, "os_hash_algo"), f"must be one of {', '.join(HASH_LENGTHS)}", algo
            )
        elif digest is None:
            errors.add(join(field, "os_hash_value"), f"is required with os_hash_algo {algo}")
        else:
            where = join(field, "os_hash_value")
            hexed = _check_hex(digest, where, errors, HASH_LENGTHS[algo], algo)
            if hexed is not None:
                found["os_hash_algo"], found["os_hash_value"] = algo, hexed
    checksum = value.get("checksum")
    if checksum is not None:
        hexed = _check_hex(checksum, join(field, "checksum"), errors, HASH_LENGTHS["md5"], "md5")
        if hexed is not None:
            found["checksum"] = hexed
    if algo is None and digest is None and checksum is None:
        # Ironic's direct deploy refuses an http image it cannot verify.
        errors.add(
            join(field, "os_hash_value"), "is required (with os_hash_algo), or checksum (md5)"
        )
    return found


def _check_partition(value: Mapping[Any, Any], field: str, errors: Errors) -> dict[str, str]:
    """``kernel`` and ``ramdisk`` (a partition image): both or neither."""
    kernel, ramdisk = value.get("kernel"), value.get("ramdisk")
    if (kernel is None) != (ramdisk is None):
        missing = "ramdisk" if ramdisk is None else "kernel"
        errors.add(join(field, missing), "is required with kernel and ramdisk (a partition image)")
    found: dict[str, str] = {}
    for key, url in (("kernel", kernel), ("ramdisk", ramdisk)):
        if url is not None and (checked := _check_url(url, join(field, key), errors)) is not None:
            found[key] = checked
    return found


def check_image(value: object, field: str, errors: Errors) -> dict[str, Any] | None:
    """The image *value* normalized (digests lower-case, no nulls), or ``None``.

    ``source`` is required, and a checksum: ``os_hash_algo`` with
    ``os_hash_value``, or ``checksum`` (md5), or both (Ironic prefers the
    first).  ``properties``, if any (not empty), are kept as given once
    Nova's rules accept them.
    """
    if not isinstance(value, Mapping):
        errors.add(field, "must be an object with source, checksum and disk_format", value)
        return None
    before = len(errors)
    unknown_fields(value, _IMAGE_FIELDS, field + ".", errors)
    image: dict[str, Any] = {}
    source = value.get("source")
    if source is None:
        errors.add(join(field, "source"), "is required")
    elif (url := _check_url(source, join(field, "source"), errors)) is not None:
        image["source"] = url
    image |= _check_checksums(value, field, errors)
    disk_format = value.get("disk_format")
    if disk_format is not None:
        if disk_format in DISK_FORMATS:
            image["disk_format"] = disk_format
        else:
            errors.add(
                join(field, "disk_format"), f"must be one of {', '.join(DISK_FORMATS)}", disk_format
            )
    image |= _check_partition(value, field, errors)
    properties = optional_field(value, "properties", field + ".", errors, check_image_properties)
    if properties:
        image["properties"] = properties
    return image if len(errors) == before else None


def _json_problem(value: object, depth: int = 0) -> str | None:
    """Why *value* is not a JSON document (objects with string keys, arrays,
    strings, finite numbers, booleans, null), or ``None``."""
    if depth > _MAX_DEPTH:
        return f"nests deeper than {_MAX_DEPTH} levels"
    items: Iterable[object] = ()
    problem: str | None = None
    if isinstance(value, float) and not math.isfinite(value):
        problem = "holds a number that is not finite"
    elif isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value):
            problem = "has a key that is not a string"
        items = value.values()
    elif isinstance(value, (list, tuple)):
        items = value
    elif not (value is None or isinstance(value, (str, bool, int, float))):
        problem = f"holds a {type(value).__name__}, not JSON"
    for item in items:
        if problem is not None:
            break
        problem = _json_problem(item, depth + 1)
    return problem


def _check_document(value: object, field: str, errors: Errors) -> dict[str, Any] | None:
    """A JSON object of at most :data:`MAX_CONFIG_DRIVE_JSON` bytes, as a dict."""
    if not isinstance(value, Mapping):
        errors.add(field, "must be a JSON object", type(value).__name__)
        return None
    problem = _json_problem(value)
    if problem is not None:
        errors.add(field, f"must be a JSON object: it {problem}")
        return None
    size = len(json.dumps(value, separators=(",", ":")).encode())
    if size > MAX_CONFIG_DRIVE_JSON:
        errors.add(field, f"must be at most {MAX_CONFIG_DRIVE_JSON} bytes as JSON", size)
        return None
    # A plain copy: what is stored and sent is JSON, whatever mapping came in.
    copied: dict[str, Any] = json.loads(json.dumps(value))
    return copied


def _check_text_map(value: object, field: str, errors: Errors, max_value: int, what: str) -> bool:
    if not isinstance(value, Mapping):
        errors.add(field, f"must be an object of names to {what}", type(value).__name__)
        return False
    ok = True
    for key, item in value.items():
        item_field = join(field, key)
        if not 1 <= len(key) <= _MAX_KEY_NAME:
            errors.add(item_field, f"names must be 1 to {_MAX_KEY_NAME} characters")
            ok = False
        elif not isinstance(item, str) or not 1 <= len(item) <= max_value:
            errors.add(item_field, f"must be {what} of 1 to {max_value} characters", item)
            ok = False
    return ok


def _check_meta_data(value: object, field: str, errors: Errors) -> dict[str, Any] | None:
    document = _check_document(value, field, errors)
    if document is None:
        return None
    ok = True
    for key in _RESERVED_META:
        if key in document:
            errors.add(join(field, key), "is set by the conductor (the instance's own)")
            ok = False
    if "public_keys" in document:
        ok = (
            _check_text_map(
                document["public_keys"], join(field, "public_keys"), errors, _MAX_PUBLIC_KEY, "keys"
            )
            and ok
        )
    if "meta" in document:
        ok = (
            _check_text_map(
                document["meta"], join(field, "meta"), errors, _MAX_META_TEXT, "strings"
            )
            and ok
        )
    return document if ok else None


def _check_network_data(value: object, field: str, errors: Errors) -> dict[str, Any] | None:
    document = _check_document(value, field, errors)
    if document is None:
        return None
    ok = True
    for key in _NETWORK_LISTS:
        items = document.get(key)
        if items is not None and (
            not isinstance(items, list) or not all(isinstance(i, dict) for i in items)
        ):
            errors.add(join(field, key), "must be a list of objects", type(items).__name__)
            ok = False
    return document if ok else None


def _check_user_data(value: object, field: str, errors: Errors) -> str | None:
    # The value is never rendered: user data may hold passwords and tokens.
    if not isinstance(value, str):
        errors.add(field, "must be a string", type(value).__name__)
        return None
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_USER_DATA:
        errors.add(field, f"must be at most {MAX_USER_DATA} bytes of UTF-8 (got {size} bytes)")
        return None
    return value


def check_config_drive(spec: Mapping[str, Any], errors: Errors) -> dict[str, Any] | None:
    """The config drive of a build request (``user_data``, ``meta_data``,
    ``network_data``: the ones given), or ``None`` when it gives none."""
    drive: dict[str, Any] = {}
    for key, check in (
        ("user_data", _check_user_data),
        ("meta_data", _check_meta_data),
        ("network_data", _check_network_data),
    ):
        if spec.get(key) is not None:
            checked = check(spec[key], key, errors)
            if checked is not None:
                drive[key] = checked
    return drive or None


@dataclasses.dataclass(frozen=True, slots=True)
class KeyChange:
    """A rebuild's ``key_name`` (Nova's 2.54): the key pair ``name`` and its
    ``public_key`` (looked up by the conductor), or ``name`` ``None``: the
    instance keeps no key pair."""

    name: str | None
    public_key: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class RebuildRequest:
    """What a rebuild replaces (since conductor API 1.14): the fields given.

    :ivar image: the new image, or ``None``: the stored one is kept
    :ivar config_drive: the config drive parts given (``user_data``,
        ``meta_data``, ``network_data``), each replacing the stored part;
        the parts not given are kept.  Left out of ``repr()``: user data.
    :ivar key: a new key pair, or none (since conductor API 1.23), or
        ``None``: the stored one is kept
    """

    image: dict[str, str] | None = None
    config_drive: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)
    key: KeyChange | None = None

    @property
    def changes(self) -> bool:
        """Whether anything stored is replaced (else: the plain rebuild)."""
        return self.image is not None or bool(self.config_drive) or self.key is not None

    def keyed(self, drive: dict[str, Any], old_name: str | None) -> dict[str, Any]:
        """*drive* with the instance's key pair replaced in meta_data's
        ``public_keys`` (the old one's entry dropped, the new one's added:
        Nova's meta_data.json), when this rebuild changes it."""
        if self.key is None:
            return drive
        meta_data = dict(drive.get("meta_data") or {})
        keys = {k: v for k, v in (meta_data.get("public_keys") or {}).items() if k != old_name}
        if self.key.name is not None:
            keys[self.key.name] = self.key.public_key
        if keys:
            meta_data["public_keys"] = keys
        else:
            meta_data.pop("public_keys", None)
        return {**drive, "meta_data": meta_data} if meta_data else drive


def validate_rebuild(
    image: object = None,
    user_data: object = None,
    meta_data: object = None,
    network_data: object = None,
    key_name: object = None,
) -> RebuildRequest:
    """A rebuild's new image and config drive parts, checked as a build's are
    (the same rules, the same field names); ``None`` keeps the stored value.
    ``key_name``: a key pair's name, or ``""`` for none (the key pair is the
    conductor's to look up).

    :raises InvalidInput: naming every bad field (user data never shown)
    """
    errors = Errors()
    checked = None if image is None else check_image(image, "image", errors)
    drive = check_config_drive(
        {"user_data": user_data, "meta_data": meta_data, "network_data": network_data}, errors
    )
    key = None
    if key_name == "":
        key = KeyChange(None)
    elif key_name is not None:
        name = check_key_name(key_name, "key_name", errors)
        key = None if name is None else KeyChange(name)
    errors.raise_if_any()
    return RebuildRequest(image=checked, config_drive=drive or {}, key=key)
