"""Real-cluster tests: opt-in with ``E2E=1`` and a kubeconfig; skipped with the reason otherwise.

No cluster can run where CI runs (no container engine), so these never run there; see e2e/README.md for
a kind setup that runs them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _skip_reason() -> str | None:
    if os.environ.get("E2E") != "1":
        return "real-cluster tests are opt-in: set E2E=1 (and KUBECONFIG) to run them"
    if shutil.which("kubectl") is None:
        return "E2E=1 but kubectl is not on PATH"
    kubeconfig = Path(os.environ.get("KUBECONFIG", Path.home() / ".kube" / "config"))
    if not kubeconfig.exists():
        return f"E2E=1 but there is no kubeconfig at {kubeconfig}"
    done = subprocess.run(["kubectl", "version", "--request-timeout=5s"], capture_output=True, text=True)
    if done.returncode != 0:
        return f"E2E=1 but the cluster does not answer: {done.stderr.strip()[:200]}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = _skip_reason()
    if reason is not None:
        for item in items:
            item.add_marker(pytest.mark.skip(reason=reason))
