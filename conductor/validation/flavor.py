# SPDX-License-Identifier: Apache-2.0
"""Flavors: the spec of a flavor to create, extra specs included.

A flavor's ``extra_specs`` hold ``capabilities:<key>`` expressions (parsed
with :mod:`conductor.validation.capabilities`, the language of Nova's
ComputeCapabilitiesFilter), ``trait:<TRAIT>`` entries (merged into the
flavor's required or forbidden traits), ``resources:<CLASS>`` amounts (what
Placement is asked for in Nova: one unit of the flavor's own resource class
as Nova normalizes it, standard classes zeroed; a contradiction names both
fields; see :mod:`conductor.common.resource_class`), and specs of any other namespace
(an operator's ``mycompany:racks``, Nova's unscoped ``boot_mode``), whose
keys must match Nova's extra-spec key pattern and which are stored as given
for Nova filters (:mod:`conductor.scheduler.nova`) to read; an unscoped
one's value must be a capability expression, since Nova's
ComputeCapabilitiesFilter and ringfleet's CapabilitiesFilter read it as
one.  The fields, patterns and limits are those of
:data:`conductor.common.schemas.FLAVOR_SPEC`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, Final

from conductor.common.exception import FieldError, InvalidInput
from conductor.common.resource_class import (
    CUSTOM_PREFIX,
    RESOURCES_SCOPE,
    placement_name,
    resource_amounts,
)
from conductor.common.schemas import (
    CAPABILITIES_SCOPE,
    EXTRA_SPEC_KEY_PATTERN,
    FLAVOR_SPEC,
    MAX_EXTRA_SPEC_VALUE_LENGTH,
    TRAIT_SCOPE,
)
from conductor.validation.capabilities import CapabilityExpression, expression_or_reason
from conductor.validation.deploy import check_image
from conductor.validation.fields import (
    CAPABILITY_KEY_PATTERN,
    CAPABILITY_KEY_RE,
    TRAIT_PATTERN,
    TRAIT_RE,
    Errors,
    check_name,
    check_resource_class,
    check_traits,
    join,
    optional_field,
    required_field,
    unknown_fields,
)

__all__ = ["FlavorSpec", "validate_flavor_spec"]

_TRAIT_REQUIRED: Final = "required"
_TRAIT_FORBIDDEN: Final = "forbidden"

_FLAVOR_FIELDS: Final = FLAVOR_SPEC.fields
_EXTRA_SPEC_KEY_RE: Final = re.compile(EXTRA_SPEC_KEY_PATTERN)
#: Placement's resource class names (standard ones and CUSTOM_*)
_PLACEMENT_CLASS_PATTERN: Final = r"^[A-Z0-9_]{1,255}$"
_PLACEMENT_CLASS_RE: Final = re.compile(_PLACEMENT_CLASS_PATTERN)
#: Nova's numbered (granular) request groups: resources1:, trait_foo:...
_REQUEST_GROUP_RE: Final = re.compile(r"^(resources|trait)[A-Za-z0-9_-]{1,64}:")


@dataclasses.dataclass(frozen=True, slots=True)
class FlavorSpec:
    """A validated flavor to create.

    ``trait:<TRAIT>`` extra specs are merged into the trait sets, so
    ``extra_specs`` holds the others (as written), and ``capabilities`` maps
    each ``<key>`` to its parsed expression.  :meth:`to_dict` leaves ``capabilities`` out.
    ``default_image`` is the image of a build that names none (since API 1.11).
    """

    name: str
    resource_class: str
    required_traits: frozenset[str] = frozenset()
    forbidden_traits: frozenset[str] = frozenset()
    extra_specs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    capabilities: Mapping[str, CapabilityExpression] = dataclasses.field(default_factory=dict)
    default_image: Mapping[str, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The payload form: ``validate_flavor_spec(spec.to_dict()) == spec``."""
        return {
            "name": self.name,
            "resource_class": self.resource_class,
            "required_traits": sorted(self.required_traits),
            "forbidden_traits": sorted(self.forbidden_traits),
            "extra_specs": dict(self.extra_specs),
            "default_image": None if self.default_image is None else dict(self.default_image),
        }


def _parse_expression(text: str, field: str, errors: Errors) -> CapabilityExpression | None:
    result = expression_or_reason(text)
    if isinstance(result, str):
        errors.add(field, result, text)
        return None
    return result


@dataclasses.dataclass(slots=True)
class _ExtraSpecs:
    specs: dict[str, str] = dataclasses.field(default_factory=dict)  # all but trait:*
    expressions: dict[str, CapabilityExpression] = dataclasses.field(default_factory=dict)
    traits: dict[str, str] = dataclasses.field(default_factory=dict)  # -> required|forbidden
    resources: dict[str, int] = dataclasses.field(default_factory=dict)  # resources:<CLASS>


def _check_resource_spec(key: str, text: str, field: str, errors: Errors, out: _ExtraSpecs) -> bool:
    """``resources:<CLASS>=<amount>``: what Placement is asked for, as Nova reads it.

    A bare-metal node offers one unit of its own (custom) class and nothing
    else, so a standard class (``VCPU``, ``MEMORY_MB``...) must be zeroed and
    a custom one asked for once at most.
    """
    name = key[len(RESOURCES_SCOPE) :]
    amount = resource_amounts({key: text})[name]
    if not _PLACEMENT_CLASS_RE.fullmatch(name):
        errors.add(field, f"resource class must match {_PLACEMENT_CLASS_PATTERN}", name)
    elif amount is None:
        errors.add(field, "must be a non-negative integer", text)
    elif not name.startswith(CUSTOM_PREFIX) and amount != 0:
        errors.add(
            field,
            "a bare-metal node offers only its resource class: a standard class must be 0",
            text,
        )
    elif amount > 1:
        errors.add(field, "a bare-metal node offers one unit of its resource class: 0 or 1", text)
    else:
        out.specs[key] = text
        out.resources[name] = amount
        return True
    return False


def _check_resources_against_class(
    resource_class: str, resources: Mapping[str, int], errors: Errors
) -> None:
    """A flavor's ``resources:`` agree with its own resource class (as Placement names it)."""
    own = placement_name(resource_class)
    for name, amount in sorted(resources.items()):
        if not name.startswith(CUSTOM_PREFIX) or (name == own) == (amount == 1):
            continue
        field = join("extra_specs", RESOURCES_SCOPE + name)
        says = f"{RESOURCES_SCOPE}{name}={amount}"
        errors.add(
            "resource_class",
            f"is {own} in Placement (normalized as Nova does), contradicting extra_specs {says!r}",
            resource_class,
        )
        errors.add(
            field,
            f"contradicts resource_class {resource_class!r} ({own} in Placement)",
            str(amount),
        )


def _check_capability_spec(
    key: str, text: str, field: str, errors: Errors, out: _ExtraSpecs
) -> bool:
    capability = key[len(CAPABILITIES_SCOPE) :]
    expression = _parse_expression(text, field, errors)
    if not CAPABILITY_KEY_RE.fullmatch(capability):
        errors.add(field, f"capability key must match {CAPABILITY_KEY_PATTERN}", capability)
        return False
    if expression is None:
        return False
    out.specs[key] = text
    out.expressions[capability] = expression
    return True


def _check_trait_spec(key: str, text: str, field: str, errors: Errors, out: _ExtraSpecs) -> bool:
    trait = key[len(TRAIT_SCOPE) :]
    if not TRAIT_RE.fullmatch(trait):
        errors.add(field, f"trait name must match {TRAIT_PATTERN}", trait)
    elif text not in (_TRAIT_REQUIRED, _TRAIT_FORBIDDEN):
        errors.add(field, "must be 'required' or 'forbidden'", text)
    else:
        out.traits[trait] = text
        return True
    return False


def _check_extra_spec(
    key: object, text: object, field: str, errors: Errors, out: _ExtraSpecs
) -> bool:
    if not isinstance(key, str):
        errors.add(field, "keys must be strings", key)
    elif not isinstance(text, str):
        errors.add(field, "must be a string", text)
    elif len(text) > MAX_EXTRA_SPEC_VALUE_LENGTH:
        errors.add(field, f"must be at most {MAX_EXTRA_SPEC_VALUE_LENGTH} characters", text)
    elif key.startswith(CAPABILITIES_SCOPE):
        return _check_capability_spec(key, text, field, errors, out)
    elif key.startswith(TRAIT_SCOPE):
        return _check_trait_spec(key, text, field, errors, out)
    elif key.startswith(RESOURCES_SCOPE):
        return _check_resource_spec(key, text, field, errors, out)
    elif _REQUEST_GROUP_RE.match(key):
        errors.add(
            field,
            "numbered request groups are not supported (a bare-metal node is one "
            f"resource provider): use {RESOURCES_SCOPE} and {TRAIT_SCOPE}",
            key,
        )
    elif not _EXTRA_SPEC_KEY_RE.fullmatch(key):
        errors.add(field, f"extra spec key must match {EXTRA_SPEC_KEY_PATTERN}", key)
    elif ":" not in key and _parse_expression(text, field, errors) is None:
        # Unscoped: Nova's ComputeCapabilitiesFilter, and ringfleet's
        # CapabilitiesFilter, match it against a capability of that name.
        return False
    else:
        # Another namespace (an operator's Nova filter's), or unscoped:
        # stored as given for the filters that read it.
        out.specs[key] = text
        return True
    return False


def _check_extra_specs(value: object, field: str, errors: Errors) -> tuple[_ExtraSpecs, bool]:
    """The good extra specs, and whether all were good."""
    out = _ExtraSpecs()
    if value is None:
        return out, True
    if not isinstance(value, Mapping):
        errors.add(field, "must be a mapping of strings to strings", value)
        return out, False
    ok = True
    for key, text in value.items():
        ok = _check_extra_spec(key, text, join(field, key), errors, out) and ok
    return out, ok


def validate_flavor_spec(spec: object) -> FlavorSpec:
    """Validate a flavor to create.

    Fields: ``name`` (required, like a node name), ``resource_class``
    (required), ``required_traits``, ``forbidden_traits`` (disjoint) and
    ``extra_specs``: ``capabilities:<key>`` -> a capability expression (see
    :func:`parse_capability_expression`), ``trait:<TRAIT>`` -> ``required``
    or ``forbidden`` (merged into the trait sets; contradicting them is an
    error), ``resources:<CLASS>`` -> an amount (``CUSTOM_<X>``: 1 for the
    flavor's own class as Placement names it, else 0; a standard class: 0;
    Nova's numbered groups are refused), an unscoped key (no colon) -> a
    capability expression (stored
    as given: see :class:`~conductor.scheduler.filters.CapabilitiesFilter`),
    any other key matching Nova's extra-spec key pattern -> a string
    (stored as given); ``default_image`` (an image, as a build request's).

    :raises InvalidInput: naming every bad, missing or unknown field
    """
    if not isinstance(spec, Mapping):
        raise InvalidInput([FieldError.about("", "must be a mapping", spec)])
    errors = Errors()
    unknown_fields(spec, _FLAVOR_FIELDS, "", errors)
    name = required_field(spec, "name", "", errors, check_name)
    resource_class = required_field(spec, "resource_class", "", errors, check_resource_class)
    required = check_traits(spec.get("required_traits"), "required_traits", errors)
    forbidden = check_traits(spec.get("forbidden_traits"), "forbidden_traits", errors)
    if required is not None and forbidden is not None:
        both = sorted(required & forbidden)
        if both:
            errors.add("forbidden_traits", "traits also in required_traits", both)
    extra, _ = _check_extra_specs(spec.get("extra_specs"), "extra_specs", errors)
    default_image = optional_field(spec, "default_image", "", errors, check_image)
    if resource_class is not None:
        _check_resources_against_class(resource_class, extra.resources, errors)
    for trait, how in extra.traits.items():
        against = forbidden if how == _TRAIT_REQUIRED else required
        if against is not None and trait in against:
            other = "forbidden_traits" if how == _TRAIT_REQUIRED else "required_traits"
            field = join("extra_specs", TRAIT_SCOPE + trait)
            errors.add(field, f"contradicts {other}", how)
    errors.raise_if_any()
    assert name is not None and resource_class is not None
    assert required is not None and forbidden is not None
    return FlavorSpec(
        name=name,
        resource_class=resource_class,
        required_traits=required | {t for t, h in extra.traits.items() if h == _TRAIT_REQUIRED},
        forbidden_traits=forbidden | {t for t, h in extra.traits.items() if h == _TRAIT_FORBIDDEN},
        extra_specs=extra.specs,
        capabilities=extra.expressions,
        default_image=default_image,
    )
