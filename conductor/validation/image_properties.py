# SPDX-License-Identifier: Apache-2.0
"""An image's ``properties``, checked by Nova's own field rules.

A build's image (or a flavor's ``default_image``) may carry Glance-style
properties (``hw_architecture``, ``img_hv_type``, ``hw_vm_mode``,
``img_hv_requested_version``...), which Nova's filters read as
``spec_obj.image.properties`` (an ``ImageMetaProps``: ``ImagePropertiesFilter``).
They are names to strings, as Glance stores them, checked here as Nova's
``ImageMetaProps.from_dict`` reads them: a property Nova knows (by its
current or legacy name, ``architecture`` for ``hw_architecture``) must hold
a value its field accepts, and the error names the property and says
Nova's reason; a property Nova does not know is kept as written, as Glance
keeps it.  Image traits (``trait:CUSTOM_X=required``) are refused: Nova
sends them to Placement, ringfleet's scheduler does not read them (a
flavor's ``trait:`` extra specs do that).

The rules are Nova's (the ``nova-filters`` extra): without Nova installed,
an image with properties is refused, naming the extra.  Nova's objects
module is imported at the first image with properties (about a second).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Mapping
from typing import Any, Final

from conductor.common.extras import install_hint
from conductor.validation.fields import Errors, join

__all__ = ["MAX_PROPERTIES", "MAX_PROPERTY_LENGTH", "check_image_properties", "image_meta_props"]

#: properties of one image at most (Glance's default ``image_property_quota`` is 128)
MAX_PROPERTIES: Final = 128
#: characters of a property's name or value at most (Glance's column sizes)
MAX_PROPERTY_LENGTH: Final = 255
_TRAIT_PREFIX: Final = "trait:"


def _nova_props_class() -> Any:
    """Nova's ``ImageMetaProps`` (raises ``ImportError`` without Nova)."""
    with warnings.catch_warnings():
        # Nova's modules warn about their own dependencies' deprecations.
        warnings.simplefilter("ignore")
        module = importlib.import_module("nova.objects.image_meta")
    return module.ImageMetaProps


def image_meta_props(properties: Mapping[str, str]) -> Any:
    """Nova's ``ImageMetaProps`` of checked *properties* (what Nova's filters read)."""
    return _nova_props_class().from_dict(dict(properties))


def check_image_properties(value: object, field: str, errors: Errors) -> dict[str, str] | None:
    """*value* as an image's properties (name -> string), or ``None`` when refused."""
    if not isinstance(value, Mapping):
        errors.add(field, "must be an object of property names to strings", value)
        return None
    if len(value) > MAX_PROPERTIES:
        errors.add(field, f"must have at most {MAX_PROPERTIES} properties", len(value))
        return None
    before = len(errors)
    checked: dict[str, str] = {}
    for name, text in value.items():
        where = join(field, name)
        if not isinstance(name, str) or not 0 < len(name) <= MAX_PROPERTY_LENGTH:
            errors.add(where, f"a property name must be 1 to {MAX_PROPERTY_LENGTH} characters")
        elif name.startswith(_TRAIT_PREFIX):
            errors.add(
                where,
                "image traits are not applied by ringfleet's scheduler: give the flavor "
                f"the extra spec {name}=required (or forbidden)",
            )
        elif not isinstance(text, str) or len(text) > MAX_PROPERTY_LENGTH:
            errors.add(where, f"must be a string of at most {MAX_PROPERTY_LENGTH} characters", text)
        else:
            checked[name] = text
    if len(errors) > before:
        return None
    if checked and not _by_novas_rules(checked, field, errors):
        return None
    return checked


def _by_novas_rules(properties: dict[str, str], field: str, errors: Errors) -> bool:
    """Whether Nova's ``ImageMetaProps`` accepts each property; each refusal named."""
    try:
        props_class = _nova_props_class()
    except ImportError:
        errors.add(
            field,
            "are checked and read by Nova's rules, which need the 'nova-filters' extra: "
            + install_hint("nova-filters"),
        )
        return False
    accepted = True
    for name, text in properties.items():
        # One at a time: the error names the property Nova refused.
        try:
            props_class.from_dict({name: text})
        except (ValueError, TypeError) as exc:
            errors.add(join(field, name), f"not a valid value for Nova: {exc}", text)
            accepted = False
    return accepted
