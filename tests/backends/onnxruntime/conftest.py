"""Fixtures: the example models built into a temporary repository, and instances closed after use."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from naiad.backends.base import ModelInstance

from tests.backends.onnxruntime.models import TRITON_EXAMPLES, LoadInstance, build_examples, instance_context
from tests.support.backends import get_backend


@pytest.fixture(scope="session")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository built by ``scripts/build_examples.py`` (its configs and freshly built models)."""
    out = tmp_path_factory.mktemp("examples")
    build_examples().build_all(out)
    return out


@pytest.fixture(scope="session")
def triton_examples() -> Path:
    """Triton's own example repository, shared with this checkout; tests skip when it is absent."""
    if not TRITON_EXAMPLES.is_dir():
        pytest.skip(f"Triton's example repository is not at {TRITON_EXAMPLES}")
    return TRITON_EXAMPLES


@pytest.fixture
def instances() -> Iterator[LoadInstance]:
    """``instances(model_dir, kind="CPU")`` -> a loaded instance, closed when the test ends."""
    loaded: list[ModelInstance] = []

    def load(model_dir: Path, kind: str = "CPU", device_id: int = 0) -> ModelInstance:
        instance = get_backend("onnxruntime").create_instance(instance_context(model_dir, kind, device_id))
        loaded.append(instance)
        return instance

    yield load
    for instance in loaded:
        instance.close()
