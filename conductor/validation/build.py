# SPDX-License-Identifier: Apache-2.0
"""Build requests: how many instances of which flavor, named how, with which hints.

The fields and limits are those of :data:`conductor.common.schemas.BUILD_REQUEST`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Final

from conductor.common.checks import MAX_NAME_LENGTH
from conductor.common.exception import FieldError, InvalidInput
from conductor.common.objects import VmState
from conductor.common.schemas import (
    BUILD_REQUEST,
    CONFIG_DRIVE_FIELDS,
    MAX_COUNT,
    MAX_HINT_NAME_LENGTH,
    MAX_HINT_VALUE_LENGTH,
    MAX_SCHEDULER_HINTS,
)
from conductor.validation.deploy import check_config_drive, check_image
from conductor.validation.fields import (
    Errors,
    check_display_name,
    check_group,
    check_name,
    check_uuid,
    join,
    optional_field,
    required_field,
    unknown_fields,
    whole_number,
)
from conductor.validation.tenant_data import check_key_name, check_metadata, check_tags

__all__ = [
    "MAX_COUNT",
    "BuildRequest",
    "HintValue",
    "check_vm_state",
    "validate_build_request",
]

#: the value types a scheduler hint may have (JSON primitives)
HintValue = str | int | float | bool | None

_BUILD_FIELDS: Final = BUILD_REQUEST.fields


@dataclasses.dataclass(frozen=True, slots=True)
class BuildRequest:
    """A validated request to build ``count`` instances of a flavor.

    :ivar name: the instance name (``name-1`` .. ``name-N`` when
        ``count > 1``), or ``None`` to let the conductor choose
    :ivar group: the node group hint; ``None`` is no hint, while ``""`` asks
        for the default group
    :ivar instance_uuids: client-chosen instance ids (one per instance, which
        makes retries idempotent), or ``None`` to let the conductor choose
    :ivar scheduler_hints: hint name -> a JSON primitive (string, number,
        boolean, null), for scheduler filters that read hints (since API 1.6)
    :ivar image: the image to deploy (``source``, checksum, ``disk_format``,
        ``kernel``/``ramdisk``), or ``None``: the flavor's default image, if
        any (since API 1.11)
    :ivar config_drive: ``user_data``, ``meta_data``, ``network_data`` (the
        ones given), or ``None`` (since API 1.11); left out of ``repr()``:
        user data may hold secrets
    :ivar key_name: a key pair of the caller's (since API 1.21; the
        conductor puts its public key into ``meta_data``'s ``public_keys``)
    :ivar metadata: Nova's server metadata (since API 1.21)
    :ivar tags: Nova's server tags (since API 1.21)
    """

    flavor: str
    count: int = 1
    name: str | None = None
    group: str | None = None
    instance_uuids: tuple[str, ...] | None = None
    scheduler_hints: Mapping[str, HintValue] = dataclasses.field(default_factory=dict)
    image: Mapping[str, str] | None = None
    config_drive: Mapping[str, Any] | None = dataclasses.field(default=None, repr=False)
    key_name: str | None = None
    metadata: Mapping[str, str] = dataclasses.field(default_factory=dict)
    tags: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The payload form: ``validate_build_request(req.to_dict()) == req``."""
        drive = self.config_drive or {}
        return {
            "flavor": self.flavor,
            "count": self.count,
            "name": self.name,
            "group": self.group,
            "instance_uuids": None if self.instance_uuids is None else list(self.instance_uuids),
            "scheduler_hints": dict(self.scheduler_hints),
            "image": None if self.image is None else dict(self.image),
            **{key: drive.get(key) for key in CONFIG_DRIVE_FIELDS},
            "key_name": self.key_name,
            "metadata": dict(self.metadata),
            "tags": list(self.tags),
        }


def _check_uuid_list(
    value: object, field: str, errors: Errors, count: int | None
) -> tuple[str, ...] | None:
    if not isinstance(value, (list, tuple)):
        errors.add(field, "must be a list of UUIDs", value)
        return None
    if count is not None and len(value) != count:
        errors.add(field, f"must have exactly count={count} entries", len(value))
        return None
    if len(value) > MAX_COUNT:  # count itself was bad; do not walk a huge list
        errors.add(field, f"must have at most {MAX_COUNT} entries", len(value))
        return None
    seen: dict[str, int] = {}
    ok = True
    for i, item in enumerate(value):
        item_field = f"{field}[{i}]"
        normalized = check_uuid(item, item_field, errors)
        if normalized is None:
            ok = False
        elif normalized in seen:
            errors.add(item_field, f"duplicate of {field}[{seen[normalized]}]", item)
            ok = False
        else:
            seen[normalized] = i
    return tuple(seen) if ok else None


def _check_scheduler_hints(value: object, field: str, errors: Errors) -> dict[str, HintValue]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        errors.add(field, "must be a mapping of hint names to strings, numbers or booleans", value)
        return {}
    if len(value) > MAX_SCHEDULER_HINTS:
        errors.add(field, f"must have at most {MAX_SCHEDULER_HINTS} hints", len(value))
        return {}
    hints: dict[str, HintValue] = {}
    for key, item in value.items():
        item_field = join(field, key)
        if not isinstance(key, str) or not 1 <= len(key) <= MAX_HINT_NAME_LENGTH:
            errors.add(
                item_field, f"hint names must be strings of 1 to {MAX_HINT_NAME_LENGTH} characters"
            )
        elif isinstance(item, str) and len(item) > MAX_HINT_VALUE_LENGTH:
            errors.add(item_field, f"must be at most {MAX_HINT_VALUE_LENGTH} characters", item)
        elif isinstance(item, float) and not math.isfinite(item):
            errors.add(item_field, "must be a finite number", item)
        elif item is None or isinstance(item, (str, bool, int, float)):
            hints[key] = item
        else:
            errors.add(item_field, "must be a string, number, boolean or null (no nesting)", item)
    return hints


def validate_build_request(spec: object) -> BuildRequest:
    """Validate a request to build instances.

    Fields: ``flavor`` (required, a flavor name), ``count`` (1 to
    :data:`MAX_COUNT`, default 1), ``name`` (at most 255 characters including
    the ``-N`` suffix added when ``count > 1``), ``group`` (a node group
    hint), ``instance_uuids`` (unique, exactly ``count`` of them),
    ``scheduler_hints`` (a mapping of at most :data:`MAX_SCHEDULER_HINTS`
    names to JSON primitives: strings of at most
    :data:`MAX_HINT_VALUE_LENGTH` characters, finite numbers, booleans,
    null), ``image`` and the config drive's ``user_data``, ``meta_data``
    and ``network_data`` (:mod:`conductor.validation.deploy`), ``key_name``,
    ``metadata`` and ``tags`` (:mod:`conductor.validation.tenant_data`).

    :raises InvalidInput: naming every bad, missing or unknown field
    """
    if not isinstance(spec, Mapping):
        raise InvalidInput([FieldError.about("", "must be a mapping", spec)])
    errors = Errors()
    unknown_fields(spec, _BUILD_FIELDS, "", errors)
    flavor = required_field(spec, "flavor", "", errors, check_name)

    count: int | None = 1
    if spec.get("count") is not None:
        value = spec["count"]
        whole = whole_number(value)
        if whole is not None and 1 <= whole <= MAX_COUNT:
            count = whole
        else:
            errors.add("count", f"must be an integer from 1 to {MAX_COUNT}", value)
            count = None

    name = None
    if spec.get("name") is not None:
        # Leave room for the "-N" suffix of the last instance.
        suffix = f"-{count}" if count is not None and count > 1 else ""
        note = f" (with room for the suffix {suffix!r})" if suffix else ""
        name = check_display_name(spec["name"], "name", errors, MAX_NAME_LENGTH - len(suffix), note)
    group = optional_field(spec, "group", "", errors, check_group)
    instance_uuids = None
    if spec.get("instance_uuids") is not None:
        instance_uuids = _check_uuid_list(spec["instance_uuids"], "instance_uuids", errors, count)
    hints = _check_scheduler_hints(spec.get("scheduler_hints"), "scheduler_hints", errors)
    image = optional_field(spec, "image", "", errors, check_image)
    config_drive = check_config_drive(spec, errors)
    key_name = optional_field(spec, "key_name", "", errors, check_key_name)
    metadata = optional_field(spec, "metadata", "", errors, check_metadata) or {}
    tags = optional_field(spec, "tags", "", errors, check_tags) or ()
    errors.raise_if_any()
    assert flavor is not None and count is not None
    return BuildRequest(
        flavor=flavor,
        count=count,
        name=name,
        group=group,
        instance_uuids=instance_uuids,
        scheduler_hints=hints,
        image=image,
        config_drive=config_drive,
        key_name=key_name,
        metadata=metadata,
        tags=tags,
    )


def check_vm_state(value: object, field: str = "vm_state") -> VmState:
    """An instance state to list by: one of :class:`VmState`'s values."""
    if isinstance(value, str) and value in VmState.__members__.values():
        return VmState(value)
    raise InvalidInput([FieldError.about(field, f"one of {[s.value for s in VmState]}", value)])
