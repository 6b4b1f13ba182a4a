# SPDX-License-Identifier: Apache-2.0
"""Who is calling: the project, user and admin flag a conductor call carries.

An instance belongs to the project of whoever asked for it (invariant 12,
"Tenancy", in ``docs/architecture.rst``).  The caller's identity travels in
the oslo.messaging context of every call (``ctxt``), as in Nova:
``project_id``, ``user_id``, ``roles`` and ``is_admin``.

* ``ringfleet-api`` sends the Keystone token's (or the static token's)
  project, user and roles, and ``is_admin`` as its policy's
  ``context_is_admin`` rule decided (:class:`CallerContext`, made the
  request thread's oslo.context; :func:`conductor.common.rpc.call` copies it
  into the RPC context).
* A call without any of those keys is the operator's: the CLI in RPC mode,
  the agents, a client older than API 1.12.  The message bus is trusted
  (anyone who can publish on it can claim any context), so this is no
  weaker than an explicit ``is_admin``; the HTTP API is where callers are
  authenticated.

The conductor decides from :class:`Caller` alone which instances a call
may see; it never trusts the HTTP layer to have filtered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oslo_context import context as request_context

from conductor.common.exception import FieldError, InvalidInput

__all__ = ["KEYS", "OPERATOR", "Caller", "CallerContext"]

#: The context keys that make a call a caller's (not the operator's).
KEYS = ("project_id", "user_id", "roles", "is_admin")

_MAX_ID = 255


@dataclass(frozen=True)
class Caller:
    """The identity a conductor call was made with.

    :ivar project_id: the caller's project; ``None`` for the operator, or a
        token without a project.
    :ivar is_admin: may see and act on every project's instances.
    """

    project_id: str | None
    user_id: str | None
    is_admin: bool

    @classmethod
    def from_ctxt(cls, ctxt: Any) -> Caller:
        """The caller of an RPC call, from its context.

        :raises InvalidInput: naming the context key that is not usable.
        """
        if not isinstance(ctxt, Mapping) or not any(key in ctxt for key in KEYS):
            return OPERATOR
        errors: list[FieldError] = []
        ids: dict[str, str | None] = {}
        for key in ("project_id", "user_id"):
            value = ctxt.get(key)
            if value is not None and (
                not isinstance(value, str) or not value or len(value) > _MAX_ID
            ):
                errors.append(
                    FieldError(f"context.{key}", f"a string of 1 to {_MAX_ID} characters")
                )
                continue
            ids[key] = value
        roles = ctxt.get("roles") or []
        if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
            errors.append(FieldError("context.roles", "a list of strings"))
            roles = []
        admin = ctxt.get("is_admin")
        if admin is not None and not isinstance(admin, bool):
            errors.append(FieldError("context.is_admin", "true or false"))
        if errors:
            raise InvalidInput(errors)
        # The API decides is_admin by its policy (context_is_admin); only a
        # caller that sends roles without deciding is judged by role here.
        is_admin = bool(admin) if admin is not None else "admin" in roles
        return cls(project_id=ids["project_id"], user_id=ids["user_id"], is_admin=is_admin)

    def owns(self, project_id: str | None) -> bool:
        """Whether an instance of ``project_id`` is this caller's to see and act on.

        Admins see every instance; anyone else only their own project's.  An
        instance without a project (built before tenancy, or by the
        operator) is admins' only.
        """
        return self.is_admin or (project_id is not None and project_id == self.project_id)


#: The operator: every project, no project of its own.
OPERATOR = Caller(project_id=None, user_id=None, is_admin=True)


class CallerContext(request_context.RequestContext):
    """A request thread's oslo.context that speaks for an authenticated caller.

    :func:`conductor.common.rpc.call` sends :meth:`tenancy` with every call
    made under it; a plain ``RequestContext`` (a conductor serving a call,
    the CLI) sends none, and is the operator.
    """

    def tenancy(self) -> dict[str, Any]:
        return {
            "project_id": self.project_id,
            "user_id": self.user_id,
            "roles": list(self.roles or ()),
            "is_admin": bool(self.is_admin),
        }
