"""NVIDIA's qa tests of model configuration checks (``qa/L0_model_config``), with their model
repositories made as its ``test.sh`` makes them.

Each case is a model folder holding a ``config.pbtxt`` that some rule refuses and ``expected`` files,
the sentences one of which the server's log must hold on an error line (``^E[0-9]{4}``) once it
failed to start; the same configs are tried under each platform of test.sh's ``TRIALS``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from conformance.models import copy_model, edit_config
from conformance.qa import QA
from conformance.runner import Checkouts, Script, Suite

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


def config_suites(checkouts: Checkouts) -> list[Suite]:
    return noautofill_platform(checkouts)
