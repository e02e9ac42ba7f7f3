"""KMock 0.8 made Kubernetes-like enough to run a kopf operator against it.

``kmock.KubernetesEmulator`` is an in-memory object store over HTTP. Out of the box kopf cannot run on
it: objects get no ``resourceVersion``/``uid``/``generation`` (kopf's finalizer patch tests
``resourceVersion`` and fails), watches replay everything and ignore ``?resourceVersion=``, lists carry
no ``kind``, ``/api/v1/namespaces`` fails to parse, and there is no server-side apply, status
subresource isolation or label selection. This module fills exactly those gaps, and declares custom
resources from CRD manifests (POSTing a CRD to KMock registers nothing).

What stays missing, by design of the emulator: controllers (no ReplicaSets, Pods, Job runs or garbage
collection: tests play kubelet themselves), admission, schema validation and defaulting, RBAC, and
field-manager semantics of server-side apply (an apply is a JSON merge patch here).

It reaches into kmock's private parts (the URL parser, ``_objects``, ``__get_objs``), hence ``kmock==0.8``.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import datetime
import itertools
import threading
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import attrs
import jsonpatch
import kmock
import yaml
from kmock._internal import dicts, enums, parsing, rendering

APPLY_PATCH = "application/apply-patch+yaml"
_KEEP_REQUESTS = 32

_parse_path = parsing.parse_path


def _parse_path_with_namespaces(path: str) -> parsing.ParsedPath:
    """kmock 0.8 reads ``/api/v1/namespaces[/NAME]`` as a namespaced path and fails to unpack it."""
    parts = path.strip("/").split("/")
    if parts[:3] == ["api", "v1", "namespaces"] and (
        len(parts) <= 4 or (len(parts) == 5 and parts[4] in ("status", "finalize"))
    ):
        name = parts[3] if len(parts) > 3 else None
        sub = parts[4] if len(parts) > 4 else None
        return parsing.ParsedPath("", "v1", "namespaces", None, name, sub)
    return _parse_path(path)


parsing.parse_path = _parse_path_with_namespaces


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _selected(obj: dict[str, Any], selector: str | None) -> bool:
    """Equality-based label selectors (``a=b,c=d``), the only kind the operator sends."""
    if not selector:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in selector.split(","):
        key, _, value = term.partition("=")
        if labels.get(key.strip()) != value.strip().lstrip("="):
            return False
    return True


@attrs.define(kw_only=True)
class K8sEmulator(kmock.KubernetesEmulator):
    """KMock's emulator with object metadata, resumable watches, apply and the status subresource."""

    _rv: Iterator[int] = attrs.field(factory=lambda: itertools.count(1), init=False)
    _last_rv: int = attrs.field(default=0, init=False)
    calls: collections.Counter[tuple[str, str]] = attrs.field(factory=collections.Counter, init=False)
    """Requests served, by method and path: what tests and benchmarks count API traffic with."""

    def _next_rv(self) -> str:
        self._last_rv = next(self._rv)
        return str(self._last_rv)

    def _stored(self, request: rendering.Request) -> dict[str, Any] | None:
        key = (request.resource, request.namespace, request.name)
        if key in self._objects and not self._objects[key].deleted:
            return copy.deepcopy(dict(self._objects[key].raw))
        return None

    def _has_status_subresource(self, request: rendering.Request) -> bool:
        return (
            request.resource in self._resources and "status" in self._resources[request.resource].subresources
        )

    async def _handle(self, request: rendering.Request) -> Any:
        self.calls[(str(request.method.value).upper(), request.url.path)] += 1
        # kmock matches every request against its whole request history (quadratic over a long run);
        # requests already being served were matched, so only the newest need to stay.
        del self._requests[:-_KEEP_REQUESTS]
        if request.resource is not None:
            try:
                self._prepare(request)
            except jsonpatch.JsonPatchException as exc:  # a failed "test" op is a client error, not a 500
                return await self._render_error(
                    kmock.KubernetesError(status=422, reason="Invalid", message=str(exc))
                )
        return await super()._handle(request)

    def _prepare(self, request: rendering.Request) -> None:
        """Rewrite the request so the stock emulator stores what a real API server would."""
        headers = {k.lower(): v for k, v in request.headers.items()}
        content_type = (headers.get("content-type") or "").split(";")[0].strip()
        if (
            request.action == enums.action.UPDATE
            and content_type == APPLY_PATCH
            and self._stored(request) is None
        ):
            object.__setattr__(request, "action", enums.action.CREATE)  # apply creates what is missing
        if request.action == enums.action.CREATE and isinstance(request.data, dict):
            data = copy.deepcopy(request.data)
            meta = data.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            if request.namespace and not meta.get("namespace"):
                meta["namespace"] = request.namespace
            meta.update(
                uid=str(uuid.uuid4()), resourceVersion=self._next_rv(), creationTimestamp=_now(), generation=1
            )
            object.__setattr__(request, "data", data)  # frozen attrs; attrs.evolve breaks kmock's matching
        elif request.action == enums.action.UPDATE and request.name:
            current, patch = self._stored(request), request.data
            if current is None or not isinstance(patch, dict | list):
                return
            if isinstance(patch, dict):
                patch = copy.deepcopy(patch)
                if request.subresource == "status":
                    patch = {"status": patch.get("status")}
                elif (
                    request.subresource == "scale"
                ):  # a Scale's spec.replicas is the object's (specReplicasPath)
                    patch = {"spec": {"replicas": (patch.get("spec") or {}).get("replicas")}}
                elif self._has_status_subresource(request):
                    patch.pop("status", None)
            new = dicts.patch_dict(current, patch)
            meta: dict[str, Any] = {"resourceVersion": self._next_rv()}
            if new.get("spec") != current.get("spec"):
                meta["generation"] = int(current.get("metadata", {}).get("generation", 1)) + 1
            if isinstance(patch, dict):
                patch = dicts.patch_dict(patch, {"metadata": meta})
            else:
                patch = [
                    *patch,
                    *({"op": "add", "path": f"/metadata/{k}", "value": v} for k, v in meta.items()),
                ]
            object.__setattr__(request, "data", patch)
        elif request.action == enums.action.DELETE and request.name:
            key = (request.resource, request.namespace, request.name)
            if key in self._objects and not self._objects[key].deleted:
                self._objects[key].patch({"metadata": {"resourceVersion": self._next_rv()}})

    async def _serve_watch(self, request: rendering.Request) -> AsyncIterator[Any]:
        """Replay only objects newer than ``?resourceVersion=``, then stream changes."""
        yield b""
        since = request.params.get("resourceVersion") or ""
        since_n = int(since) if since.isdigit() else 0
        selector = request.params.get("labelSelector")
        async with self._lock:
            objs = [o for o in self._KubernetesEmulator__get_objs(request, strict=False) if not o.deleted]
            events = [
                {"type": "ADDED", "object": o.raw}
                for o in objs
                if int(o.raw.get("metadata", {}).get("resourceVersion") or 0) > since_n
                and _selected(o.raw, selector)
            ]
        for event in events:
            yield event
        assert request.resource is not None
        async for event in self._buses[request.resource]:
            meta = event.get("object", {}).get("metadata", {})
            if self._KubernetesEmulator__check(
                request, request.resource, meta.get("namespace"), meta.get("name"), strict=False
            ) and _selected(event.get("object", {}), selector):
                yield event

    async def _serve_list(self, request: rendering.Request) -> Any:
        result = dict(await super()._serve_list(request))
        resource = request.resource
        assert resource is not None
        info = self._resources[resource] if resource in self._resources else None
        kind = info.kind if info is not None and info.kind else resource.plural.capitalize()
        result["apiVersion"] = f"{resource.group}/{resource.version}" if resource.group else resource.version
        result["kind"] = f"{kind}List"
        result["metadata"] = {"resourceVersion": str(self._last_rv)}
        result["items"] = [i for i in result["items"] if _selected(i, request.params.get("labelSelector"))]
        return result

    async def _serve_version(self, request: rendering.Request) -> Any:
        result = dict(await super()._serve_version(request))
        if request.resource is not None and request.resource.group == "":
            result["groupVersion"] = request.resource.version
        for resource in result.get("resources", []):
            if "/" in resource["name"]:
                resource["shortNames"] = []
                resource["categories"] = []
        return result

    def declare_crd(self, crd: dict[str, Any]) -> None:
        """Serve a CustomResourceDefinition's resource, as a real API server does once it is created."""
        spec, names = crd["spec"], crd["spec"]["names"]
        for version in spec["versions"]:
            self.resources[f"{spec['group']}/{version['name']}/{names['plural']}"] = kmock.ResourceInfo(
                kind=names["kind"],
                singular=names.get("singular"),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                verbs={"create", "delete", "get", "list", "patch", "watch"},
                shortnames=set(names.get("shortNames", [])),
                categories=set(names.get("categories", [])),
                subresources=set((version.get("subresources") or {}).keys()),
            )


class ApiServer:
    """A :class:`K8sEmulator` on a free port in its own thread and loop, with a kubeconfig for it.

    kopf's ``KopfRunner`` blocks the test thread, so the API server cannot share the test's loop.
    """

    def __init__(self, crds: list[Path], namespaces: tuple[str, ...] = ("default",)) -> None:
        self.crds = [yaml.safe_load(p.read_text()) for p in crds]
        self.namespaces = namespaces
        self.emulator: K8sEmulator | None = None
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="kmock")

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported by start(), not lost in the thread
            self._failure = exc
            self._ready.set()

    async def _serve(self) -> None:
        async with K8sEmulator() as emulator, kmock.Server(emulator) as server:
            with warnings.catch_warnings():  # kmock 0.8 reads its bundle with importlib's legacy API
                warnings.filterwarnings("ignore", "read_binary is deprecated", DeprecationWarning)
                emulator.resources.load_bundled()
            for crd in self.crds:
                emulator.declare_crd(crd)
            for ns in self.namespaces:
                emulator.objects["v1/namespaces", None, ns] = {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": ns},
                }
            self.emulator, self.url = emulator, str(server.url).rstrip("/")
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            self._ready.set()
            await self._stop.wait()

    def start(self) -> ApiServer:
        self._thread.start()
        if not self._ready.wait(15) or self._failure is not None:
            raise RuntimeError("KMock did not start") from self._failure
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: kmock, cluster: {{server: '{self.url}'}}}}]\n"
            "contexts: [{name: kmock, context: {cluster: kmock, user: test, namespace: default}}]\n"
            "current-context: kmock\nusers: [{name: test, user: {token: test}}]\n"
        )
        return path

    def call(self, coro: Any) -> Any:
        """Run a coroutine on the API server's loop (to read or change objects consistently)."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)
