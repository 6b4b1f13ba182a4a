# SPDX-License-Identifier: Apache-2.0
"""The published notification reference and schemas stay true to the declarations.

``docs/notification-reference.rst`` and ``docs/notification-schemas.json``
are generated from :mod:`conductor.notification_events` and
:mod:`conductor.notification_payloads` (``tools/gen_notification_doc.py``)
and must be current; each schema must be a valid JSON schema, and every
event type and payload must be on the page.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from conductor.notification_events import EVENTS, event_schema
from tools import gen_notification_doc

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def test_the_generated_reference_is_current() -> None:
    committed = (DOCS / "notification-reference.rst").read_text()
    assert committed == gen_notification_doc.render(), (
        "docs/notification-reference.rst is out of date; regenerate it with: "
        "python -m tools.gen_notification_doc > docs/notification-reference.rst"
    )


def test_the_published_schemas_are_current() -> None:
    committed = (DOCS / "notification-schemas.json").read_text()
    assert committed == gen_notification_doc.render_schemas(), (
        "docs/notification-schemas.json is out of date; regenerate it with: "
        "python -m tools.gen_notification_doc --schemas > docs/notification-schemas.json"
    )


def test_every_event_type_has_a_valid_schema_and_a_row() -> None:
    published = json.loads((DOCS / "notification-schemas.json").read_text())
    assert set(published) == set(EVENTS)
    page = (DOCS / "notification-reference.rst").read_text()
    for name, spec in EVENTS.items():
        jsonschema.Draft202012Validator.check_schema(published[name])
        assert published[name] == event_schema(name)
        assert f"``{name}``" in page
        assert f"\n{spec.payload.NAME}\n---" in page, f"{spec.payload.NAME} has no section"


def test_the_notifications_page_includes_the_reference() -> None:
    assert ".. include:: notification-reference.rst" in (DOCS / "notifications.rst").read_text()
