"""HTTP calls to one server pod's repository API (Triton's model repository extension).

* ``POST /v2/repository/index`` -> ``[{name, version, state, reason}]`` (models never loaded: name only)
* ``POST /v2/repository/models/{m}/load`` with ``parameters``: ``config`` (ModelConfig JSON that replaces
  config.pbtxt) and Naiad's ``default_version`` (the pinned version for requests naming none)
* ``POST /v2/repository/models/{m}/unload``
* ``GET /v2/models/{m}/config`` -> the loaded config (the base the operator edits the version policy of)

A load answers only once the load finished (or failed), which is what lets a rollout move stage by stage.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from naiad_operator.api.observed import VersionObservation, VersionState

#: Load parameter of Naiad's pinned-default-version extension (``naiad.repository.overrides``).
DEFAULT_VERSION_PARAMETER = "default_version"


class ServerCallError(Exception):
    """A pod answered with an error (``status`` > 0) or not at all (``status`` 0)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ModelServer:
    """One aiohttp session for all pods; each call names the pod's base URL."""

    def __init__(self, timeout: float, load_timeout: float) -> None:
        self._session: aiohttp.ClientSession | None = None
        self.timeout = timeout
        self.load_timeout = load_timeout

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _post(self, url: str, body: dict[str, Any], timeout: float) -> Any:
        try:
            async with self._http().post(url, json=body, timeout=aiohttp.ClientTimeout(total=timeout)) as r:
                text = await r.text()
                if r.status != 200:
                    raise ServerCallError(r.status, _error_text(text) or f"HTTP {r.status}")
                return json.loads(text) if text.strip() else None
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise ServerCallError(0, f"{type(exc).__name__}: {exc}") from exc

    async def index(self, base: str) -> dict[str, dict[int, VersionObservation]]:
        """model -> version -> state; models listed by name only are left out."""
        return (await self.index_with_memory(base))[0]

    async def index_with_memory(
        self, base: str
    ) -> tuple[dict[str, dict[int, VersionObservation]], dict[str, int]]:
        """:meth:`index`, and model -> the ``memory_bytes`` its READY versions report (a Naiad field of
        the index; models of servers that do not report it are left out)."""
        entries = await self._post(f"{base}/v2/repository/index", {}, self.timeout) or []
        models: dict[str, dict[int, VersionObservation]] = {}
        memory: dict[str, int] = {}
        for entry in entries:
            version = str(entry.get("version") or "")
            if not version.isdigit():
                continue
            try:
                state = VersionState(entry.get("state") or "UNKNOWN")
            except ValueError:
                state = VersionState.UNKNOWN
            models.setdefault(entry["name"], {})[int(version)] = VersionObservation(
                state, entry.get("reason") or ""
            )
            size = entry.get("memory_bytes")
            if state is VersionState.READY and isinstance(size, int):
                memory[entry["name"]] = memory.get(entry["name"], 0) + size
        return models, memory

    async def config(self, base: str, model: str) -> dict[str, Any] | None:
        """The loaded config of ``model``, or None when it is not loaded there."""
        try:
            async with self._http().get(
                f"{base}/v2/models/{model}/config", timeout=aiohttp.ClientTimeout(total=self.timeout)
            ) as r:
                if r.status != 200:
                    return None
                result: dict[str, Any] = await r.json(content_type=None)
                return result
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise ServerCallError(0, f"{type(exc).__name__}: {exc}") from exc

    async def load(
        self, base: str, model: str, config: dict[str, Any] | None, default_version: int | None
    ) -> None:
        parameters: dict[str, Any] = {}
        if config is not None:
            parameters["config"] = json.dumps(config)
        if default_version is not None:
            parameters[DEFAULT_VERSION_PARAMETER] = default_version
        body = {"parameters": parameters} if parameters else {}
        await self._post(f"{base}/v2/repository/models/{model}/load", body, self.load_timeout)

    async def unload(self, base: str, model: str) -> None:
        await self._post(f"{base}/v2/repository/models/{model}/unload", {}, self.timeout)


def _error_text(text: str) -> str:
    try:
        return str(json.loads(text).get("error") or "")
    except (ValueError, AttributeError):
        return text.strip()[:500]
