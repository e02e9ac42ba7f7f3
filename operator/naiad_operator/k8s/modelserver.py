"""HTTP calls to one server pod's repository API (Triton's model repository extension).

* ``POST /v2/repository/index`` -> ``[{name, version, state, reason}]`` (models never loaded: name only)
* ``POST /v2/repository/models/{m}/load`` with Naiad's ``parameters``: ``config_override`` (ModelConfig
  JSON merged into config.pbtxt) and ``default_version`` (the pinned version for requests naming none)
* ``POST /v2/repository/models/{m}/unload``
* ``GET /metrics`` on the pod's metrics port -> per-version request counters and latency histograms
  (what a canary step is judged by) and each version's loaded memory (what the perPod choice weighs)

Naiad's ``version_weights`` and ``mirror`` load parameters (JSON text; "" clears) split the requests
that name no version between loaded versions, or shadow a share of them to another version.

A load answers only once the load finished (or failed), which is what lets a rollout move stage by stage.
"""

from __future__ import annotations

import json
import re
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from naiad_operator.api.observed import PodCounters, VersionCounters, VersionObservation, VersionState

_MEMORY = re.compile(r"^nv_model_loaded_memory_bytes\{([^}]*)\}\s+(\S+)")
_LABEL = re.compile(r'(\w+)="([^"]*)"')

#: Load parameter of Naiad's merged-config extension (``naiad.repository.overrides``).
CONFIG_OVERRIDE_PARAMETER = "config_override"
#: Load parameter of Naiad's pinned-default-version extension (``naiad.repository.overrides``).
DEFAULT_VERSION_PARAMETER = "default_version"
#: Load parameters of Naiad's weighted routing and mirroring (``naiad.repository.overrides``).
VERSION_WEIGHTS_PARAMETER = "version_weights"
MIRROR_PARAMETER = "mirror"
#: The families the operator reads from ``/metrics`` (Triton's names, plus Naiad's histogram and its count
#: of successes that were error responses, which a canary's analysis counts as errors).
SUCCESS, FAILURE = "nv_inference_request_success", "nv_inference_request_failure"
ERROR_RESPONSE = "nv_inference_request_error_response"
HISTOGRAM = "nv_inference_request_histogram_ms"


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
        the index, when asked for; models of servers that do not report it are left out)."""
        # (``memory_bytes``: asked for, Naiad adds it; Triton ignores the key)
        entries = await self._post(f"{base}/v2/repository/index", {"memory_bytes": True}, self.timeout) or []
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

    async def memory(self, base: str) -> dict[str, dict[int, int]]:
        """model -> version -> resident bytes its load added (``nv_model_loaded_memory_bytes``)."""
        try:
            async with self._http().get(
                f"{base}/metrics", timeout=aiohttp.ClientTimeout(total=self.timeout)
            ) as r:
                text = await r.text() if r.status == 200 else ""
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ServerCallError(0, f"{type(exc).__name__}: {exc}") from exc
        result: dict[str, dict[int, int]] = {}
        for line in text.splitlines():
            found = _MEMORY.match(line)
            if found:
                labels = dict(_LABEL.findall(found.group(1)))
                version = labels.get("version", "")
                if "model" in labels and version.isdigit():
                    result.setdefault(labels["model"], {})[int(version)] = int(float(found.group(2)))
        return result

    async def load(
        self,
        base: str,
        model: str,
        override: dict[str, Any] | None,
        default_version: int | None,
        routing: dict[str, str] | None = None,
    ) -> None:
        """``override`` is merged into the repository's ``config.pbtxt`` by the server; ``routing``: the
        weights and mirror parameters (:func:`routing_parameters`), when the load sets them."""
        parameters: dict[str, Any] = dict(routing or {})
        if override is not None:
            parameters[CONFIG_OVERRIDE_PARAMETER] = json.dumps(override)
        if default_version is not None:
            parameters[DEFAULT_VERSION_PARAMETER] = default_version
        body = {"parameters": parameters} if parameters else {}
        await self._post(f"{base}/v2/repository/models/{model}/load", body, self.load_timeout)

    async def counters(self, base: str) -> PodCounters:
        """The request counters of every loaded version, from the pod's ``/metrics``."""
        try:
            async with self._http().get(
                f"{base}/metrics", timeout=aiohttp.ClientTimeout(total=self.timeout)
            ) as r:
                text = await r.text()
                if r.status != 200:
                    raise ServerCallError(r.status, f"/metrics answered HTTP {r.status}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ServerCallError(0, f"{type(exc).__name__}: {exc}") from exc
        try:
            return parse_counters(text)
        except ValueError as exc:
            raise ServerCallError(r.status, f"/metrics is not Prometheus text: {exc}") from exc

    async def unload(self, base: str, model: str) -> None:
        await self._post(f"{base}/v2/repository/models/{model}/unload", {}, self.timeout)


def _error_text(text: str) -> str:
    try:
        return str(json.loads(text).get("error") or "")
    except (ValueError, AttributeError):
        return text.strip()[:500]


def routing_parameters(weights: dict[int, int], mirror: tuple[int, int] | None) -> dict[str, str]:
    """The load parameters that set exactly these weights and this mirror ("" clears either)."""
    return {
        VERSION_WEIGHTS_PARAMETER: json.dumps({str(v): w for v, w in weights.items()}) if weights else "",
        MIRROR_PARAMETER: json.dumps({"version": mirror[0], "percent": mirror[1]}) if mirror else "",
    }


def parse_counters(text: str) -> PodCounters:
    """(model, version) -> counters from Prometheus text; failures of every reason are added up, and a
    request a model answered with an error (a success to Triton's counters) moves from success to
    failure."""
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            model, version = sample.labels.get("model"), str(sample.labels.get("version") or "")
            if model is None or not version.isdigit():
                continue
            entry = found.setdefault(
                (model, int(version)), {"success": 0.0, "failure": 0.0, "errors": 0.0, "sum": 0.0, "le": {}}
            )
            if sample.name in (SUCCESS, f"{SUCCESS}_total"):
                entry["success"] += sample.value
            elif sample.name in (FAILURE, f"{FAILURE}_total"):
                entry["failure"] += sample.value
            elif sample.name in (ERROR_RESPONSE, f"{ERROR_RESPONSE}_total"):
                entry["errors"] += sample.value
            elif sample.name == f"{HISTOGRAM}_sum":
                entry["sum"] += sample.value
            elif sample.name == f"{HISTOGRAM}_bucket":
                bound = float(sample.labels["le"])
                entry["le"][bound] = entry["le"].get(bound, 0.0) + sample.value
    return {
        key: VersionCounters(
            e["success"] - e["errors"], e["failure"] + e["errors"], e["sum"], tuple(sorted(e["le"].items()))
        )
        for key, e in found.items()
    }
