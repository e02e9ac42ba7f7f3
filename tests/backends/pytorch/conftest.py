"""Fixtures: PyTorch instances loaded the way the repository loads them, closed after each test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from naiad.backends.base import ModelInstance

from tests.backends.onnxruntime.models import LoadInstance, instance_context
from tests.support.backends import get_backend


@pytest.fixture
def instances() -> Iterator[LoadInstance]:
    """``instances(model_dir, kind="CPU", device_id=0)`` -> a loaded instance, closed when the test ends."""
    loaded: list[ModelInstance] = []

    def load(model_dir: Path, kind: str = "CPU", device_id: int = 0) -> ModelInstance:
        instance = get_backend("pytorch").create_instance(instance_context(model_dir, kind, device_id))
        loaded.append(instance)
        return instance

    yield load
    for instance in loaded:
        instance.close()
