"""A small dict-in, dict-out Kubernetes client on ``kubernetes_asyncio``'s transport.

The generated model classes are heavy to build and to diff; the operator renders plain dicts (golden
tests compare them as data), so it sends and receives dicts. ``kubernetes_asyncio`` still does what it is
good at: kubeconfig and in-cluster credentials, TLS and token refresh.

Writes use server-side apply with our field manager, so the API server merges our fields with those of
other actors (HPA, kubectl) instead of our write replacing theirs. Conflicts (409), throttling and 5xx are
retried a bounded number of times and then raised: never swallowed.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from naiad_operator.k8s import resources
from naiad_operator.k8s.errors import APIError, NotFoundError, error_for

T = TypeVar("T")

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


async def connect() -> client.ApiClient:
    """An API client from the pod's service account, or from ``$KUBECONFIG`` / ``~/.kube/config``."""
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()
    else:
        await config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
    return client.ApiClient()


class Kube:
    """The operator's only door to the Kubernetes API."""

    def __init__(
        self,
        api: client.ApiClient,
        field_manager: str,
        retries: int,
        on_request: Callable[[str], None] | None = None,
    ) -> None:
        self.api = api
        self.field_manager = field_manager
        self.retries = max(1, retries)
        self.on_request = on_request
        """Told the method of every request (the operator counts them in its metrics)."""

    async def close(self) -> None:
        await self.api.close()

    async def _call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        if self.on_request is not None:
            self.on_request(method)
        try:
            return await self.api.call_api(
                path,
                method,
                query_params=query or [],
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                body=body,
                response_types_map={200: "object", 201: "object", 202: "object"},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
            )
        except ApiException as exc:
            raise error_for(exc.status or 0, _message(exc)) from exc
        except (TimeoutError, OSError) as exc:
            raise error_for(0, f"{type(exc).__name__}: {exc}") from exc

    async def _retrying(self, attempt: Callable[[], Awaitable[T]], *, conflicts: bool = True) -> T:
        """Run a write; on a transient error wait a little and run it again, at most ``retries`` times,
        then raise the last error. ``conflicts=False`` hands a 409 straight back (a create that finds the
        object exists is an answer for the caller, not a hiccup)."""
        for n in range(self.retries):
            try:
                return await attempt()
            except APIError as exc:
                if not exc.transient or (exc.status == 409 and not conflicts) or n == self.retries - 1:
                    raise
                await asyncio.sleep(min(0.1 * 2**n, 2.0))
        raise AssertionError("unreachable")

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = await self._call(
                "GET", resources.object_path(api_version, kind, namespace, name)
            )
        except NotFoundError:
            return None
        return result

    async def list(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        selector: dict[str, str] | None = None,
        fields: dict[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        query = [("labelSelector", ",".join(f"{k}={v}" for k, v in selector.items()))] if selector else []
        if fields:
            query.append(("fieldSelector", ",".join(f"{k}={v}" for k, v in fields.items())))
        result = await self._call("GET", resources.collection_path(api_version, kind, namespace), query=query)
        items: list[dict[str, Any]] = result.get("items") or []
        # a fake API server may ignore the selectors; the answer must not depend on it
        if selector:
            items = [i for i in items if _matches(i, selector)]
        if fields:
            items = [i for i in items if all(_field(i, k) == v for k, v in fields.items())]
        return items

    async def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply of a whole object we own (created if absent); no namespace: cluster-scoped."""
        meta = obj["metadata"]
        path = resources.object_path(obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])
        query = [("fieldManager", self.field_manager), ("force", "true")]

        async def attempt() -> dict[str, Any]:
            result: dict[str, Any] = await self._call(
                "PATCH", path, query=query, body=obj, content_type=APPLY_PATCH
            )
            return result

        return await self._retrying(attempt)

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create; a 409 (it exists) is raised for the caller to decide, never taken as success."""
        meta = obj["metadata"]
        path = resources.collection_path(obj["apiVersion"], obj["kind"], meta["namespace"])

        async def attempt() -> dict[str, Any]:
            result: dict[str, Any] = await self._call("POST", path, body=obj)
            return result

        return await self._retrying(attempt, conflicts=False)

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        """Delete in the background (children go with it); False when it was already gone."""
        path = resources.object_path(api_version, kind, namespace, name)
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        try:
            await self._retrying(lambda: self._call("DELETE", path, body=body))
        except NotFoundError:
            return False
        return True

    async def json_patch(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        operations: Sequence[dict[str, Any]],
        subresource: str = "",
    ) -> dict[str, Any]:
        """One JSON patch, not retried: its ``test`` operations make it conditional, and a failed
        condition (409/422) is the caller's answer."""
        path = resources.object_path(api_version, kind, namespace, name)
        path += f"/{subresource}" if subresource else ""
        result: dict[str, Any] = await self._call("PATCH", path, body=operations, content_type=JSON_PATCH)
        return result

    async def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        """Merge-patch ``status`` through the status subresource (never bumps the generation)."""
        path = resources.object_path(api_version, kind, namespace, name) + "/status"

        async def attempt() -> dict[str, Any]:
            result: dict[str, Any] = await self._call(
                "PATCH", path, body={"status": status}, content_type=MERGE_PATCH
            )
            return result

        return await self._retrying(attempt)


def _matches(obj: dict[str, Any], selector: dict[str, str]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def _field(obj: dict[str, Any], path: str) -> str | None:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return None if value is None else str(value)


def _message(exc: ApiException) -> str:
    body = exc.body if isinstance(exc.body, str) else ""
    try:
        return str(json.loads(body).get("message") or exc.reason)
    except (ValueError, AttributeError):
        return str(exc.reason or body)
