"""NVIDIA's qa tests of model configuration checks (``qa/L0_model_config``), with their model
repositories made as its ``test.sh`` makes them.

Each case is a model folder holding a ``config.pbtxt`` that some rule refuses and ``expected`` files,
the sentences one of which the server's log must hold on an error line (``^E[0-9]{4}``) once it
failed to start; the same configs are tried under each platform of test.sh's ``TRIALS``.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from conformance.models import copy_model, edit_config
from conformance.qa import QA, STAND_IN_BACKENDS
from conformance.qa_batching import _generated
from conformance.runner import Checkouts, Script, Skip, Suite

#: test.sh's TRIALS: the platforms each ``noautofill_platform`` config is given.
TRIALS = ("tensorrt_plan", "onnxruntime_onnx", "pytorch_libtorch")
#: The cases test.sh gives a version folder (the others have none: the config is checked first).
VERSIONED = ("invalid_cpu", "invalid_gpu", "negative_gpu")


def noautofill_platform(checkouts: Checkouts) -> list[Suite]:
    """``noautofill_platform``: each of its configs (dynamic and sequence batching sections, batch
    inputs and outputs, reshapes, dims, instance groups, ensemble scheduling on a plain model) under
    each platform, with ``--strict-model-config=true`` and then ``--disable-auto-complete-config``,
    each on a server of its own that must not start and must say why in Triton's words."""
    folder = checkouts.qa / "L0_model_config"
    cases = sorted(p for p in (folder / "noautofill_platform").iterdir() if p.is_dir())

    def build(case: Path, trial: str) -> Callable[[Path], None]:
        def build(repo: Path) -> None:
            model = copy_model(case, repo)
            if (model / "config.pbtxt").exists():
                edit_config(model, ("^.*platform:.*\\n", ""), append=f'platform: "{trial}"\n')
            if case.name in VERSIONED:
                (model / "1").mkdir(exist_ok=True)

        return build

    suites = []
    for trial in TRIALS:
        flags = (("--strict-model-config=true", ""), ("--disable-auto-complete-config", "_disableflag"))
        for flag, label in flags:
            for case in cases:
                if trial == "tensorrt_plan" and case.name in VERSIONED:
                    continue  # (CONFIG_SKIPS: the missing TensorRT backend fails the version first)
                log = f"inference_server.noautofill_platform{label}_{trial}_{case.name}.log"
                expecteds = " ".join(str(p) for p in sorted(case.glob("expected*")))
                found = (
                    f'for EXPECTED in {expecteds}; do EX=$(cat "$EXPECTED"); '
                    f'grep -q "^E[0-9][0-9][0-9][0-9].*$EX" {log} && exit 0; done; exit 1'
                )
                name = f"{QA}L0_model_config/test.sh: {trial} noautofill_platform/{case.name}" + (
                    " (--disable-auto-complete-config)" if label else ""
                )
                suites.append(
                    Suite(
                        f"qa-model_config-noautofill{label}-{trial}-{case.name}",
                        build(case, trial),
                        (Script(name, ("sh", "-c", found), folder),),
                        (flag,),
                        log_link=folder / log,
                        fails_to_start=True,
                    )
                )
    return suites


#: ``autofill_noplatform`` folders not run: their models are TensorRT plans and OpenVINO models.
AUTOFILL_ELSEWHERE = ("tensorrt", "openvino")

#: ``autofill_noplatform_success`` cases whose expected config is a newer Triton's, not 2.51's.
NEWER_THAN_251 = {
    "pytorch/no_name_platform": (
        "expects no default_model_filename for a TorchScript model found by its file: Triton core since "
        "ee0bc47 (2026, AOTInductor support) leaves it empty; 2.51's core (and Naiad) fill 'model.pt'"
    ),
}

CONFIG_SKIPS = (
    Skip(
        f"{QA}L0_model_config/test.sh: autofill_noplatform/tensorrt, autofill_noplatform/openvino",
        "their models are TensorRT plans (TensorRT is image-only here) and OpenVINO models (no OpenVINO "
        "backend)",
    ),
    Skip(
        f"{QA}L0_model_config/test.sh: autofill_noplatform_success/tensorrt, "
        "autofill_noplatform_success/openvino",
        "their models are TensorRT plans (TensorRT is image-only here) and OpenVINO models (no OpenVINO "
        "backend)",
    ),
    Skip(
        f"{QA}L0_model_config/test.sh: tensorrt_plan noautofill_platform/"
        "{invalid_cpu,invalid_gpu,negative_gpu} (both flags)",
        "instance groups are checked when a version loads, once its backend is found (Triton's order: "
        "TritonModel::Create), and TensorRT is image-only here: the version fails on the missing backend "
        "first, as Triton's would without its TensorRT backend; the ONNX Runtime and TorchScript trials of "
        "the same configs pass",
    ),
    Skip(
        f"{QA}L0_model_config/test.sh: custom_parameters/tensorrt",
        "TensorRT plans' execution-context allocation strategy (TensorRT is image-only here)",
    ),
    *(
        Skip(f"{QA}L0_model_config/test.sh: autofill_noplatform_success/{case}", why)
        for case, why in NEWER_THAN_251.items()
    ),
)


def _layout(folder: Path, group: str) -> tuple[set[str], set[str], list[Path]]:
    """What test.sh does with ``group`` (``autofill_noplatform`` or ``autofill_noplatform_success``),
    read from test.sh itself: the model folders it gives a version folder, the Python models it gives
    their own ``model.py``; and the group's cases run here."""
    script_text = (folder / "test.sh").read_text()
    versioned = set(re.findall(rf"({group}/[\w./-]+)/1\b", script_text))
    own_python = set(re.findall(rf"^\s+({group}/python/[\w/]+) [\\;]", script_text, re.MULTILINE))
    kinds = [k for k in sorted((folder / group).iterdir()) if k.name not in AUTOFILL_ELSEWHERE]
    return versioned, own_python, [p for kind in kinds for p in sorted(kind.iterdir()) if p.is_dir()]


def autofill_noplatform(checkouts: Checkouts) -> list[Suite]:
    """``autofill_noplatform``: models whose configs auto-complete fails or contradicts (ONNX and
    TorchScript models whose tensors differ from their configs, Python models whose
    ``auto_complete_config`` returns what the config forbids, ensembles whose steps do not connect,
    models naming no backend), each on a server of its own with ``--strict-model-config=false`` that
    must not start and must say why in one of the case's expected sentences.  The version folders and
    model files are the ones test.sh puts there (its lists read from test.sh itself)."""
    folder = checkouts.qa / "L0_model_config"
    versioned, own_python, cases = _layout(folder, "autofill_noplatform")

    def prepare(model: Path, source: Path, work: Path) -> None:
        """What test.sh puts in one model's folder (``source``: where it is in the qa checkout)."""
        relative = source.relative_to(folder).as_posix()
        if relative in versioned:
            version = model / "1"
            version.mkdir(exist_ok=True)
            kind = relative.split("/")[1]
            if kind == "python":
                model_py = checkouts.qa / "python_models" / "auto_complete" / "model.py"
                shutil.copyfile(model_py, version / "model.py")
            elif kind == "pytorch":
                flags = ("--onnx", "--libtorch")
                generated = _generated(checkouts, work, "gen_qa_models.py", *flags)
                model_pt = generated / "libtorch_float32_float32_float32" / "1" / "model.pt"
                shutil.copyfile(model_pt, version / "model.pt")
        if relative in own_python:
            (model / "1").mkdir(exist_ok=True)
            shutil.copyfile(model / "model.py", model / "1" / "model.py")

    def build(case: Path) -> Callable[[Path], None]:
        def build(repo: Path) -> None:
            if (case / "config.pbtxt").exists():
                prepare(copy_model(case, repo), case, repo.parent.parent)
                return
            for item in case.iterdir():  # (a whole repository: an ensemble and its steps)
                if item.is_dir():
                    prepare(copy_model(item, repo), item, repo.parent.parent)
                else:
                    shutil.copyfile(item, repo / item.name)

        return build

    suites = []
    for case in cases:
        relative = case.relative_to(folder).as_posix()
        log = f"inference_server.{relative.replace('/', '.')}.log"
        expecteds = " ".join(str(p) for p in sorted(case.glob("expected*")))
        found = (
            f'for EXPECTED in {expecteds}; do EX=$(cat "$EXPECTED"); '
            f'grep -q "^E[0-9][0-9][0-9][0-9].*$EX" {log} && exit 0; done; exit 1'
        )
        suites.append(
            Suite(
                f"qa-model_config-{relative.replace('/', '-')}",
                build(case),
                (Script(f"{QA}L0_model_config/test.sh: {relative}", ("sh", "-c", found), folder),),
                ("--strict-model-config=false", f"--backend-directory={STAND_IN_BACKENDS}"),
                log_link=folder / log,
                fails_to_start=True,
            )
        )
    return suites


#: ``autofill_noplatform_success`` models test.sh copies as a folder although they have no config.
NO_CONFIG = ("no_config", "no_config_variable", "no_config_shape_tensor", "no_config_non_linear_format_io")


def _on_cpu_expected(model: Path) -> None:
    """The expected configs as Triton gives them here: on a machine without GPUs (its CPU build, checked
    with 2.51), instance groups ``KIND_CPU`` with no ``gpus`` where test.sh's files assume GPU 0, and
    two instances where the ONNX Runtime backend's group had the default count (Triton core's
    ``SetDefaultInstanceCount``); and a stand-in backend's ``runtime`` as Triton 2.51 reports a
    Python-based backend's (``model.py``, checked with the same stand-in)."""
    config = model / "config.pbtxt"
    counted = config.exists() and "count:" in config.read_text()
    for expected in model.glob("expected*"):
        text = expected.read_text()
        onnx = 'backend: "onnxruntime"' in text
        if onnx and not counted:
            text = re.sub(r"count: 1(\s+gpus: 0\s+kind: KIND_GPU)", r"count: 2\1", text)
        text = re.sub(r"^\s*gpus: 0\n", "", text.replace("KIND_GPU", "KIND_CPU"), flags=re.MULTILINE)
        stand_in = re.search(r'backend: "(\w+)"', text)
        if stand_in and (STAND_IN_BACKENDS / stand_in.group(1)).is_dir():
            text = text.replace('runtime: ""', 'runtime: "model.py"')
        expected.write_text(text)


def autofill_noplatform_success(checkouts: Checkouts) -> list[Suite]:
    """``autofill_noplatform_success``: models whose configs are partial or absent, each on a server of
    its own with ``--strict-model-config=false`` that must start, and whose completed config, read
    through gRPC by test.sh's ``compare_status.py``, must equal one of the case's ``expected`` configs
    field for field (defaults, instance group names, dynamic batching, optimization, filenames).
    The expected files are read as on a machine without GPUs (``_on_cpu_expected``)."""
    folder = checkouts.qa / "L0_model_config"
    versioned, own_python, cases = _layout(folder, "autofill_noplatform_success")
    cases = [p for p in cases if f"{p.parent.name}/{p.name}" not in NEWER_THAN_251]

    def prepare(model: Path, source: Path, work: Path) -> None:
        relative = source.relative_to(folder).as_posix()
        kind = relative.split("/")[1]
        if relative in versioned:
            version = model / "1"
            version.mkdir(exist_ok=True)
            if kind == "python":
                model_py = checkouts.qa / "python_models" / "auto_complete" / "model.py"
                shutil.copyfile(model_py, version / "model.py")
            elif kind == "pytorch":
                generated = _generated(checkouts, work, "gen_qa_models.py", "--onnx", "--libtorch")
                model_pt = generated / "libtorch_float32_float32_float32" / "1" / "model.pt"
                shutil.copyfile(model_pt, version / "model.pt")
        if relative == "autofill_noplatform_success/onnx/cpu_instance":
            (model / "1").mkdir(exist_ok=True)
            generated = _generated(checkouts, work, "gen_qa_identity_models.py", "--onnx")
            shutil.copyfile(
                generated / "onnx_zero_1_float16" / "1" / "model.onnx", model / "1" / "model.onnx"
            )
        if relative in own_python:
            (model / "1").mkdir(exist_ok=True)
            shutil.copyfile(model / "model.py", model / "1" / "model.py")
        _on_cpu_expected(model)

    def build(case: Path) -> Callable[[Path], None]:
        def build(repo: Path) -> None:
            if (case / "config.pbtxt").exists() or case.name in NO_CONFIG:
                prepare(copy_model(case, repo), case, repo.parent.parent)
                return
            for item in case.iterdir():  # (a whole repository: an ensemble and its steps)
                if item.is_dir():
                    prepare(copy_model(item, repo), item, repo.parent.parent)

        return build

    suites = []
    for case in cases:
        relative = case.relative_to(folder).as_posix()
        compare = (
            f'python {folder / "compare_status.py"} --expected_dir "$SUITE/models/{case.name}" '
            f"--model {case.name}"
        )
        suites.append(
            Suite(
                f"qa-model_config-{relative.replace('/', '-')}",
                build(case),
                (
                    Script(
                        f"{QA}L0_model_config/test.sh: {relative}",
                        ("sh", "-c", compare),
                        folder,
                        fixed_ports=True,
                    ),
                ),
                ("--strict-model-config=false", f"--backend-directory={STAND_IN_BACKENDS}"),
                script_env={"SUITE": "{suite}"},
            )
        )
    return suites


def _logged(name: str, case: Path, log: str, level: str, folder: Path) -> Script:
    """A test.sh check that one of ``case``'s ``expected*`` sentences is on a ``level`` line of ``log``
    (``level`` "" for the command line's warnings, which carry no prefix)."""
    expecteds = " ".join(str(p) for p in sorted(case.glob("expected*")))
    prefix = f"^{level}[0-9][0-9][0-9][0-9].*" if level else ""
    found = (
        f'for EXPECTED in {expecteds}; do EX=$(cat "$EXPECTED"); '
        f'grep -q "{prefix}$EX" {log} && exit 0; done; exit 1'
    )
    return Script(name, ("sh", "-c", found), folder)


def special_cases(checkouts: Checkouts) -> list[Suite]:
    """``cli_messages`` (the deprecated ``--strict-model-config``'s warnings) and ``special_cases`` (a
    misspelt platform, a runtime library that does not exist or escapes the backend folder): servers
    that must not start and must say why."""
    folder = checkouts.qa / "L0_model_config"
    flags = {
        "cli_override": ("--disable-auto-complete-config", "--strict-model-config=false"),
        "cli_deprecation": ("--strict-model-config=true",),
        "invalid_platform": ("--disable-auto-complete-config",),
    }

    def build(case: Path) -> Callable[[Path], None]:
        def build(repo: Path) -> None:
            model = copy_model(case, repo)
            if case.name == "invalid_platform":
                (model / "1").mkdir()
                generated = _generated(
                    checkouts, repo.parent.parent, "gen_qa_models.py", "--onnx", "--libtorch"
                )
                onnx = generated / "onnx_float32_float32_float32" / "1" / "model.onnx"
                shutil.copyfile(onnx, model / "1" / "model.onnx")
            elif case.name == "runtime_escape":
                (model / "1").mkdir()
                (model / "dummy_runtime").mkdir()
                (model / "dummy_runtime" / "libtriton_identity.so").touch()
            elif case.name == "invalid_runtime":
                (model / "1").mkdir()

        return build

    suites = []
    for kind, label, level in (("cli_messages", "cli_messages", ""), ("special_cases", "special_case", "E")):
        for case in sorted(p for p in (folder / kind).iterdir() if p.is_dir()):
            log = f"inference_server.{label}_{case.name}.log"
            name = f"{QA}L0_model_config/test.sh: {kind}/{case.name}"
            suites.append(
                Suite(
                    f"qa-model_config-{kind}-{case.name}",
                    build(case),
                    (_logged(name, case, log, level, folder),),
                    (*flags.get(case.name, ()), f"--backend-directory={STAND_IN_BACKENDS}"),
                    log_link=folder / log,
                    fails_to_start=True,
                )
            )
    return suites


def model_metrics(checkouts: Checkouts) -> list[Suite]:
    """``model_metrics``: qa's decoupled ``async_execute_decouple`` model with a ``model_metrics``
    section (histogram buckets of a metric family), under ``--metrics-config histogram_latencies=true``:
    valid sections start, a family Triton cannot customize starts with a warning, incomplete sections
    fail the load in Triton's words."""
    folder = checkouts.qa / "L0_model_config"
    source = checkouts.qa / "python_models" / "async_execute_decouple"

    def build(case: Path) -> Callable[[Path], None]:
        def build(repo: Path) -> None:
            model = copy_model(case, repo)
            (model / "1").mkdir()
            shutil.copyfile(source / "model.py", model / "1" / "model.py")
            config = (source / "config.pbtxt").read_text() + (case / "partial.pbtxt").read_text()
            (model / "config.pbtxt").write_text(config)

        return build

    suites = []
    for group in ("valid_config", "valid_config_with_warn", "invalid_config"):
        for case in sorted(p for p in (folder / "model_metrics" / group).iterdir() if p.is_dir()):
            relative = f"model_metrics/{group}/{case.name}"
            log = f"inference_server.{relative.replace('/', '.')}.log"
            name = f"{QA}L0_model_config/test.sh: {relative}"
            started = Script(name, ("curl", "-sf", "{http}/v2/health/ready"), folder)
            scripts = {
                "valid_config": (started,),
                "valid_config_with_warn": (_logged(name, case, log, "W", folder),),
                "invalid_config": (_logged(name, case, log, "E", folder),),
            }[group]
            suites.append(
                Suite(
                    f"qa-model_config-{relative.replace('/', '-')}",
                    build(case),
                    scripts,
                    ("--metrics-config", "histogram_latencies=true"),
                    log_link=folder / log,
                    fails_to_start=group == "invalid_config",
                )
            )
    return suites


def config_json(checkouts: Checkouts) -> list[Suite]:
    """``qa/L0_config_json``: ``/config``'s JSON text as Triton prints it (dims, reshapes, a specific
    version policy, queue policies, sequence batching, an ensemble's step versions, warmup inputs,
    uint64 priorities and timeouts as numbers, fields in their declared order), each trial on a
    server of its own.  test.sh's own lines run: each trial's preparation (its ``cp``/``sed``/``echo``
    into ``models``, ``$DATADIR`` holding NVIDIA's generated models) before the server starts, then
    its ``curl``/``grep -o`` checks against the server."""
    folder = checkouts.qa / "L0_config_json"
    text = (folder / "test.sh").read_text()

    def build(preparation: str) -> Callable[[Path], None]:
        def build(repo: Path) -> None:
            work = repo.parent.parent
            datadir = work / "datadir-config_json"
            if not datadir.exists():
                datadir.mkdir()
                generated = _generated(checkouts, work, "gen_qa_models.py", "--onnx", "--libtorch")
                (datadir / "qa_model_repository").symlink_to(generated)
            for config in folder.glob("*.pbtxt"):
                shutil.copyfile(config, repo.parent / config.name)
            env = {**os.environ, "DATADIR": str(datadir)}
            subprocess.run(["bash", "-ec", preparation], cwd=repo.parent, env=env, check=True)

        return build

    suites = []
    chunks = re.split(r"^TRIAL=", text, flags=re.MULTILINE)
    for before, block in itertools.pairwise(chunks):
        trial, body = block.split("\n", 1)
        preparation, rest = body.split("\nrun_server\n", 1)
        if "models" not in preparation:  # (the first trial's lines come before its TRIAL=)
            preparation = before[before.rindex("rm -fr models") :]
        checks = rest.split("\nkill $SERVER_PID", 1)[0]
        script = f"RET=0\nTRIAL={trial}\n{checks}\nexit $RET\n".replace("{", "{{").replace("}", "}}")
        name = f"{QA}L0_config_json/test.sh: {trial}"
        suites.append(
            Suite(
                f"qa-config_json-{trial}",
                build(preparation),
                (Script(name, ("bash", "-c", script), folder, fixed_ports=True),),
                (f"--backend-directory={STAND_IN_BACKENDS}",),
            )
        )
    return suites


def backend_config(checkouts: Checkouts) -> list[Suite]:
    """``qa/L0_backend_config``'s test.sh, whole: the global and per-backend ``--backend-config``
    settings as the server resolves and logs them (``default-max-batch-size`` overridden or added,
    the ``backend configuration:`` JSON and its count of settings), malformed options stopping the
    server, and ONNX Runtime's auto-complete with ``default-max-batch-size`` 5 (``/config``, and the
    dynamic batcher's start line) and 0.  It starts its servers itself, on ports 8000-8002: its
    ``$SERVER`` is Naiad's ``tritonserver`` and ``/data/inferenceserver/$REPO_VERSION`` holds
    NVIDIA's ``gen_qa_models.py --onnx`` models; nothing else of it changes."""
    folder = checkouts.qa / "L0_backend_config"
    text = (folder / "test.sh").read_text()
    for path in ("SERVER=/opt/tritonserver/bin/tritonserver", "/data/inferenceserver/${REPO_VERSION}"):
        if path not in text:  # (a newer test.sh: say so rather than run something else)
            raise ValueError(f"{folder}/test.sh no longer has {path!r}")
    text = text.replace("SERVER=/opt/tritonserver/bin/tritonserver", "SERVER=$NAIAD_SERVER")
    text = text.replace("/data/inferenceserver/${REPO_VERSION}", "$NAIAD_DATADIR")

    def build(repo: Path) -> None:
        suite = repo.parent
        generated = _generated(checkouts, suite.parent, "gen_qa_models.py", "--onnx")
        (suite / "data").mkdir()
        (suite / "data" / "qa_model_repository").symlink_to(generated)
        server = suite / "tritonserver"
        server.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m naiad serve "$@"\n')
        server.chmod(0o755)

    script = Script(
        f"{QA}L0_backend_config/test.sh",
        ("bash", "-c", text.replace("{", "{{").replace("}", "}}"), "test.sh", "naiad"),
        folder,
        expect=r"\*\*\* Test Passed",
        fixed_ports=True,
    )
    paths = {"NAIAD_SERVER": "{suite}/tritonserver", "NAIAD_DATADIR": "{suite}/data"}
    return [Suite("qa-backend_config", build, (script,), script_env=paths, serves=False)]


def config_suites(checkouts: Checkouts) -> list[Suite]:
    return [
        *backend_config(checkouts),
        *config_json(checkouts),
        *noautofill_platform(checkouts),
        *autofill_noplatform(checkouts),
        *autofill_noplatform_success(checkouts),
        *special_cases(checkouts),
        *model_metrics(checkouts),
    ]
