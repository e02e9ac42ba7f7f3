"""What the conformance run runs: NVIDIA's scripts grouped by the model repository they need, and why the
others are skipped.

Every script of ``client/src/python/examples`` and every folder of ``python_backend/examples`` is either
in a suite or in a skip list with its reason; anything else found there is reported as unclassified.
The server repository's ``qa`` test files are chosen (listed here), not discovered.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from conformance.models import (
    build_densenet_standin,
    build_identity,
    copy_model,
    edit_config,
    place_python_model,
)
from conformance.qa import QA_SKIPS, qa_suites
from conformance.qa_batching import BATCHING_SKIPS, batching_suites
from conformance.qa_config import CONFIG_SKIPS, config_suites
from conformance.qa_generated import GENERATED_SKIPS, client_nobatch, infer_suites, server_status
from conformance.qa_onnx import initializer_as_input
from conformance.runner import Checkouts, Script, Skip, Suite, unclassified

CLIENT = "client/"
PB = "python_backend/"

#: Client examples run with no arguments but the server's URL, per protocol.
HTTP_CLIENTS = (
    "simple_http_health_metadata.py",
    "simple_http_infer_client.py",
    "simple_http_async_infer_client.py",
    "simple_http_aio_infer_client.py",
    "simple_http_string_infer_client.py",
    "simple_http_shm_client.py",
    "simple_http_shm_string_client.py",
    "simple_http_sequence_sync_infer_client.py",
)
GRPC_CLIENTS = (
    "simple_grpc_health_metadata.py",
    "simple_grpc_infer_client.py",
    "simple_grpc_async_infer_client.py",
    "simple_grpc_aio_infer_client.py",
    "simple_grpc_string_infer_client.py",
    "simple_grpc_shm_client.py",
    "simple_grpc_shm_string_client.py",
    "simple_grpc_sequence_sync_infer_client.py",
    "simple_grpc_sequence_stream_infer_client.py",
    "simple_grpc_aio_sequence_stream_infer_client.py",
    "simple_grpc_custom_args_client.py",
    "simple_grpc_keepalive_client.py",
    "simple_grpc_custom_repeat.py",
    "grpc_explicit_int_content_client.py",
    "grpc_explicit_int8_content_client.py",
    "grpc_explicit_byte_content_client.py",
)

CLIENT_SKIPS = (
    Skip(CLIENT + "simple_http_cudashm_client.py", "needs a GPU (CUDA shared memory)"),
    Skip(CLIENT + "simple_grpc_cudashm_client.py", "needs a GPU (CUDA shared memory)"),
    Skip(
        CLIENT + "ensemble_image_client.py",
        "needs preprocess_inception_ensemble: a DALI/TensorFlow preprocessing model, TensorFlow's Inception",
    ),
)

PB_SKIPS = (
    Skip(
        PB + "instance_kind", "downloads torchvision's pretrained ResNet-50 weights and an image from the web"
    ),
    Skip(
        PB + "preprocessing", "its classifier is a TensorRT engine (resnet50_trt): needs a GPU and TensorRT"
    ),
    Skip(PB + "jax", "needs JAX, which Naiad's environment does not install"),
)

#: The image classification line image_client prints: ``    0.123456 (42) = LABEL``.
CLASSIFICATION = r"\d+\.\d+ \(\d+\) = \S"


def example_repository(checkouts: Checkouts) -> Callable[[Path], None]:
    """Triton's example repository: the seven models of ``docs/examples/model_repository`` we can serve
    (ONNX models shipped in the server repo, and a stand-in for densenet_onnx, whose weights are
    downloaded).  The model-control clients count exactly seven.
    """

    def build(repository: Path) -> None:
        examples = checkouts.server / "docs" / "examples" / "model_repository"
        for name in (
            "simple",
            "simple_int8",
            "simple_string",
            "simple_identity",
            "simple_sequence",
            "simple_dyna_sequence",
        ):
            copy_model(examples / name, repository)
        densenet = repository / "densenet_onnx"
        densenet.mkdir()
        for text_file in ("config.pbtxt", "densenet_labels.txt"):
            (densenet / text_file).write_bytes((examples / "densenet_onnx" / text_file).read_bytes())
        build_densenet_standin(densenet / "1" / "model.onnx")

    return build


def grpc_control_repository(checkouts: Checkouts) -> Callable[[Path], None]:
    """The example repository and ``simple_string_dyna_sequence`` made as qa/L0_grpc/test.sh makes it:
    simple_dyna_sequence's config renamed, on the ``dyna_sequence`` backend, with a string CORRID.
    """
    examples = example_repository(checkouts)

    def build(repository: Path) -> None:
        examples(repository)
        folder = repository / "simple_string_dyna_sequence"
        folder.mkdir()
        (folder / "1").mkdir()
        shutil.copyfile(repository / "simple_dyna_sequence" / "config.pbtxt", folder / "config.pbtxt")
        edit_config(
            folder,
            ("simple_dyna_sequence", "simple_string_dyna_sequence"),
            ("^platform: .*", 'backend: "dyna_sequence"'),
            (r"(CONTROL_SEQUENCE_CORRID\n\s*)data_type:.*", r"\1data_type: TYPE_STRING"),
        )

    return build


def client_repository(checkouts: Checkouts) -> Callable[[Path], None]:
    """The example repository, the Python backend's repeat_int32 for the custom-repeat client, and an
    identity for memory_growth_test.
    """
    examples = example_repository(checkouts)

    def build(repository: Path) -> None:
        examples(repository)
        decoupled = checkouts.pb_examples / "decoupled"
        place_python_model(
            repository, "repeat_int32", decoupled / "repeat_model.py", decoupled / "repeat_config.pbtxt"
        )
        build_identity(repository, "custom_identity_int32")

    return build


def client_suites(checkouts: Checkouts) -> list[Suite]:
    examples = checkouts.client_examples
    mug = str(checkouts.qa / "images" / "mug.jpg")

    def script(name: str, *args: str, expect: str | None = None, label: str = "") -> Script:
        shown = CLIENT + name + (f" {label}" if label else "")
        return Script(shown, ("{python}", name, *args), examples, expect=expect)

    image = ("-m", "densenet_onnx", "-s", "INCEPTION", "-c", "1", "-b", "1")
    scripts = [
        *(script(name, "-u", "{http}") for name in HTTP_CLIENTS),
        *(script(name, "-u", "{grpc}") for name in GRPC_CLIENTS),
        script("reuse_infer_objects_client.py", "-u", "{http}", label="(HTTP)"),
        script("reuse_infer_objects_client.py", "-i", "grpc", "-u", "{grpc}", label="(gRPC)"),
        script("grpc_client.py", "-u", "{grpc}"),
        script("image_client.py", *image, "-u", "{http}", mug, expect=CLASSIFICATION, label="(HTTP)"),
        script(
            "image_client.py", *image, "-a", "-u", "{http}", mug, expect=CLASSIFICATION, label="(HTTP async)"
        ),
        script(
            "image_client.py",
            *image,
            "-i",
            "grpc",
            "-u",
            "{grpc}",
            mug,
            expect=CLASSIFICATION,
            label="(gRPC)",
        ),
        script(
            "image_client.py",
            *image,
            "-i",
            "grpc",
            "-a",
            "--streaming",
            "-u",
            "{grpc}",
            mug,
            expect=CLASSIFICATION,
            label="(gRPC streaming)",
        ),
        script("grpc_image_client.py", *image, "-u", "{grpc}", mug, expect=CLASSIFICATION),
        script(
            "grpc_image_client.py",
            *image,
            "-a",
            "--streaming",
            "-u",
            "{grpc}",
            mug,
            expect=CLASSIFICATION,
            label="(streaming)",
        ),
        Script(
            CLIENT + "memory_growth_test.py (HTTP)",
            ("{python}", "memory_growth_test.py"),
            examples,
            fixed_ports=True,
        ),
        Script(
            CLIENT + "memory_growth_test.py (gRPC)",
            ("{python}", "memory_growth_test.py", "-i", "grpc"),
            examples,
            fixed_ports=True,
        ),
    ]
    http_control = (script("simple_http_model_control.py", "-u", "{http}", expect="PASS: model control"),)
    grpc_control = (script("simple_grpc_model_control.py", "-u", "{grpc}", expect="PASS: model control"),)
    explicit = ("--model-control-mode=explicit",)
    return [
        # NVIDIA's L0_http/L0_grpc start the server for these with --allow-client-shm=true, as here
        Suite("client-examples", client_repository(checkouts), tuple(scripts), ("--allow-client-shm=true",)),
        # the HTTP client counts 7 models in the repository, the gRPC one 8: L0_grpc adds
        # simple_string_dyna_sequence (a C++ backend's model, listed but never loaded here)
        Suite("client-model-control-http", example_repository(checkouts), http_control, explicit),
        Suite("client-model-control-grpc", grpc_control_repository(checkouts), grpc_control, explicit),
    ]


def pb_suites(checkouts: Checkouts) -> list[Suite]:
    """python_backend/examples laid out as each example's README says, served, and its clients run."""
    ex = checkouts.pb_examples

    def client(folder: str, name: str, expect: str | None = None) -> Script:
        return Script(
            f"{PB}{folder}/{name}", ("{python}", name), ex / folder, expect=expect, fixed_ports=True
        )

    def add_sub(repo: Path) -> None:
        place_python_model(repo, "add_sub", ex / "add_sub" / "model.py", ex / "add_sub" / "config.pbtxt")

    def pytorch(repo: Path) -> None:
        place_python_model(repo, "pytorch", ex / "pytorch" / "model.py", ex / "pytorch" / "config.pbtxt")

    def square(repo: Path) -> None:
        decoupled = ex / "decoupled"
        place_python_model(
            repo, "square_int32", decoupled / "square_model.py", decoupled / "square_config.pbtxt"
        )

    def auto_complete(repo: Path) -> None:
        place_python_model(repo, "nobatch_auto_complete", ex / "auto_complete" / "nobatch_model.py")
        place_python_model(repo, "batch_auto_complete", ex / "auto_complete" / "batch_model.py")

    def bls(repo: Path) -> None:
        add_sub(repo)
        pytorch(repo)
        place_python_model(repo, "bls_sync", ex / "bls" / "sync_model.py", ex / "bls" / "sync_config.pbtxt")
        place_python_model(
            repo, "bls_async", ex / "bls" / "async_model.py", ex / "bls" / "async_config.pbtxt"
        )

    def bls_decoupled(repo: Path) -> None:
        square(repo)
        folder = ex / "bls_decoupled"
        place_python_model(repo, "bls_decoupled_sync", folder / "sync_model.py", folder / "sync_config.pbtxt")
        place_python_model(
            repo, "bls_decoupled_async", folder / "async_model.py", folder / "async_config.pbtxt"
        )

    def decoupled(repo: Path) -> None:
        square(repo)
        folder = ex / "decoupled"
        place_python_model(repo, "repeat_int32", folder / "repeat_model.py", folder / "repeat_config.pbtxt")

    def custom_metrics(repo: Path) -> None:
        folder = ex / "custom_metrics"
        place_python_model(repo, "custom_metrics", folder / "model.py", folder / "config.pbtxt")

    return [
        Suite("pb-add_sub", add_sub, (client("add_sub", "client.py", "PASS: add_sub"),)),
        Suite(
            "pb-auto_complete", auto_complete, (client("auto_complete", "client.py", "PASS: auto_complete"),)
        ),
        Suite("pb-pytorch", pytorch, (client("pytorch", "client.py", "PASS: pytorch"),)),
        Suite(
            "pb-bls",
            bls,
            (
                client("bls", "sync_client.py", "PASS: BLS Sync"),
                client("bls", "async_client.py", "PASS: BLS Async"),
            ),
        ),
        Suite(
            "pb-bls_decoupled",
            bls_decoupled,
            (
                client("bls_decoupled", "sync_client.py", "PASS"),
                client("bls_decoupled", "async_client.py", "PASS"),
            ),
        ),
        Suite(
            "pb-decoupled",
            decoupled,
            (
                client("decoupled", "repeat_client.py", "PASS"),
                client("decoupled", "square_client.py", "PASS"),
            ),
        ),
        Suite("pb-custom_metrics", custom_metrics, (client("custom_metrics", "client.py", "PASS"),)),
    ]


#: python_backend example folders the suites above cover.
PB_FOLDERS = ("add_sub", "auto_complete", "pytorch", "bls", "bls_decoupled", "decoupled", "custom_metrics")


def all_suites(checkouts: Checkouts) -> list[Suite]:
    return [
        *client_suites(checkouts),
        *pb_suites(checkouts),
        *qa_suites(checkouts, example_repository(checkouts), eight_models(checkouts)),
        *batching_suites(checkouts),
        *config_suites(checkouts),
        server_status(checkouts),
        client_nobatch(checkouts),
        *infer_suites(checkouts),
        initializer_as_input(checkouts),
    ]


def eight_models(checkouts: Checkouts) -> Callable[[Path], None]:
    """The example repository and the Python backend's repeat_int32: the 8 models L0_grpc's tests count,
    all loadable (its own eighth is a C++ backend's model)."""
    examples = example_repository(checkouts)

    def build(repository: Path) -> None:
        examples(repository)
        decoupled = checkouts.pb_examples / "decoupled"
        place_python_model(
            repository, "repeat_int32", decoupled / "repeat_model.py", decoupled / "repeat_config.pbtxt"
        )

    return build


def skips(checkouts: Checkouts, suites: list[Suite]) -> list[Skip]:
    """The skips with reasons, then whatever upstream added that this file does not classify."""
    run = {s.name.split(" ")[0] for suite in suites for s in suite.scripts if s.name.startswith(CLIENT)}
    known_clients = run | {skip.name for skip in CLIENT_SKIPS}
    known_pb = {PB + folder for folder in PB_FOLDERS} | {skip.name for skip in PB_SKIPS}
    return [
        *CLIENT_SKIPS,
        *PB_SKIPS,
        *QA_SKIPS,
        *CONFIG_SKIPS,
        *GENERATED_SKIPS,
        *BATCHING_SKIPS,
        *unclassified(checkouts.client_examples, "*.py", known_clients, CLIENT),
        *unclassified(checkouts.pb_examples, "*", known_pb, PB),
    ]
