"""Triton's ``--backend-config``: the command line's settings for backends, resolved per backend.

Users tune Triton's backends from the command line, and scripts written for Triton keep doing so
against Naiad: ``--backend-config=onnxruntime,default-max-batch-size=0`` stops auto-complete from
making an ONNX model batch, ``enable-global-threadpool`` puts every ONNX session on one set of
threads.  The rules are Triton core's, so that a setting reaches the same backends with the same
value:

* ``<backend>,<setting>=<value>`` is a backend's own, ``<setting>=<value>`` is global; the last of
  the same name wins;
* the server adds three globals of its own after the user's (``auto-complete-config``,
  ``min-compute-capability``, ``backend-directory``), which therefore override them;
* a backend gets the global settings overridden by its own, sorted by name, and
  ``default-max-batch-size=4`` when neither sets it; a Python-based backend gets the ``python``
  backend's.

Each backend reads what it knows (:class:`~naiad.backends.onnxruntime.OnnxRuntimeBackend`) and logs
what it got, as Triton's ONNX Runtime and Python backends do (``backend configuration:`` and the JSON
``{"cmdline": {...}}``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

import orjson

log = logging.getLogger(__name__)

#: Triton core's defaults, given to every backend that is not told otherwise.
DEFAULTS = {"default-max-batch-size": "4"}
#: The compute capability Triton writes into ``min-compute-capability`` (its build's floor, also on
#: a CPU build); Naiad uses every GPU it sees and has no floor of its own.
MIN_COMPUTE_CAPABILITY = 6.0


def parse_option(text: str) -> tuple[str, str, str]:
    """``(backend, setting, value)`` of one ``--backend-config`` (``backend`` is "" for a global
    setting); ``ValueError`` with Triton's words when the text has no such form."""
    comma = text.find(",")
    equals = text.find("=", comma + 1)
    if comma == 0:
        raise ValueError(
            "No backend specified. --backend-config option format is <backend name>,<setting>=<value> or "
            f"<setting>=<value>. Got {text}"
        )
    setting, value = text[comma + 1 : equals], text[equals + 1 :]
    if equals < 0 or not setting or not value:
        raise ValueError(f"--backend-config option format is '<backend name>,<setting>=<value>'. Got {text}")
    return text[:comma] if comma > 0 else "", setting, value


class BackendSettings:
    """Every backend's settings from the command line and the server's own globals."""

    def __init__(
        self,
        options: Iterable[str] = (),
        *,
        auto_complete: bool = True,
        backend_directory: Path | None = None,
    ) -> None:
        self._by_backend: dict[str, dict[str, str]] = {}
        for text in options:
            backend, setting, value = parse_option(text)
            self._by_backend.setdefault(backend, {})[setting] = value
        server = self._by_backend.setdefault("", {})
        server["auto-complete-config"] = "true" if auto_complete else "false"
        server["min-compute-capability"] = f"{MIN_COMPUTE_CAPABILITY:f}"
        server["backend-directory"] = str(backend_directory or "")

    def of(self, backend: str) -> dict[str, str]:
        """The settings ``backend`` gets: the global ones, its own over them (sorted by name), then
        the defaults neither sets."""
        merged = {**self._by_backend[""], **self._by_backend.get(backend, {})}
        resolved = dict(sorted(merged.items()))
        for setting, value in DEFAULTS.items():
            resolved.setdefault(setting, value)
        return resolved

    def announce(self, backend: str) -> None:
        """Triton's verbose lines for a model being made on ``backend``: which defaults the command
        line overrode and which were added (users read them to see what their flags did)."""
        if not log.isEnabledFor(logging.DEBUG):
            return
        given = {**self._by_backend[""], **self._by_backend.get(backend, {})}
        for setting, default in DEFAULTS.items():
            if setting in given:
                log.debug("Found overwritten default setting: %s,%s", setting, given[setting])
            else:
                log.debug("Adding default backend config setting: %s,%s", setting, default)

    def describe(self, backend: str) -> str:
        """The backend's configuration as Triton hands it to a backend (and its backends log it)."""
        return orjson.dumps({"cmdline": self.of(backend)}).decode()
