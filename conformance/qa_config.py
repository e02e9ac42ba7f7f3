"""NVIDIA's qa tests of model configuration checks (``qa/L0_model_config``), with their model
repositories made as its ``test.sh`` makes them.

Each case is a model folder holding a ``config.pbtxt`` that some rule refuses and ``expected`` files,
the sentences one of which the server's log must hold on an error line (``^E[0-9]{4}``) once it
failed to start; the same configs are tried under each platform of test.sh's ``TRIALS``.
"""

from __future__ import annotations

import re
import shutil
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

CONFIG_SKIPS = (
    Skip(
        f"{QA}L0_model_config/test.sh: autofill_noplatform/tensorrt, autofill_noplatform/openvino",
        "their models are TensorRT plans (TensorRT is image-only here) and OpenVINO models (no OpenVINO "
        "backend)",
    ),
)


def autofill_noplatform(checkouts: Checkouts) -> list[Suite]:
    """``autofill_noplatform``: models whose configs auto-complete fails or contradicts (ONNX and
    TorchScript models whose tensors differ from their configs, Python models whose
    ``auto_complete_config`` returns what the config forbids, ensembles whose steps do not connect,
    models naming no backend), each on a server of its own with ``--strict-model-config=false`` that
    must not start and must say why in one of the case's expected sentences.  The version folders and
    model files are the ones test.sh puts there (its lists read from test.sh itself)."""
    folder = checkouts.qa / "L0_model_config"
    script_text = (folder / "test.sh").read_text()
    versioned = set(re.findall(r"(autofill_noplatform/[\w./-]+)/1\b", script_text))
    pattern = r"^\s+(autofill_noplatform/python/\w+) [\\;]"
    own_python = set(re.findall(pattern, script_text, re.MULTILINE))
    everything = sorted((folder / "autofill_noplatform").iterdir())
    kinds = [k for k in everything if k.name not in AUTOFILL_ELSEWHERE]
    cases = [p for kind in kinds for p in sorted(kind.iterdir()) if p.is_dir()]

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


def config_suites(checkouts: Checkouts) -> list[Suite]:
    return [*noautofill_platform(checkouts), *autofill_noplatform(checkouts)]
