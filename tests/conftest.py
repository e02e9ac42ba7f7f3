"""Shared fixtures: example models built once, and a real server process over the examples."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.server import EXAMPLES, ROOT, ServerProcess


def _build_examples() -> None:
    spec = importlib.util.spec_from_file_location("build_examples", ROOT / "scripts" / "build_examples.py")
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main([])


@pytest.fixture(scope="session")
def frontend_workers() -> int:
    """One process, unless the package runs both modes (:mod:`tests.support.modes`)."""
    return 0


@pytest.fixture(scope="session")
def example_repository() -> Path:
    """``examples/model_repository`` with its ONNX files built."""
    if (ROOT / "scripts" / "build_examples.py").exists():
        _build_examples()
    return EXAMPLES


@pytest.fixture(scope="session")
def example_server(example_repository: Path) -> Iterator[ServerProcess]:
    """One server over the example repository, shared by the tests that only read from it."""
    with ServerProcess([example_repository]) as server:
        yield server
