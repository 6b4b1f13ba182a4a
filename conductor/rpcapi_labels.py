# SPDX-License-Identifier: Apache-2.0
"""The conductor RPC API's calls for Nova's key pairs, server metadata and tags (1.21, 1.24).

A base of :class:`conductor.rpcapi.ConductorAPI`, in a module of its own so
that the client stays readable; the version history and the rest of the
calls are there.
"""

from __future__ import annotations

from typing import Any, TypeVar

__all__ = ["LabelCalls"]

_T = TypeVar("_T")


def _given(**arguments: Any) -> dict[str, Any]:
    """The arguments given (not ``None``): only they are sent."""
    return {key: value for key, value in arguments.items() if value is not None}


def _keypairs_version(*given: Any) -> str:
    """1.24 for a key pair call with an argument of 1.24 (``user_id``,
    ``limit``, ``marker``), so that an older conductor refuses it; else 1.21."""
    return "1.24" if any(value is not None for value in given) else "1.21"


class LabelCalls:
    """Key pairs (the caller's user's own), and instances' metadata and tags."""

    def _call(self, answer: type[_T], method: str, version: str = "1.0", **kwargs: Any) -> _T:
        raise NotImplementedError  # ConductorAPI's

    # -- key pairs and instance labels -------------------------------------------

    def create_keypair(
        self, name: str, public_key: str | None = None, *, user_id: str | None = None
    ) -> dict[str, Any]:
        """The caller's new key pair (an admin's ``user_id``: that user's,
        since 1.24); without ``public_key`` a generated one, its
        ``private_key`` in the reply (and nowhere else)."""
        return self._call(
            dict[str, Any],
            "create_keypair",
            version=_keypairs_version(user_id),
            name=name,
            public_key=public_key,
            **_given(user_id=user_id),
        )

    def list_keypairs(
        self, *, user_id: str | None = None, limit: int | None = None, marker: str | None = None
    ) -> list[dict[str, Any]]:
        """The caller's key pairs (``user_id``: that user's), by name; a page
        (``limit``, after ``marker``, a name) since 1.24."""
        return self._call(
            list[dict[str, Any]],
            "list_keypairs",
            version=_keypairs_version(user_id, limit, marker),
            **_given(user_id=user_id, limit=limit, marker=marker),
        )

    def show_keypair(self, name: str, *, user_id: str | None = None) -> dict[str, Any]:
        return self._call(
            dict[str, Any],
            "show_keypair",
            version=_keypairs_version(user_id),
            name=name,
            **_given(user_id=user_id),
        )

    def delete_keypair(self, name: str, *, user_id: str | None = None) -> None:
        self._call(
            object,
            "delete_keypair",
            version=_keypairs_version(user_id),
            name=name,
            **_given(user_id=user_id),
        )

    def get_instance_metadata(self, instance: str) -> dict[str, str]:
        return self._call(
            dict[str, str], "get_instance_metadata", version="1.21", instance=instance
        )

    def set_instance_metadata(
        self, instance: str, metadata: dict[str, str], replace: bool = False
    ) -> dict[str, str]:
        """Set keys (``replace``: the whole metadata); the metadata as it is then."""
        return self._call(
            dict[str, str],
            "set_instance_metadata",
            version="1.21",
            instance=instance,
            metadata=metadata,
            replace=replace,
        )

    def delete_instance_metadata(self, instance: str, key: str) -> None:
        self._call(object, "delete_instance_metadata", version="1.21", instance=instance, key=key)

    def get_instance_tags(self, instance: str) -> list[str]:
        return self._call(list[str], "get_instance_tags", version="1.21", instance=instance)

    def add_instance_tag(self, instance: str, tag: str) -> bool:
        """Whether the tag is new."""
        return self._call(bool, "add_instance_tag", version="1.21", instance=instance, tag=tag)

    def set_instance_tags(self, instance: str, tags: list[str]) -> list[str]:
        return self._call(
            list[str], "set_instance_tags", version="1.21", instance=instance, tags=tags
        )

    def delete_instance_tag(self, instance: str, tag: str) -> None:
        self._call(object, "delete_instance_tag", version="1.21", instance=instance, tag=tag)
