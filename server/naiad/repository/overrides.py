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
"""

from __future__ import annotations

import base64
import binascii
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from naiad.core.errors import InvalidArgumentError

CONFIG = "config"
#: Load parameter merging JSON into ``config.pbtxt`` (Naiad extension).
CONFIG_OVERRIDE = "config_override"
FILE_PREFIX = "file:"
#: Load parameter pinning the default version (Naiad extension).
DEFAULT_VERSION = "default_version"


class OverrideError(Exception):
    """An override Triton rejects while polling the model (the client gets the generic poll error)."""


@dataclass(frozen=True, slots=True)
class LoadRequest:
    """A parsed load request.  ``sets_default_version`` tells "unpin" (None) from "not mentioned"."""

    config: str | None = None
    files: dict[str, bytes] = field(default_factory=dict)
    default_version: int | None = None
    sets_default_version: bool = False
    config_override: str | None = None


def parse_load_parameters(parameters: Mapping[str, object]) -> LoadRequest:
    """Check and decode the parameters of a load request; INVALID_ARG names the bad one."""
    config: str | None = None
    merged: str | None = None
    files: dict[str, bytes] = {}
    pin: int | None = None
    sets_pin = False
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
        else:
            raise InvalidArgumentError(
                f"unexpected load parameter '{key}': expected '{CONFIG}', '{CONFIG_OVERRIDE}', "
                f"'{FILE_PREFIX}<version>/<name>' or '{DEFAULT_VERSION}'"
            )
    return LoadRequest(config, files, pin, sets_pin, merged)


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
