"""The parameters of a load request: Triton's ``config`` and ``file:`` overrides, and the pinned default.

* ``config`` (string): ModelConfig JSON that replaces ``config.pbtxt`` (proto JSON, so int64 values may
  be strings, e.g. ``{"max_batch_size": "16"}``).
* ``file:<version>/<name>``: the content of one file; with any of these the model is loaded from a
  temporary folder holding exactly these files, and ``config`` is required.  Over HTTP the value is
  base64 text, over gRPC raw bytes: a ``str`` value is decoded as base64, a ``bytes`` value taken as is.
* ``config_override`` (Naiad extension, :data:`CONFIG_OVERRIDE`): ModelConfig JSON merged into the
  repository's ``config.pbtxt`` (objects merge key by key; lists, values and ``version_policy``, whose
  members are alternatives, replace). Unlike ``config`` it needs no copy of the whole configuration, so a
  model that cannot load from ``config.pbtxt`` alone can still be loaded with the fix, and new content
  under an old version number is read with its override in one load. Ignored when ``config`` is given.
* ``default_version`` (Naiad extension, :data:`DEFAULT_VERSION`): the version that serves requests
  naming no version, instead of the highest READY one.  An integer or a string of digits pins it; an
  empty string or ``-1`` returns to Triton's rule.  The pin is kept across later loads that do not
  mention it, as long as that version stays loaded; a load that pins a version it does not load fails
  and changes nothing.  The operator uses it for make-before-break version rollouts: load
  ``specific: [old, new]`` with ``default_version`` still ``old``, wait for ``new`` to be READY, then
  load again with ``default_version: new`` (nothing reloads) and finally ``specific: [new]``.
* ``version_weights`` (Naiad extension, :data:`VERSION_WEIGHTS`): a JSON object string mapping versions
  (strings of digits) to non-negative integer weights, e.g. ``{"1": 90, "2": 10}``: requests naming no
  version are spread over the READY versions by weight (a canary); ``""`` clears it.
* ``mirror`` (Naiad extension, :data:`MIRROR`): a JSON object string ``{"version": 2, "percent": 5}``:
  that share of requests naming no version is also run, in the background, on that version, and its
  answer dropped (a shadow); ``""`` clears it.

The last two follow ``default_version``'s rules: kept across loads that do not mention them while the
versions they name stay loaded, and a load naming a version it does not load fails and changes nothing.
How requests are routed with them: :mod:`naiad.repository.routing`.
"""

from __future__ import annotations

import base64
import binascii
import json
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from naiad.core.errors import InvalidArgumentError
from naiad.repository.routing import Mirror

CONFIG = "config"
#: Load parameter merging JSON into ``config.pbtxt`` (Naiad extension).
CONFIG_OVERRIDE = "config_override"
FILE_PREFIX = "file:"
#: Load parameter pinning the default version (Naiad extension).
DEFAULT_VERSION = "default_version"
#: Load parameter spreading requests naming no version over versions by weight (Naiad extension).
VERSION_WEIGHTS = "version_weights"
#: Load parameter copying a share of requests naming no version to a shadow version (Naiad extension).
MIRROR = "mirror"


class OverrideError(Exception):
    """An override Triton rejects while polling the model (the client gets the generic poll error)."""


@dataclass(frozen=True, slots=True)
class LoadRequest:
    """A parsed load request.  ``sets_*`` tell "clear" (None) from "not mentioned"."""

    config: str | None = None
    files: dict[str, bytes] = field(default_factory=dict)
    default_version: int | None = None
    sets_default_version: bool = False
    version_weights: dict[int, int] | None = None
    sets_version_weights: bool = False
    mirror: Mirror | None = None
    sets_mirror: bool = False
    config_override: str | None = None

    def named_versions(self) -> dict[str, set[int]]:
        """The versions each routing parameter of this request names (they must all be loaded)."""
        named: dict[str, set[int]] = {}
        if self.default_version is not None:
            named[DEFAULT_VERSION] = {self.default_version}
        if self.version_weights is not None:
            named[VERSION_WEIGHTS] = set(self.version_weights)
        if self.mirror is not None:
            named[MIRROR] = {self.mirror.version}
        return named


def parse_load_parameters(parameters: Mapping[str, object]) -> LoadRequest:
    """Check and decode the parameters of a load request; INVALID_ARG names the bad one."""
    config: str | None = None
    merged: str | None = None
    files: dict[str, bytes] = {}
    pin: int | None = None
    sets_pin = False
    weights: dict[int, int] | None = None
    sets_weights = False
    mirror: Mirror | None = None
    sets_mirror = False
    for key, value in parameters.items():
        if key in (CONFIG, CONFIG_OVERRIDE):
            if isinstance(value, bytes):
                value = value.decode("utf-8", errors="replace")
            if not isinstance(value, str):
                raise InvalidArgumentError(f"Unable to parse '{key}': expected a string")
            if key == CONFIG:
                config = value
            else:
                merged = value
        elif key.startswith(FILE_PREFIX):
            files[key[len(FILE_PREFIX) :]] = _file_content(key, value)
        elif key == DEFAULT_VERSION:
            pin, sets_pin = _version(value), True
        elif key == VERSION_WEIGHTS:
            weights, sets_weights = _weights(value), True
        elif key == MIRROR:
            mirror, sets_mirror = _mirror(value), True
        else:
            raise InvalidArgumentError(
                f"unexpected load parameter '{key}': expected '{CONFIG}', '{CONFIG_OVERRIDE}', "
                f"'{FILE_PREFIX}<version>/<name>', '{DEFAULT_VERSION}', '{VERSION_WEIGHTS}' or '{MIRROR}'"
            )
    return LoadRequest(config, files, pin, sets_pin, weights, sets_weights, mirror, sets_mirror, merged)


def _file_content(key: str, value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgumentError(f"Unable to parse '{key}': the value is not valid base64") from None
    raise InvalidArgumentError(f"Unable to parse '{key}': expected base64 text or bytes")


def _version(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and (value.isdigit() or value in ("", "-1")):
        number = int(value) if value else -1
    else:
        raise InvalidArgumentError(f"Unable to parse '{DEFAULT_VERSION}': expected a version number")
    if number == -1:
        return None
    if number < 1:
        raise InvalidArgumentError(f"Unable to parse '{DEFAULT_VERSION}': versions start at 1")
    return number


def _json_object(key: str, value: object) -> dict[str, object] | None:
    """The JSON object a routing parameter carries; ``None`` for ``""`` (clear)."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if not isinstance(value, str):
        raise InvalidArgumentError(f"Unable to parse '{key}': expected a JSON object string")
    if not value.strip():
        return None
    try:
        parsed = json.loads(value)
    except ValueError:
        raise InvalidArgumentError(f"Unable to parse '{key}': the value is not valid JSON") from None
    if not isinstance(parsed, dict):
        raise InvalidArgumentError(f"Unable to parse '{key}': expected a JSON object")
    return parsed


def _weights(value: object) -> dict[int, int] | None:
    parsed = _json_object(VERSION_WEIGHTS, value)
    if parsed is None:
        return None
    weights: dict[int, int] = {}
    for version, weight in parsed.items():
        if not (version.isascii() and version.isdigit()) or int(version) < 1:
            raise InvalidArgumentError(
                f"Unable to parse '{VERSION_WEIGHTS}': '{version}' is not a version number"
            )
        if not isinstance(weight, int) or isinstance(weight, bool) or weight < 0:
            raise InvalidArgumentError(
                f"Unable to parse '{VERSION_WEIGHTS}': the weight of version {version} must be a "
                "non-negative integer"
            )
        weights[int(version)] = weight
    if sum(weights.values()) == 0:
        raise InvalidArgumentError(f"Unable to parse '{VERSION_WEIGHTS}': the weights sum to 0")
    return dict(sorted(weights.items()))


def _mirror(value: object) -> Mirror | None:
    parsed = _json_object(MIRROR, value)
    if parsed is None:
        return None
    if set(parsed) != {"version", "percent"}:
        raise InvalidArgumentError(
            f"Unable to parse '{MIRROR}': expected exactly the keys 'version' and 'percent'"
        )
    version, percent = parsed["version"], parsed["percent"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise InvalidArgumentError(f"Unable to parse '{MIRROR}': 'version' must be a version number")
    if not isinstance(percent, int | float) or isinstance(percent, bool) or not 0 <= percent <= 100:
        raise InvalidArgumentError(f"Unable to parse '{MIRROR}': 'percent' must be a number from 0 to 100")
    return Mirror(version, float(percent))


def write_model_files(name: str, files: dict[str, bytes]) -> tuple[Path, Path]:
    """Write the ``file:`` overrides into a fresh temporary folder: ``(scratch root, model dir)``.

    Paths must stay inside the model folder; anything else is an :class:`OverrideError`.
    """
    scratch = Path(tempfile.mkdtemp(prefix="naiad-override-"))
    model_dir = scratch / name
    try:
        for relative, content in files.items():
            # Triton joins the path to the model folder, so "file:/1/model.py" is "file:1/model.py"
            parts = relative.lstrip("/").split("/")
            if not relative or any(p in ("", ".", "..") for p in parts):
                raise OverrideError(f"invalid file override path '{relative}'")
            target = model_dir.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
    except (OverrideError, OSError) as exc:
        shutil.rmtree(scratch, ignore_errors=True)
        raise OverrideError(str(exc)) from exc
    model_dir.mkdir(exist_ok=True)
    return scratch, model_dir
