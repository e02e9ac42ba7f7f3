"""NVIDIA's qa folders whose repository is ``$DATADIR/qa_model_repository`` as a whole:
``L0_server_status`` (server and model metadata, readiness per version and statistics in POLL mode,
before and after version folders are removed) and ``L0_client_nobatch`` (batched and unbatched
requests to batching and non-batching models).

Here that repository is the part NVIDIA's generator makes without TensorFlow or TensorRT
(``gen_qa_models.py --onnx --libtorch``), without the BF16 ONNX graphs (ONNX Runtime has no CPU
kernel for their ``Add``; Triton's CPU build fails to load them the same way, and with
``--exit-on-error`` neither server would start).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from conformance.qa import QA, _unittest
from conformance.qa_batching import _generated
from conformance.runner import Checkouts, Script, Skip, Suite

FOLDER = "L0_server_status"
#: The versions test.sh removes between its two test classes.
REMOVED = ("libtorch_int32_int32_int32/2", "libtorch_int32_int32_int32/3", "onnx_int32_int32_int32/2",
           "onnx_int32_int32_int32/3")  # fmt: skip
SERVER_METADATA = ("test_basic", "test_unknown_model", "test_unknown_model_version")
MODEL_METADATA = ("test_infer_stats_no_model_version", "test_model_versions_deleted")

GENERATED_SKIPS = (
    *(
        Skip(f"{QA}{FOLDER}/server_status_test.py::{case}", "its models include TensorRT plans (image-only)")
        for case in (
            "ServerMetadataTest.test_model_latest_infer",
            "ServerMetadataTest.test_model_specific_infer",
            "ModelMetadataTest.test_model_versions_added",
        )
    ),
    Skip(
        f"{QA}{FOLDER}/server_status_test.py::ModelMetadataTest.test_infer_stats_no_model",
        "counts the statistics of every version of the whole qa_model_repository (144, with its TensorFlow "
        "and TensorRT models); here the repository's 79 ready versions get 79 (checked by hand)",
    ),
    Skip(
        f"{QA}L0_client_nobatch/test.sh: ./client_test",
        "a C++ client NVIDIA's image builds; client_test.py runs",
    ),
)


def _qa_model_repository(checkouts: Checkouts, repo: Path, prefix: str = "") -> None:
    """``cp -r $DATADIR/qa_model_repository/<prefix>* models/.`` (see the module's note)."""
    generated = _generated(checkouts, repo.parent.parent, "gen_qa_models.py", "--onnx", "--libtorch")
    for model in sorted(generated.glob(f"{prefix}*")):
        if model.is_dir() and "bf16" not in model.name:
            shutil.copytree(model, repo / model.name)


def client_nobatch(checkouts: Checkouts) -> Suite:
    """test.sh's ``cp -r $DATADIR/qa_model_repository/onnx_* models/.``, then ``client_test.py``."""
    folder = "L0_client_nobatch"
    script = _unittest(checkouts, folder, "client_test.py")
    return Suite("qa-client_nobatch", lambda repo: _qa_model_repository(checkouts, repo, "onnx_"), (script,))


def server_status(checkouts: Checkouts) -> Suite:
    """test.sh's steps: serve the repository (POLL, every second), run ``ServerMetadataTest``, remove
    two versions of two models and ask for the index, run ``ModelMetadataTest``; each runnable case
    on its own (``TRITON_SERVER_VERSION``, which NVIDIA's CI exports, is the version Naiad reports)."""

    def build(repo: Path) -> None:
        _qa_model_repository(checkouts, repo)

    env = {"TRITON_SERVER_VERSION": "2.51.0"}
    remove = " ".join(f'"$SUITE/models/{version}"' for version in REMOVED)
    between = Script(
        f"{QA}{FOLDER}/test.sh: versions 2 and 3 removed, then the index",
        (
            "sh",
            "-c",
            f"rm -fr {remove} && sleep 3 && curl -sf -X POST http://localhost:8000/v2/repository/index",
        ),
        checkouts.qa / FOLDER,
        fixed_ports=True,
    )

    def case(name: str) -> Script:
        return _unittest(checkouts, FOLDER, "server_status_test.py", name, env)

    return Suite(
        "qa-server_status",
        build,
        (
            *(case(f"ServerMetadataTest.{name}") for name in SERVER_METADATA),
            between,
            *(case(f"ModelMetadataTest.{name}") for name in MODEL_METADATA),
        ),
        ("--repository-poll-secs=1", "--model-control-mode=poll"),
        script_env={"SUITE": "{suite}"},
    )
