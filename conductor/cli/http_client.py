# SPDX-License-Identifier: Apache-2.0
"""The conductor API through ``ringfleet-api`` (``ringfleet --os-endpoint URL``,
``--os-cloud NAME``...: :mod:`conductor.cli.login`).

:class:`HttpConductorAPI` has the methods of :class:`conductor.rpcapi.ConductorAPI`
that the CLI calls, each one HTTP request (or several, following ``next``
links for a list), and raises what the RPC client raises: the API's JSON
errors are rebuilt as ``InvalidInput`` (every field), ``NodeNotFound`` &
co, ``Conflict`` and ``ServiceUnavailable``, so the commands print the same
one line per problem.  Anything else (401, 403, 5xx, no answer) is an
:class:`HttpError`.
"""

from __future__ import annotations

import base64
import urllib.parse
from typing import Any, TypeVar, cast

import requests
from keystoneauth1 import exceptions as ks_exceptions

from conductor.cli.login import Login
from conductor.common import exception, verbs
from conductor.common.instance_states import Event
from conductor.common.list_filters import TAG_FILTERS

__all__ = ["HttpConductorAPI", "HttpError"]

_T = TypeVar("_T")

#: What the CLI asks for: the newest it speaks (an older API server answers 406).
#: From 1.7 ``user_data`` is sent base64-encoded (:func:`_encoded`).
API_VERSION_HEADER = {"OpenStack-API-Version": "baremetal-fleet 1.14"}
#: A list's ``limit`` meaning every item (the API pages it by ``[api] max_limit``).
_EVERY = 999_999_999


class HttpError(exception.RingfleetError):
    """The HTTP API refused or failed a request in a way the RPC API has no error for."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason, reason=reason)


_NOT_FOUND = {
    "nodes": exception.NodeNotFound,
    "flavors": exception.FlavorNotFound,
    "instances": exception.InstanceNotFound,
    "keypairs": exception.KeyPairNotFound,
}
_CONFLICT = {
    "nodes": exception.DuplicateNode,
    "flavors": exception.DuplicateFlavor,
    "instances": exception.DuplicateInstance,
    "keypairs": exception.DuplicateKeyPair,
}


class HttpConductorAPI:
    """The CLI's conductor client over HTTP.

    :param login: the API's base URL (e.g. ``http://fleet.example.com:6486``)
        and the keystoneauth session that adds the token
    :param timeout: seconds per HTTP request
    """

    def __init__(self, login: Login, timeout: float) -> None:
        self.endpoint = login.endpoint.rstrip("/")
        self.timeout = timeout
        self.session = login.session

    def _request(
        self, answer: type[_T], method: str, path: str, body: Any = None, **query: Any
    ) -> _T:
        """``method`` on ``path`` of the API; the decoded reply, typed as
        ``answer`` (what ``docs/http-api.rst`` says the call returns: the one
        place where the untyped JSON meets this typed client)."""
        url = path if path.startswith("http") else f"{self.endpoint}{path}"
        params = {k: _text(v) for k, v in query.items() if v is not None}
        try:
            response = self.session.request(
                url,
                method,
                json=body,
                params=params or None,
                headers=API_VERSION_HEADER,
                timeout=self.timeout,
                raise_exc=False,
            )
        except ks_exceptions.Unauthorized:
            # Raised by the login itself (an API 401 is a response).
            raise HttpError("Keystone refused the credentials") from None
        except (ks_exceptions.ClientException, requests.RequestException) as exc:
            raise HttpError(f"no answer from {self.endpoint}: {type(exc).__name__}") from None
        if response.status_code >= 400:
            raise _error(response, path)
        return cast(_T, response.json() if response.content else None)

    def close(self) -> None:
        # keystoneauth's Session keeps its requests.Session as ``session``.
        transport = getattr(self.session, "session", None)
        if transport is not None:
            transport.close()

    def _pages(self, path: str, key: str, limit: int, query: dict[str, Any]) -> list[Any]:
        """Up to ``limit`` items, following the API's ``next`` links."""
        reply = self._request(dict[str, Any], "GET", path, limit=limit, **query)
        items: list[Any] = list(reply[key])
        while len(items) < limit and reply.get("next"):
            nxt = urllib.parse.urlsplit(reply["next"])
            next_query = dict(urllib.parse.parse_qsl(nxt.query))
            next_query["limit"] = str(min(limit - len(items), int(next_query.get("limit", limit))))
            reply = self._request(dict[str, Any], "GET", nxt.path, **next_query)
            items.extend(reply[key])
        return items[:limit]

    # -- nodes ---------------------------------------------------------------------

    def create_node(self, node: dict[str, Any]) -> dict[str, Any]:
        return self._request(dict[str, Any], "POST", "/v1/nodes", node)

    def import_nodes(
        self, nodes: list[dict[str, Any]], dry_run: bool = False, every_clash: bool = False
    ) -> dict[str, Any]:
        """``every_clash``: microversion 1.6."""
        body = {"nodes": nodes, "dry_run": dry_run}
        if every_clash:
            body["every_clash"] = True
        return self._request(dict[str, Any], "POST", "/v1/nodes/import", body)

    def list_nodes(
        self, filters: dict[str, Any] | None = None, limit: int = 1000, marker: str | None = None
    ) -> list[dict[str, Any]]:
        return self._pages("/v1/nodes", "nodes", limit, {**(filters or {}), "marker": marker})

    def show_node(self, node: str) -> dict[str, Any]:
        return self._request(dict[str, Any], "GET", f"/v1/nodes/{_quote(node)}")

    def set_node_maintenance(
        self, node: str, maintenance: bool, reason: str | None = None
    ) -> dict[str, Any]:
        body = {"maintenance": maintenance, "reason": reason}
        return self._request(dict[str, Any], "PUT", f"/v1/nodes/{_quote(node)}/maintenance", body)

    def set_node(self, node: str, changes: dict[str, Any]) -> dict[str, Any]:
        return self._request(dict[str, Any], "PATCH", f"/v1/nodes/{_quote(node)}", changes)

    def node_owner(self, node: str) -> dict[str, Any]:
        return self._request(dict[str, Any], "GET", f"/v1/nodes/{_quote(node)}/owner")

    def move_node(self, node: str, host: str) -> dict[str, Any]:
        return self._request(
            dict[str, Any], "POST", f"/v1/nodes/{_quote(node)}/move", {"host": host}
        )

    def set_node_power_state(self, node: str, target: str) -> dict[str, Any]:
        path = f"/v1/nodes/{_quote(node)}/states/power"
        return self._request(dict[str, Any], "PUT", path, {"target": target})

    def delete_node(self, node: str) -> None:
        self._request(object, "DELETE", f"/v1/nodes/{_quote(node)}")

    def sync_ironic_nodes(self) -> dict[str, Any]:
        return self._request(dict[str, Any], "POST", "/v1/nodes/sync")

    # -- flavors -------------------------------------------------------------------

    def create_flavor(self, flavor: dict[str, Any]) -> dict[str, Any]:
        return self._request(dict[str, Any], "POST", "/v1/flavors", flavor)

    def list_flavors(self) -> list[dict[str, Any]]:
        return self._request(dict[str, list[dict[str, Any]]], "GET", "/v1/flavors")["flavors"]

    def show_flavor(self, flavor: str) -> dict[str, Any]:
        return self._request(dict[str, Any], "GET", f"/v1/flavors/{_quote(flavor)}")

    def delete_flavor(self, flavor: str) -> None:
        self._request(object, "DELETE", f"/v1/flavors/{_quote(flavor)}")

    # -- instances -----------------------------------------------------------------

    def build_instances(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        body = _encoded(request)
        return self._request(dict[str, list[dict[str, Any]]], "POST", "/v1/instances", body)[
            "instances"
        ]

    def list_instances(
        self,
        vm_state: str | None = None,
        host: str | None = None,
        limit: int = 1000,
        marker: str | None = None,
        *,
        all_projects: bool = False,
        project_id: str | None = None,
        **nova: str | None,
    ) -> list[dict[str, Any]]:
        """``nova``: Nova's filters (``changes_since`` is sent as
        ``changes-since``, ``tags_any`` as ``tags-any``...)."""
        query = {"vm_state": vm_state, "host": host, "marker": marker}
        query |= {_PARAMETERS.get(key, key): v for key, v in nova.items()}
        if all_projects:
            query["all_projects"] = "true"
        if project_id is not None:
            query["project_id"] = project_id
        return self._pages("/v1/instances", "instances", limit, query)

    def show_instance(self, instance: str) -> dict[str, Any]:
        return self._request(dict[str, Any], "GET", f"/v1/instances/{_quote(instance)}")

    def delete_instance(self, instance: str) -> dict[str, Any]:
        return self._verb(instance, Event.DELETE)

    def list_instance_actions(self, instance: str, **paged: Any) -> list[dict[str, Any]]:
        """``paged``: ``limit``, ``marker``, ``changes_since``, ``changes_before`` (1.13)."""
        path = f"/v1/instances/{_quote(instance)}/actions"
        query = {_PARAMETERS.get(k, k): _text(v) for k, v in paged.items() if v is not None}
        reply = self._request(dict[str, list[dict[str, Any]]], "GET", path, **query)
        return reply["instanceActions"]

    def show_instance_action(self, instance: str, request_id: str) -> dict[str, Any]:
        path = f"/v1/instances/{_quote(instance)}/actions/{_quote(request_id)}"
        return self._request(dict[str, dict[str, Any]], "GET", path)["instanceAction"]

    def show_limits(self, project_id: str | None = None) -> dict[str, Any]:
        query = {} if project_id is None else {"tenant_id": project_id}
        return self._request(dict[str, dict[str, Any]], "GET", "/v1/limits", **query)["limits"]

    # -- quotas --------------------------------------------------------------------

    def show_quota(self, project_id: str) -> dict[str, Any]:
        return self._request(dict[str, Any], "GET", f"/v1/quotas/{_quote(project_id)}")

    def set_quota(self, project_id: str, quotas: dict[str, int]) -> dict[str, Any]:
        body = {"quotas": quotas}
        return self._request(dict[str, Any], "PUT", f"/v1/quotas/{_quote(project_id)}", body)

    def delete_quota(self, project_id: str) -> dict[str, Any]:
        return self._request(dict[str, Any], "DELETE", f"/v1/quotas/{_quote(project_id)}")

    def list_quotas(self) -> list[dict[str, Any]]:
        return self._request(dict[str, list[dict[str, Any]]], "GET", "/v1/quotas")["quotas"]

    def reboot_instance(self, instance: str, hard: bool = False) -> dict[str, Any]:
        return self._verb(instance, Event.REBOOT_HARD if hard else Event.REBOOT)

    def stop_instance(self, instance: str) -> dict[str, Any]:
        return self._verb(instance, Event.STOP)

    def start_instance(self, instance: str) -> dict[str, Any]:
        return self._verb(instance, Event.START)

    def rebuild_instance(self, instance: str, **new: Any) -> dict[str, Any]:
        """``new``: the image and config drive parts to replace (microversion
        1.4), ``key_name`` (1.13; ``""``: none, sent as Nova's null)."""
        replaced = _encoded({k: v for k, v in new.items() if v is not None})
        if replaced.get("key_name") == "":
            replaced["key_name"] = None
        return self._verb(instance, Event.REBUILD, replaced)

    def _verb(self, instance: str, event: Event, value: Any = None) -> dict[str, Any]:
        """The HTTP call of the verb *event* starts (the verb table's): an
        action's body is ``{action: value}``, or its type (reboot's)."""
        http = verbs.BY_EVENT[event].http
        path = http.path.replace("{instance}", _quote(instance))
        if http.action is None:
            return self._request(dict[str, Any], http.method, path)
        if http.action_type is not None:
            value = {"type": http.action_type}
        return self._request(dict[str, Any], http.method, path, {http.action: value})

    # -- key pairs, instance metadata and tags (1.8, 1.9) -------------------------

    def create_keypair(
        self, name: str, public_key: str | None = None, *, user_id: str | None = None
    ) -> dict[str, Any]:
        """``user_id``: another user's (an admin's, 1.14)."""
        given = {"name": name, "public_key": public_key, "user_id": user_id}
        keypair = {k: v for k, v in given.items() if v is not None}
        reply = self._request(dict[str, Any], "POST", "/v1/keypairs", {"keypair": keypair})
        return cast(dict[str, Any], reply["keypair"])

    def list_keypairs(
        self, *, user_id: str | None = None, limit: int | None = None, marker: str | None = None
    ) -> list[dict[str, Any]]:
        """The user's key pairs after ``marker``: at most ``limit``, else
        every one, page after page (``next`` links, 1.14)."""
        query = {"user_id": user_id, "marker": marker}
        items = self._pages("/v1/keypairs", "keypairs", limit or _EVERY, query)
        return [item["keypair"] for item in items]

    def show_keypair(self, name: str, *, user_id: str | None = None) -> dict[str, Any]:
        path = f"/v1/keypairs/{_quote(name)}"
        reply = self._request(dict[str, Any], "GET", path, user_id=user_id)
        return cast(dict[str, Any], reply["keypair"])

    def delete_keypair(self, name: str, *, user_id: str | None = None) -> None:
        self._request(object, "DELETE", f"/v1/keypairs/{_quote(name)}", user_id=user_id)

    def get_instance_metadata(self, instance: str) -> dict[str, str]:
        path = f"/v1/instances/{_quote(instance)}/metadata"
        return self._request(dict[str, dict[str, str]], "GET", path)["metadata"]

    def set_instance_metadata(
        self, instance: str, metadata: dict[str, str], replace: bool = False
    ) -> dict[str, str]:
        path = f"/v1/instances/{_quote(instance)}/metadata"
        method = "PUT" if replace else "POST"
        return self._request(dict[str, dict[str, str]], method, path, {"metadata": metadata})[
            "metadata"
        ]

    def delete_instance_metadata(self, instance: str, key: str) -> None:
        self._request(object, "DELETE", f"/v1/instances/{_quote(instance)}/metadata/{_quote(key)}")

    def get_instance_tags(self, instance: str) -> list[str]:
        path = f"/v1/instances/{_quote(instance)}/tags"
        return self._request(dict[str, list[str]], "GET", path)["tags"]

    def add_instance_tag(self, instance: str, tag: str) -> bool:
        """Whether the tag is new (the API's 201; 204: it was there)."""
        path = f"/v1/instances/{_quote(instance)}/tags/{_quote(tag)}"
        # 201 and 204 both answer without a body: ask which by reading the tags first.
        had = tag in self.get_instance_tags(instance)
        self._request(object, "PUT", path)
        return not had

    def set_instance_tags(self, instance: str, tags: list[str]) -> list[str]:
        path = f"/v1/instances/{_quote(instance)}/tags"
        return self._request(dict[str, list[str]], "PUT", path, {"tags": tags})["tags"]

    def delete_instance_tag(self, instance: str, tag: str) -> None:
        self._request(object, "DELETE", f"/v1/instances/{_quote(instance)}/tags/{_quote(tag)}")

    # -- fleet ---------------------------------------------------------------------

    def fleet_status_details(self) -> dict[str, Any]:
        return self._request(dict[str, Any], "GET", "/v1/fleet/status")

    fleet_status = fleet_status_details

    def fleet_check(self) -> dict[str, Any]:
        return self._request(dict[str, Any], "GET", "/v1/fleet/check")

    def ring_status(self) -> dict[str, Any]:
        return self._request(dict[str, Any], "GET", "/v1/fleet/ring")

    def drain_agent(self, host: str) -> dict[str, Any]:
        return self._request(dict[str, Any], "POST", f"/v1/agents/{_quote(host)}/drain")


def _encoded(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with its ``user_data`` base64-encoded, as microversion 1.7
    (and Nova's API) takes it: the user passes the file as ever."""
    if body.get("user_data") is None:
        return body
    return {**body, "user_data": base64.b64encode(body["user_data"].encode()).decode()}


#: The query parameters of the RPC arguments whose names differ.
_PARAMETERS = {"changes_since": "changes-since", "changes_before": "changes-before"} | {
    argument: parameter for argument, parameter in TAG_FILTERS.items()
}


def _quote(value: str) -> str:
    return urllib.parse.quote(value, safe="")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _error(response: requests.Response, path: str) -> exception.RingfleetError:
    """The RPC API's exception for an HTTP error answer."""
    try:
        errors = response.json()["errors"]
        first = errors[0]
    except (ValueError, KeyError, IndexError, TypeError):
        return HttpError(f"HTTP {response.status_code} from {path}")
    status = response.status_code
    collection = path.split("/")[2] if path.count("/") >= 2 else ""
    if path.count("/") > 3 and collection == "instances":
        collection = ""  # an instance's metadata key or tag, not the instance
    if status == 400 and first.get("code") == "ringfleet.invalid_input":
        return exception.InvalidInput(
            [
                {
                    "field": e.get("field") or "",
                    "reason": e.get("reason") or e.get("detail", ""),
                    "value": e.get("value"),
                }
                for e in errors
            ]
        )
    if status == 404 and first.get("value") is not None and collection in _NOT_FOUND:
        # An instance's action by its request id is not the instance.
        kind = exception.InstanceActionNotFound if "/actions/" in path else _NOT_FOUND[collection]
        return kind(str(first["value"]))
    if status == 409:
        cls = _CONFLICT.get(collection, exception.Conflict)
        if path.endswith(("/move", "/drain")) or path.count("/") > 3:
            cls = exception.Conflict
        return cls(
            field=first.get("field") or "",
            value=first.get("value"),
            index=first.get("index"),
            reason=first.get("reason"),
        )
    if status == 503 and first.get("code") == "ringfleet.service_unavailable":
        return exception.ServiceUnavailable(reason=str(first.get("detail")))
    return HttpError(f"HTTP {status}: {first.get('detail', '')}")
