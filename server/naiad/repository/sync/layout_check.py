"""Check a manifest against the Triton layout, and describe each model for the sync summary.

The operator puts this description into the ModelRepository status: one content hash per model
version (the files under ``<model>/<version>/``) and one for the rest of the model folder
(``config.pbtxt``, labels, warmup data), so a rollout can tell which versions really changed.
Problems are errors when Triton would refuse the model (no version folder, a config that does not
parse or names another model) and warnings when it would quietly ignore something.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from naiad.core.errors import InvalidArgumentError
from naiad.repository.config import parse_text
from naiad.repository.layout import CONFIG_FILE
from naiad.repository.sync.snapshot import ManifestEntry


@dataclass(slots=True)
class VersionSummary:
    version: int
    content_hash: str
    size_bytes: int


@dataclass(slots=True)
class ModelSummary:
    name: str
    config_hash: str
    backend: str = ""
    versions: list[VersionSummary] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "valid": not self.errors,
            "backend": self.backend,
            "config_hash": self.config_hash,
            "versions": [
                {"version": v.version, "content_hash": v.content_hash, "size_bytes": v.size_bytes}
                for v in self.versions
            ],
            "errors": self.errors,
            "warnings": self.warnings,
        }


def _hash(files: list[tuple[str, str]]) -> str:
    digest = hashlib.sha256()
    for path, blob in sorted(files):
        digest.update(f"{path}\0{blob}\n".encode())
    return "sha256:" + digest.hexdigest()


def check_layout(
    entries: list[ManifestEntry], read_blob: Callable[[str], bytes]
) -> tuple[list[ModelSummary], list[str]]:
    """Per-model summaries (sorted by name) and repository-level warnings."""
    warnings: list[str] = []
    by_model: dict[str, list[tuple[str, ManifestEntry]]] = defaultdict(list)
    for entry in entries:
        model, _, rest = entry.path.partition("/")
        if not rest:
            warnings.append(f"'{entry.path}' is outside any model folder: Triton ignores it")
        elif not model.startswith("."):
            by_model[model].append((rest, entry))
    summaries = [_summarize(name, files, read_blob) for name, files in sorted(by_model.items())]
    if not summaries:
        warnings.append("the repository holds no model folder")
    return summaries, warnings


def _summarize(
    name: str, files: list[tuple[str, ManifestEntry]], read_blob: Callable[[str], bytes]
) -> ModelSummary:
    model_files: list[tuple[str, str]] = []
    versions: dict[int, list[tuple[str, ManifestEntry]]] = defaultdict(list)
    warnings: list[str] = []
    config_blob = ""
    for rest, entry in files:
        head, _, tail = rest.partition("/")
        if tail or rest.endswith("/"):
            if head.isdigit() and head.isascii():
                if head.startswith("0"):
                    warnings.append(f"version folder '{head}' starts with 0: Triton ignores it")
                else:
                    versions[int(head)].append((tail, entry))
                    continue
            model_files.append((rest, entry.digest))
            continue
        if rest == CONFIG_FILE:
            config_blob = entry.digest
        model_files.append((rest, entry.digest))
    summary = ModelSummary(name, _hash(model_files), warnings=warnings)
    for number in sorted(versions):
        items = versions[number]
        content = [(path, entry.digest) for path, entry in items if path]
        size = sum(entry.size for _, entry in items)
        summary.versions.append(VersionSummary(number, _hash(content), size))
    if not versions:
        summary.errors.append(f"model '{name}' has no numeric version folder")
    if not config_blob:
        summary.warnings.append(
            f"model '{name}' has no {CONFIG_FILE}: it loads only if auto-complete can fill it"
        )
        return summary
    try:
        config = parse_text(read_blob(config_blob).decode("utf-8"), f"{name}/{CONFIG_FILE}")
    except (InvalidArgumentError, UnicodeDecodeError) as exc:
        summary.errors.append(str(exc.message if isinstance(exc, InvalidArgumentError) else exc))
        return summary
    if config.name and config.name != name:
        summary.errors.append(
            f"unexpected directory name '{name}' for model '{config.name}' (its {CONFIG_FILE}), directory "
            "name must equal model name"
        )
    summary.backend = config.backend or config.platform
    return summary
