"""An ``instances`` fixture that loads Python model instances and always closes them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from naiad.backends.python.instance import PythonModelInstance

from tests.backends.python.models import LoadInstance, instance_context
from tests.support.backends import get_backend


@pytest.fixture
def instances() -> Iterator[LoadInstance]:
    """``instances(model_dir, index=0)`` -> a loaded instance, closed when the test ends."""
    loaded: list[PythonModelInstance] = []

    def load(model_dir: Path, index: int = 0) -> PythonModelInstance:
        instance = get_backend("python").create_instance(instance_context(model_dir, index))
        loaded.append(instance)
        return instance

    yield load
    for instance in loaded:
        instance.close()
