"""NVIDIA's ``qa/L0_server_status``: server and model metadata, readiness per version and statistics
on a repository served in POLL mode, before and after version folders are removed from it.

Its repository is ``$DATADIR/qa_model_repository``: here the part NVIDIA's generator makes without
TensorFlow or TensorRT (``gen_qa_models.py --onnx --libtorch``), without the BF16 ONNX graphs (ONNX
Runtime has no CPU kernel for their ``Add``; Triton's CPU build fails to load them the same way, and
with ``--exit-on-error`` neither server would start).
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

STATUS_SKIPS = (
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
)


def server_status(checkouts: Checkouts) -> Suite:
    """test.sh's steps: serve the repository (POLL, every second), run ``ServerMetadataTest``, remove
    two versions of two models and ask for the index, run ``ModelMetadataTest``; each runnable case
    on its own (``TRITON_SERVER_VERSION``, which NVIDIA's CI exports, is the version Naiad reports)."""

    def build(repo: Path) -> None:
        generated = _generated(checkouts, repo.parent.parent, "gen_qa_models.py", "--onnx", "--libtorch")
        for model in sorted(generated.iterdir()):
            if model.is_dir() and "bf16" not in model.name:
                shutil.copytree(model, repo / model.name)

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
