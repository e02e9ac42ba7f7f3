"""NVIDIA's qa folders about what the ONNX Runtime backend does with a model's graph:
``L0_initializer_as_input`` (an initializer declared as an optional input: the graph's stored value
when a request leaves it out, the request's when it sends one), on the model committed in the folder."""

from __future__ import annotations

from pathlib import Path

from conformance.models import copy_model
from conformance.qa import _unittest
from conformance.runner import Checkouts, Suite


def initializer_as_input(checkouts: Checkouts) -> Suite:
    """test.sh serves the folder's own ``models`` and runs ``test.py``."""
    folder = "L0_initializer_as_input"

    def build(repo: Path) -> None:
        copy_model(checkouts.qa / folder / "models" / "add_with_initializer", repo)

    return Suite("qa-initializer_as_input", build, (_unittest(checkouts, folder, "test.py"),))
