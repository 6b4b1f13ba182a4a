# SPDX-License-Identifier: Apache-2.0
"""The conductor RPC API's calls for Nova's key pairs, server metadata and tags (1.21).

A base of :class:`conductor.rpcapi.ConductorAPI`, in a module of its own so
that the client stays readable; the version history and the rest of the
calls are there.
"""

from __future__ import annotations

from typing import Any, TypeVar

__all__ = ["LabelCalls"]

_T = TypeVar("_T")


class LabelCalls:
    """Key pairs (the caller's user's own), and instances' metadata and tags."""

    def _call(self, answer: type[_T], method: str, version: str = "1.0", **kwargs: Any) -> _T:
        raise NotImplementedError  # ConductorAPI's

    # -- key pairs and instance labels -------------------------------------------

    def create_keypair(self, name: str, public_key: str | None = None) -> dict[str, Any]:
        """The caller's new key pair; without ``public_key`` a generated one,
        its ``private_key`` in the reply (and nowhere else)."""
        return self._call(
            dict[str, Any], "create_keypair", version="1.21", name=name, public_key=public_key
        )

    def list_keypairs(self) -> list[dict[str, Any]]:
        return self._call(list[dict[str, Any]], "list_keypairs", version="1.21")

    def show_keypair(self, name: str) -> dict[str, Any]:
        return self._call(dict[str, Any], "show_keypair", version="1.21", name=name)

    def delete_keypair(self, name: str) -> None:
        self._call(object, "delete_keypair", version="1.21", name=name)

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
