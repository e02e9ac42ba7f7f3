"""One server over every pipeline model, shared by the tests that only send it requests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pipelines.models import (
    copy_example_in_processes,
    copy_examples,
    write_bls,
    write_bls_helper,
    write_decoupled_ensembles,
    write_diamond,
    write_reshaped,
    write_sequences,
)
from tests.support import modes
from tests.support.server import ServerProcess

# Every test through a server taking frontend_workers runs in both server modes (tests.support.modes).
frontend_workers = modes.frontend_workers


#: How long each branch of the diamond ensemble takes (the branches must overlap to finish in time).
BRANCH_DELAY = 0.4


@pytest.fixture(scope="package")
def pipelines_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("pipelines")
    copy_examples(repo)
    copy_example_in_processes(repo, "square_int32", "square_processes")
    copy_example_in_processes(repo, "repeat_int32", "repeat_processes")
    write_diamond(repo, BRANCH_DELAY)
    write_reshaped(repo)
    write_decoupled_ensembles(repo)
    write_bls(repo, "bls")
    write_bls(repo, "bls_partner")
    write_bls(repo, "bls_processes", count=2)
    write_bls_helper(repo)
    write_sequences(repo)
    return repo


@pytest.fixture(scope="package")
def server(pipelines_repo: Path, frontend_workers: int) -> Iterator[ServerProcess]:
    with ServerProcess([pipelines_repo], frontend_workers=frontend_workers) as process:
        yield process
