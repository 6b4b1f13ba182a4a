# SPDX-License-Identifier: Apache-2.0
"""RPC endpoint: key pairs (create, list, show, delete), since API 1.21.

Nova's ``os-keypairs``: a key pair is its user's, whichever project the
user acts in; nobody else sees it (another user's key is
``KeyPairNotFound``, as Nova answers 404) but an admin naming the user
(``user_id``, since 1.24, as Nova's 2.10).  Lists come a page at a time
since 1.24 (``limit``, ``marker``: Nova's 2.35).  A creation without a public key
generates one and answers with the private key, which is stored nowhere.
A build's ``key_name`` is looked up here (:func:`with_key`): the key's
public half goes into the config drive's ``meta_data`` ``public_keys``,
as Nova's metadata service and config drive carry it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import oslo_messaging as messaging

from conductor.common.exception import FieldError, Forbidden, InvalidInput, KeyPairNotFound
from conductor.common.tenancy import Caller
from conductor.db import keypairs, quotas
from conductor.db.engine import Database
from conductor.rpcapi import API_VERSION
from conductor.validation import BuildRequest
from conductor.validation.arguments import check_limit, check_user
from conductor.validation.deploy import KeyChange
from conductor.validation.fields import Errors
from conductor.validation.tenant_data import (
    check_key_name,
    check_public_key,
    generate_key_pair,
)

__all__ = ["KeyPairsEndpoint", "key_change", "with_key"]

LOG = logging.getLogger(__name__)


def _owner(ctxt: dict[str, Any], user_id: Any) -> str:
    """The user whose key pairs a call reaches: the caller's own, or, an
    admin's call naming ``user_id`` (since 1.24, Nova's 2.10), that user's.

    :raises Forbidden: a caller that is no admin names another user, or a
        call names no user at all
    :raises InvalidInput: ``user_id`` is no user id
    """
    caller = Caller.from_ctxt(ctxt)
    if user_id is None or user_id == caller.user_id:
        return _own(caller)
    owner = check_user(user_id)
    if not caller.is_admin:
        raise Forbidden("user_id: another user's key pairs are for admins only")
    return owner


def _own(caller: Caller) -> str:
    if caller.user_id is None:
        raise Forbidden("key pairs belong to a user; this call names none (give user_id)")
    return caller.user_id


def _name(value: Any, field: str = "name") -> str:
    errors = Errors()
    name = check_key_name(value, field, errors)
    errors.raise_if_any()
    assert name is not None
    return name


class KeyPairsEndpoint:
    """Key pair methods of the conductor RPC API (since 1.21)."""

    target = messaging.Target(version=API_VERSION)

    def __init__(
        self, db: Database, quota: Callable[[], quotas.Defaults] = quotas.Defaults
    ) -> None:
        """``quota``: the ``[quota]`` defaults (``key_pairs``: per user, 100
        as Nova's), read at each creation."""
        self._db = db
        self._quota = quota

    def create_keypair(
        self, ctxt: dict[str, Any], name: Any, public_key: Any = None, user_id: Any = None
    ) -> dict[str, Any]:
        """Store the caller's key pair ``name``: ``public_key`` (an OpenSSH
        line), or, without it, a new RSA key whose ``private_key`` the
        reply carries once.  An admin's ``user_id`` (since 1.24) stores it
        for that user, within the limit of the admin's project.

        :raises InvalidInput: a bad name or key, named
        :raises DuplicateKeyPair: the user has one of this name
        :raises QuotaExceeded: the user has their ``key_pairs`` limit
            already (the project's, else ``[quota] key_pairs``)
        """
        caller = Caller.from_ctxt(ctxt)
        owner = _owner(ctxt, user_id)
        errors = Errors()
        checked_name = check_key_name(name, "name", errors)
        private = None
        if public_key is None:
            private, key, fingerprint = generate_key_pair()
        else:
            checked = check_public_key(public_key, "public_key", errors)
            key, fingerprint = checked if checked else ("", "")
        errors.raise_if_any()
        assert checked_name is not None
        stored = keypairs.create(
            self._db,
            user_id=owner,
            project_id=caller.project_id,
            name=checked_name,
            public_key=key,
            fingerprint=fingerprint,
            defaults=self._quota(),
        )
        LOG.info(
            "Key pair %r of user %s created (%s)",
            checked_name,
            owner,
            "generated" if private else "imported",
        )
        return stored if private is None else {**stored, "private_key": private}

    def list_keypairs(
        self,
        ctxt: dict[str, Any],
        user_id: Any = None,
        limit: Any = None,
        marker: Any = None,
    ) -> list[dict[str, Any]]:
        """The caller's key pairs (an admin's ``user_id``: that user's), by
        name; since 1.24 a page at a time, as Nova's 2.35: at most
        ``limit``, after ``marker`` (the previous page's last name).

        :raises InvalidInput: ``marker`` is no key pair of the user's (Nova's 400)
        """
        owner = _owner(ctxt, user_id)
        checked_limit = None if limit is None else check_limit(limit)
        checked_marker = None if marker is None else _name(marker, "marker")
        try:
            return keypairs.list_for(self._db, owner, limit=checked_limit, marker=checked_marker)
        except KeyPairNotFound:
            raise InvalidInput(
                [FieldError.about("marker", InvalidInput.MARKER_NOT_IN_LIST, marker)]
            ) from None

    def show_keypair(self, ctxt: dict[str, Any], name: Any, user_id: Any = None) -> dict[str, Any]:
        """:raises KeyPairNotFound: the user has none of this name"""
        return keypairs.get(self._db, _owner(ctxt, user_id), _name(name))

    def delete_keypair(self, ctxt: dict[str, Any], name: Any, user_id: Any = None) -> None:
        """Forget a key pair (instances built with it keep their key).

        :raises KeyPairNotFound: the user has none of this name
        """
        owner = _owner(ctxt, user_id)
        keypairs.remove(self._db, owner, _name(name))
        LOG.info("Key pair %r of user %s deleted", name, owner)


def with_key(db: Database, caller: Caller, build: BuildRequest) -> BuildRequest:
    """``build`` with its ``key_name``'s public key in ``meta_data``'s
    ``public_keys`` (``{name: key}``, as Nova's meta_data.json), and its
    ``metadata`` as ``meta`` there (Nova's server metadata, which its config
    drive carries as ``meta``); a build without either is returned as is.

    Keys of ``public_keys`` or ``meta`` the request gave itself are kept
    beside them (a request's own wins on a clash: it is explicit).

    :raises InvalidInput: ``key_name`` names no key pair of the caller's (Nova's 400)
    """
    if build.key_name is None and not build.metadata:
        return build
    drive = dict(build.config_drive or {})
    meta_data = dict(drive.get("meta_data") or {})
    if build.key_name is not None:
        key = key_change(db, caller, build.key_name)
        own_keys = meta_data.get("public_keys") or {}
        meta_data["public_keys"] = {build.key_name: key.public_key, **own_keys}
    if build.metadata:
        meta_data["meta"] = {**build.metadata, **(meta_data.get("meta") or {})}
    drive["meta_data"] = meta_data
    return dataclasses.replace(build, config_drive=drive)


def key_change(db: Database, caller: Caller, name: str) -> KeyChange:
    """The caller's key pair ``name``, for a build's or a rebuild's ``key_name``.

    :raises InvalidInput: no key pair of the caller's has this name (Nova's 400)
    """
    if caller.user_id is None:
        raise InvalidInput([FieldError("key_name", "key pairs belong to a user; none here")])
    try:
        key = keypairs.get(db, caller.user_id, name)
    except LookupError:
        raise InvalidInput(
            [FieldError.about("key_name", "no key pair of yours has this name", name)]
        ) from None
    return KeyChange(name, key["public_key"])
