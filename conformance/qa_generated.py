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

import ast
import re
import shutil
from dataclasses import replace
from functools import partial
from pathlib import Path

from conformance.models import copy_model, edit_config, place_python_model
from conformance.qa import QA, STAND_IN_BACKENDS, _unittest
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


#: What ``L0_infer``'s test.sh serves here: its ``BACKENDS`` but TensorRT (image-only) and OpenVINO (no
#: such backend); ``python`` and ``python_dlpack`` are qa's Python models under the ONNX models' configs.
INFER_BACKENDS = "onnx libtorch python python_dlpack"
#: Of qa's ``ensemble_models``, those test.sh copies when ONNX and TorchScript are served.
_FFF, _IFF = "float32_float32_float32", "int32_float32_float32"
INFER_ENSEMBLES = (
    f"wrong_label_{_IFF}", f"label_override_{_IFF}", f"mix_type_{_IFF}", f"batch_to_nobatch_{_FFF}",
    f"batch_to_nobatch_nobatch_{_FFF}", f"nobatch_to_batch_{_FFF}", f"nobatch_to_batch_nobatch_{_FFF}",
    f"mix_nobatch_batch_{_FFF}", f"mix_platform_{_FFF}", f"mix_ensemble_{_IFF}",
)
#: The types for which test.sh's Python models subtract and add (``sub_add``) instead.
SWAPPED = ("float32", "int32", "int16", "int8")


def _infer_repository(checkouts: Checkouts, repo: Path) -> None:
    """test.sh's ``generate_model_repository`` for the CPU target: the ONNX and TorchScript models of
    ``qa_model_repository``; for each ONNX model a Python one of its name with ``python`` (and
    ``python_dlpack``) for ``onnx``, its config's platform dropped and ``version_policy`` made
    ``backend: "python"``, running qa's ``add_sub`` (``sub_add`` for the four swapped types; the
    ``dlpack_`` ones for ``python_dlpack``); the ensembles of ``gen_qa_models.py --ensemble`` over
    those backends, the ``nop`` models (on the identity stand-in, a version folder each), qa's ten
    ensemble models; every config a ``KIND_CPU`` instance group; ``custom_zero_1_float32`` and its
    ``nobatch`` copy (max batch size 8 and 0, variable dims) on the identity stand-in."""
    work = repo.parent.parent
    generated = _generated(checkouts, work, "gen_qa_models.py", "--onnx", "--libtorch")
    models = checkouts.qa / "python_models"
    for backend in INFER_BACKENDS.split():
        if backend.startswith("python"):
            for onnx in sorted(generated.glob("onnx_*")):
                if not onnx.is_dir() or "bf16" in onnx.name:
                    continue
                name = onnx.name.replace("onnx", backend)
                kind = name.removeprefix(f"{backend}_").removeprefix("nobatch_")
                swapped = kind in {f"{t}_{t}_{t}" for t in SWAPPED}
                source = "sub_add" if swapped else "add_sub"
                if backend == "python_dlpack":
                    source = f"dlpack_{source}"
                model = place_python_model(repo, name, models / source / "model.py")
                text = (onnx / "config.pbtxt").read_text()
                text = re.sub("platform:.*", "", text)
                text = re.sub("version_policy.*", 'backend: "python"', text)
                (model / "config.pbtxt").write_text(text.replace("onnx", backend))
                shutil.copyfile(onnx / "output0_labels.txt", model / "output0_labels.txt")
        else:
            for model in sorted(generated.glob(f"{backend}*")):
                if model.is_dir() and "bf16" not in model.name:
                    shutil.copytree(model, repo / model.name)
    ensembles = _generated(checkouts, work, "gen_qa_models.py", "--ensemble")
    for backend in ("onnx", "libtorch"):
        for model in sorted(ensembles.glob(f"*{backend}*")):
            if not (repo / model.name).exists():
                shutil.copytree(model, repo / model.name)
    for nop in sorted(ensembles.glob("nop_*")):
        shutil.copytree(nop, repo / nop.name)
        (repo / nop.name / "1").mkdir(exist_ok=True)  # test.sh's create_nop_version_dir
        edit_config(repo / nop.name, ("^platform:.*", 'backend: "identity"'))
    for name in INFER_ENSEMBLES:
        copy_model(checkouts.qa / "ensemble_models" / name, repo)
        (repo / name / "1").mkdir(exist_ok=True)
    for backend in INFER_BACKENDS.split():
        for model in repo.glob(f"{backend}*"):
            (model / "config.pbtxt").open("a").write("instance_group [ { kind: KIND_CPU }]\n")
    custom = copy_model(checkouts.qa / "custom_models" / "custom_zero_1_float32", repo)
    (custom / "1").mkdir(exist_ok=True)
    (custom / "config.pbtxt").open("a").write("instance_group [ { kind: KIND_CPU }]\n")
    nobatch = copy_model(custom, repo, "custom_nobatch_zero_1_float32")
    edit_config(custom, ("max_batch_size: 1", "max_batch_size: 8"), (r"dims: \[ 1 \]", "dims: [ -1 ]"))
    edit_config(nobatch, ("custom_zero_1_float32", "custom_nobatch_zero_1_float32"),
                ("max_batch_size: 1", "max_batch_size: 0"),
                (r"dims: \[ 1 \]", "dims: [ -1, -1 ]"))  # fmt: skip


def _cases(test_file: Path) -> list[tuple[str, bool]]:
    """The test methods of ``test_file``, each with whether it is defined only without shared memory (under
    an ``if`` that names ``TEST_SYSTEM_SHARED_MEMORY``: the file defines them conditionally)."""
    found: list[tuple[str, bool]] = []

    def walk(nodes: list[ast.stmt], without_shm: bool) -> None:
        for node in nodes:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
                found.append((node.name, without_shm))
            elif isinstance(node, ast.If):
                walk(node.body, without_shm or "TEST_SYSTEM_SHARED_MEMORY" in ast.unparse(node.test))
            elif isinstance(node, ast.ClassDef):
                walk(node.body, without_shm)

    walk(ast.parse(test_file.read_text()).body, False)
    return found


def infer_suites(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_infer as its test.sh runs it on a CPU-only server (``TRITON_SERVER_CPU_ONLY``): every case of
    ``infer_test.py`` on its own, over HTTP and gRPC, the tensors in the requests; then again with
    ``TEST_SYSTEM_SHARED_MEMORY=1`` (the tensors in system shared memory, ``--allow-client-shm``)."""
    folder = "L0_infer"
    test_file = "infer_test.py"
    cases = _cases(checkouts.qa / folder / test_file)
    suites = []
    for label, shm, args in (("", "0", ()), ("-system_shm", "1", ("--allow-client-shm=true",))):
        env = {"BACKENDS": INFER_BACKENDS, "ENSEMBLES": "1", "TRITON_SERVER_CPU_ONLY": "1",
               "TEST_SYSTEM_SHARED_MEMORY": shm}  # fmt: skip
        chosen = [case for case, without_shm in cases if shm == "0" or not without_shm]
        scripts = tuple(_unittest(checkouts, folder, test_file, f"InferTest.{case}", env) for case in chosen)
        if shm == "1":
            scripts = tuple(replace(s, name=f"{s.name} [system shared memory]") for s in scripts)
        backends = (f"--backend-directory={STAND_IN_BACKENDS}", "--exit-timeout-secs=120", *args)
        build = partial(_infer_repository, checkouts)
        # ~200 loads, 160 of them Python models of two instances, half of which import torch: ~4
        # minutes on two cores (test.sh gives its server 600 s)
        suites.append(Suite(f"qa-infer{label}", build, scripts, backends, start_timeout=600.0))
    return suites
