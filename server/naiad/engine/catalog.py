"""The engine's published models as a :class:`~naiad.ipc.messages.Catalog`, and how a worker rebuilds them.

The catalog is built from the engine's :class:`~naiad.repository.registry.ModelRegistry` (what is
published, with each model's routing of requests naming no version).  A worker publishes it into a
registry of its own and answers metadata, config and model readiness, and makes the checks that come
before decoding a request, with the same resolution the engine uses.  The engine sends a new catalog
whenever :func:`digest` changes.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from pathlib import Path

import msgspec
import orjson

from naiad.core.signature import ModelSignature, TensorSpec
from naiad.ipc.messages import Catalog, MirrorEntry, ModelEntry, VersionEntry
from naiad.repository.config import ModelConfig
from naiad.repository.model import Model, ModelState, ModelVersion
from naiad.repository.routing import Mirror


class SignatureMsg(msgspec.Struct, array_like=True):
    name: str
    max_batch_size: int
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]


def digest(models: Mapping[str, Model], ready: bool, started: bool) -> Hashable:
    """What a catalog depends on, cheap enough to compare a few times a second."""
    return (
        ready,
        started,
        tuple(
            (
                name,
                id(model),
                model.default_version,
                None if model.version_weights is None else tuple(model.version_weights.items()),
                model.mirror,
                model.reason,
                tuple((v, mv.state, mv.reason, id(mv)) for v, mv in model.versions.items()),
            )
            for name, model in models.items()
        ),
    )


def catalog(catalog_id: int, models: Mapping[str, Model], ready: bool, started: bool) -> Catalog:
    return Catalog(catalog_id, [_entry(model) for model in models.values()], ready, started)


def _entry(model: Model) -> ModelEntry:
    signature = b""
    if model.signature is not None:
        s = model.signature
        signature = msgspec.msgpack.encode(
            SignatureMsg(s.name, s.max_batch_size, list(s.inputs), list(s.outputs))
        )
    return ModelEntry(
        model.name,
        str(model.path),
        model.config.SerializeToString() if model.config is not None else b"",
        orjson.dumps(model.config_json) if model.config_json is not None else b"",
        signature,
        [
            VersionEntry(
                v,
                mv.state.value,
                mv.reason,
                str(mv.model_dir) if mv.model_dir is not None else None,
                mv.checked,
            )
            for v, mv in model.versions.items()
        ],
        model.reason,
        model.default_version,
        model.version_weights,
        None if model.mirror is None else MirrorEntry(model.mirror.version, model.mirror.percent),
        model.namespace,
    )


def models(message: Catalog) -> dict[str, Model]:
    """The models a catalog describes (no schedulers: requests go to the engine)."""
    rebuilt: dict[str, Model] = {}
    for entry in message.models:
        config: ModelConfig | None = None
        if entry.config or entry.config_json:
            config = ModelConfig()
            config.ParseFromString(entry.config)
        signature = None
        if entry.signature:
            s = msgspec.msgpack.decode(entry.signature, type=SignatureMsg)
            signature = ModelSignature(s.name, s.max_batch_size, tuple(s.inputs), tuple(s.outputs))
        versions = {
            v.version: ModelVersion(
                v.version,
                ModelState(v.state),
                v.reason,
                model_name=entry.name,
                model_dir=Path(v.model_dir) if v.model_dir is not None else None,
                checked=v.checked,
            )
            for v in entry.versions
        }
        model = Model(
            entry.name,
            Path(entry.path),
            config=config,
            signature=signature,
            versions=versions,
            reason=entry.reason,
            config_json=orjson.loads(entry.config_json) if entry.config_json else None,
            default_version=entry.default_version,
            version_weights=entry.version_weights,
            mirror=None if entry.mirror is None else Mirror(entry.mirror.version, entry.mirror.percent),
            namespace=entry.namespace,
        )
        rebuilt[model.key] = model
    return rebuilt
