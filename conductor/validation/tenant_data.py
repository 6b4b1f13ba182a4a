# SPDX-License-Identifier: Apache-2.0
"""What a tenant names and labels: key pairs, instance metadata and tags, by Nova's rules.

* A key pair's name: 1 to 255 of ``A-Z a-z 0-9 _ - @ .`` and space, not
  starting or ending with a space (Nova's ``os-keypairs`` since 2.92).
  Its public key: one OpenSSH public key line (``ssh-ed25519 AAAA... comment``)
  that ``cryptography`` loads, at most :data:`MAX_PUBLIC_KEY` characters;
  its fingerprint is Nova's (the MD5 of the key blob, colon-separated hex).
* Metadata: at most :data:`MAX_METADATA_ITEMS` keys (Nova's default
  ``metadata_items`` quota) of 1 to 255 of ``A-Z a-z 0-9 - _ : .`` and
  space, each to a string of at most 255 characters.
* Tags: 1 to 60 characters without ``,`` or ``/``, at most
  :data:`MAX_TAGS` per instance (Nova's server tags).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Mapping
from typing import Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from conductor.common.schemas import (
    KEY_NAME_PATTERN,
    MAX_METADATA_ITEMS,
    MAX_METADATA_LENGTH,
    MAX_TAG_LENGTH,
    MAX_TAGS,
    METADATA_KEY_PATTERN,
    TAG_PATTERN,
)
from conductor.validation.fields import Errors, join

__all__ = [
    "KEY_NAME_PATTERN",
    "MAX_METADATA_ITEMS",
    "MAX_METADATA_LENGTH",
    "MAX_PUBLIC_KEY",
    "MAX_TAGS",
    "MAX_TAG_LENGTH",
    "METADATA_KEY_PATTERN",
    "TAG_PATTERN",
    "check_key_name",
    "check_metadata",
    "check_public_key",
    "check_tag",
    "check_tags",
    "fingerprint",
    "generate_key_pair",
]

MAX_KEY_NAME_LENGTH: Final = 255
#: The longest public key line: a 16,384-bit RSA key is about 2,800.
MAX_PUBLIC_KEY: Final = 16384

_KEY_NAME_RE: Final = re.compile(KEY_NAME_PATTERN)
_METADATA_KEY_RE: Final = re.compile(METADATA_KEY_PATTERN)
_TAG_RE: Final = re.compile(TAG_PATTERN)


def check_key_name(value: object, field: str, errors: Errors) -> str | None:
    """A key pair name (Nova's rule)."""
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_KEY_NAME_LENGTH:
        errors.add(field, f"must be a string of 1 to {MAX_KEY_NAME_LENGTH} characters", value)
        return None
    if not _KEY_NAME_RE.match(value):
        errors.add(field, "may hold only letters, digits, '_', '-', '@', '.' and spaces", value)
        return None
    if value != value.strip():
        errors.add(field, "may not start or end with a space", value)
        return None
    return value


def check_public_key(value: object, field: str, errors: Errors) -> tuple[str, str] | None:
    """An OpenSSH public key line and its fingerprint (Nova's: MD5 of the blob).

    The key itself is never echoed in the error: a long line is no help.
    """
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_PUBLIC_KEY:
        errors.add(field, f"must be a string of 1 to {MAX_PUBLIC_KEY} characters")
        return None
    key = value.strip()
    try:
        serialization.load_ssh_public_key(key.encode())
        blob = base64.b64decode(key.split()[1], validate=True)
    except (ValueError, IndexError, binascii.Error, TypeError):
        errors.add(
            field, "is not an OpenSSH public key line (e.g. 'ssh-ed25519 AAAAC3Nza... me@host')"
        )
        return None
    except Exception:  # cryptography's UnsupportedAlgorithm and the like
        errors.add(field, "is a public key of a type that is not supported")
        return None
    return key, fingerprint(blob)


def fingerprint(blob: bytes) -> str:
    """Nova's key pair fingerprint: the MD5 of the key blob, ``aa:bb:...``."""
    digest = hashlib.md5(blob, usedforsecurity=False).hexdigest()
    return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))


def generate_key_pair(comment: str = "Generated-by-ringfleet") -> tuple[str, str, str]:
    """A new RSA key pair as Nova generates one: 2,048 bits, the private key
    in PEM (``-----BEGIN RSA PRIVATE KEY-----``), the public key an
    OpenSSH line.  Returns ``(private_key, public_key, fingerprint)``."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    blob = base64.b64decode(public.split()[1])
    return private, f"{public.decode()} {comment}", fingerprint(blob)


def check_metadata(
    value: object, field: str, errors: Errors, *, limit: int = MAX_METADATA_ITEMS
) -> dict[str, str] | None:
    """Instance metadata: a mapping of Nova's keys to strings of at most 255."""
    if not isinstance(value, Mapping):
        errors.add(field, "must be a mapping of keys to strings", value)
        return None
    if len(value) > limit:
        errors.add(field, f"must have at most {limit} items", len(value))
        return None
    checked: dict[str, str] = {}
    for key, item in value.items():
        item_field = join(field, key)
        if not isinstance(key, str) or not _METADATA_KEY_RE.match(key):
            errors.add(
                item_field,
                f"keys are 1 to {MAX_METADATA_LENGTH} of letters, digits, '-', '_', ':', '.' "
                "and spaces",
            )
        elif not isinstance(item, str) or len(item) > MAX_METADATA_LENGTH:
            errors.add(
                item_field, f"must be a string of at most {MAX_METADATA_LENGTH} characters", item
            )
        else:
            checked[key] = item
    return checked if len(checked) == len(value) else None


def check_tag(value: object, field: str, errors: Errors) -> str | None:
    """One tag (Nova's rule)."""
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_TAG_LENGTH:
        errors.add(field, f"must be a string of 1 to {MAX_TAG_LENGTH} characters", value)
        return None
    if not _TAG_RE.match(value):
        errors.add(field, "may not contain ',' or '/'", value)
        return None
    return value


def check_tags(value: object, field: str, errors: Errors) -> tuple[str, ...] | None:
    """A list of tags, duplicates dropped (as Nova's), at most :data:`MAX_TAGS`."""
    if not isinstance(value, (list, tuple)):
        errors.add(field, "must be a list of tags", value)
        return None
    if len(value) > MAX_TAGS:
        errors.add(
            field, f"must have at most {MAX_TAGS} tags (Nova's per-server limit)", len(value)
        )
        return None
    tags = [check_tag(item, f"{field}[{i}]", errors) for i, item in enumerate(value)]
    if any(tag is None for tag in tags):
        return None
    return tuple(dict.fromkeys(tag for tag in tags if tag is not None))
