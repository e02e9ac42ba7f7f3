"""NVIDIA's qa tests of batching, with their model repositories made as each ``test.sh`` makes them.

They rest on Triton's scheduler start delays (``TRITONSERVER_DELAY_SCHEDULER`` and
``TRITONSERVER_BACKLOG_DELAY_SCHEDULER``, exported to the server and to the test): requests sent one
after another wait until that many are queued, so the batches a test expects form whatever the
machine's speed.  Each case runs on a server of its own, as its test.sh runs it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from conformance.models import copy_model, edit_config, place_python_model
from conformance.qa import PYTHONPATH, QA, STAND_IN_BACKENDS, _grep_count, _logged, _unittest
from conformance.runner import Checkouts, Script, Skip, Suite

#: The start delay each of L0_batcher's delayed cases runs under (its test.sh's exports).
BATCHER_DELAYS = {
    "test_multi_batch_delayed_sum_gt_max_preferred": 2,
    "test_multi_batch_use_biggest_preferred": 6,
    "test_multi_batch_use_best_preferred": 3,
    "test_multi_batch_delayed_use_max_batch": 3,
}
BATCHER_NO_DELAY = (
    "test_static_batch_preferred",
    "test_static_batch_lt_any_preferred",
    "test_static_batch_not_preferred",
    "test_static_batch_gt_max_preferred",
    "test_multi_batch_not_preferred",
    "test_multi_batch_gt_max_preferred",
    "test_multi_batch_sum_gt_max_preferred",
    "test_multi_same_output0",
    "test_multi_same_output1",
    "test_multi_different_outputs",
    "test_multi_different_output_order",
)
BATCHER_DIFFERENT_SHAPES = (
    "test_multi_batch_not_preferred_different_shape",
    "test_multi_batch_preferred_different_shape",
    "test_multi_batch_different_shape_allow_ragged",
    "test_multi_batch_different_shape",
)
BATCHER_PREFERRED_ONLY = {
    "test_preferred_batch_only_aligned": 4,
    "test_preferred_batch_only_unaligned": 5,
    "test_preferred_batch_only_use_biggest_preferred": 7,
    "test_preferred_batch_only_use_no_preferred_size": 3,
}
#: The backends L0_batcher's trials run on here (its ``BACKENDS``): all but TensorRT, image-only here.
BATCHER_BACKENDS = "onnx libtorch python"

BATCHING_SKIPS = (
    Skip(
        f"{QA}L0_implicit_state/implicit_state.py: the cases of no_implicit_state, wrong_internal_state, "
        "single_state_buffer, growable_memory and no_state_update",
        "their models run qa's C++ implicit_state test backend, which drives Triton's C state API "
        "(TRITONBACKEND_StateNew, StateUpdate, growable buffers); the server's own rules, a state's "
        "output asked for with and without the config declaring it, run on the ONNX and TorchScript "
        'accumulators (BACKENDS="libtorch onnx"); test.sh\'s last step, L0_sequence_batcher with '
        "IMPLICIT_STATE=1, is that suite's implicit run",
    ),
    Skip(
        f"{QA}L0_sequence_corrid_batcher/sequence_corrid_batcher_test.py::SequenceCorrIDBatcherTest.test_skip_batch",
        "its trials are a TensorRT plan and an ONNX model, one after the other in one case: TensorRT is "
        "image-only here",
    ),
    Skip(
        f"{QA}L0_dyna_sequence_batcher/test.sh: BACKENDS plan",
        "TensorRT is image-only here; the cases run on the ONNX and TorchScript models and on qa's "
        "custom_dyna_sequence_int32 (UINT64 and STRING correlation IDs) on a stand-in for the C++ "
        'dyna_sequence backend (BACKENDS="onnx libtorch custom custom_string")',
    ),
    Skip(
        f"{QA}L0_batcher/test.sh: BACKENDS plan",
        "TensorRT is image-only here; the cases run on the ONNX, TorchScript and Python trials "
        '(BACKENDS="onnx libtorch python", a value its test.sh takes), which exercise the same batcher',
    ),
    Skip(
        f"{QA}L0_sequence_batcher/test.sh: BACKENDS plan; the ensembles of the state runs",
        "TensorRT is image-only here; NVIDIA's generator makes the implicit-state ensembles "
        "'not completed' (its own words), so the state runs go without (ENSEMBLES=0); the explicit run "
        'has its ensembles and qa\'s custom_sequence_int32 on a stand-in for the C++ sequence backend '
        '(BACKENDS="onnx libtorch python custom", ENSEMBLES=1; its ragged_models case too), the implicit '
        "run the ONNX and TorchScript accumulators, the initial-state runs the ONNX ones (the only ones "
        "generated)",
    ),
    Skip(
        f"{QA}L0_rate_limiter/test.sh: the plenty-resource run of test_single_model taking no longer "
        "than the limited one",
        "test.sh compares the two servers' wall times in its shell, which is no script to run; both "
        "runs pass here, and the plenty one takes about half as long (4.6 s against 8.6 s: the two "
        "instance groups run at once)",
    ),
)


def _generated(checkouts: Checkouts, work: Path, generator: str, *flags: str) -> Path:
    """The models NVIDIA's ``qa/common/<generator>`` makes with ``flags``, made once per run under
    ``work`` (the run's folder), as ``$DATADIR`` holds them for every test of NVIDIA's CI."""
    target = work / ("generated-" + generator.removesuffix(".py") + "".join(f.strip("-") for f in flags))
    if not (target / ".done").exists():
        script = checkouts.qa / "common" / generator
        command = [sys.executable, str(script), *flags, f"--models_dir={target}"]
        subprocess.run(command, check=True, capture_output=True, cwd=script.parent)
        (target / ".done").touch()
    return target


def _on_cpu(folder: Path) -> None:
    """``KIND_GPU`` instances as ``KIND_CPU``: what NVIDIA's CPU-only runs do to a GPU test's model."""
    edit_config(folder, ("KIND_GPU", "KIND_CPU"))


def batcher_suites(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_batcher as its test.sh runs it, each case on a server of its own: the dynamic batcher's
    preferred sizes, queue delay, different shapes and ragged inputs, preferred-only batching, the
    default queue delay and ``preserve_ordering``, on ``{onnx,python}_float32_float32_float32``
    (NVIDIA's ``gen_qa_models.py --onnx``, fixed and ``--variable``; the Python one qa's ``add_sub``
    under the ONNX model's config), ``onnx_zero_1_float32`` (``gen_qa_identity_models.py``) with a
    ``BATCH_SCATTER_WITH_INPUT_SHAPE`` output, and ``custom_zero_1_float32`` on the identity stand-in;
    ``verify_timestamps.py`` then reads the trace file of each ``preserve_ordering`` run."""
    folder = "L0_batcher"
    here = checkouts.qa / folder
    two_six = "dynamic_batching { preferred_batch_size: [ 2, 6 ], max_queue_delay_microseconds: 10000000 }\n"

    def float_models(repo: Path, variable: bool, batching: str) -> None:
        flags = ("--onnx", "--libtorch", "--variable") if variable else ("--onnx", "--libtorch")
        generated = _generated(checkouts, repo.parent.parent, "gen_qa_models.py", *flags)
        onnx = generated / "onnx_float32_float32_float32"
        copy_model(onnx, repo)
        copy_model(generated / "libtorch_float32_float32_float32", repo)
        python = place_python_model(repo, "python_float32_float32_float32",
                                    checkouts.qa / "python_models" / "add_sub" / "model.py")  # fmt: skip
        shutil.copyfile(onnx / "config.pbtxt", python / "config.pbtxt")
        shutil.copyfile(onnx / "output0_labels.txt", python / "output0_labels.txt")
        edit_config(python, ("platform:.*", 'backend: "python"'), ("onnx", "python"))
        for model in (repo / onnx.name, repo / "libtorch_float32_float32_float32", python):
            edit_config(model, ("^max_batch_size:.*", "max_batch_size: 8"),
                        ("^version_policy:.*", "version_policy: { specific { versions: [1] }}"),
                        append=batching)  # fmt: skip
            if variable:
                edit_config(model, ("16", "-1"))

    def fixed(batching: str) -> Callable[[Path], None]:
        return lambda repo: float_models(repo, False, batching)

    def variable(repo: Path) -> None:
        float_models(repo, True, two_six)
        custom = copy_model(checkouts.qa / "custom_models" / "custom_zero_1_float32", repo)
        (custom / "1").mkdir(exist_ok=True)
        edit_config(custom, ("^max_batch_size:.*", "max_batch_size: 8"), (r"dims:.*\[.*\]", "dims: [ -1 ]"),
                    ('name:.*"INPUT0"', 'name: "INPUT0"\nallow_ragged_batch: true'),
                    ("^version_policy:.*", "version_policy: { specific { versions: [1] }}"),
                    append="instance_group [ { kind: KIND_GPU count: 1 }]\n" + two_six)  # fmt: skip
        _on_cpu(custom)
        for backend, suffix in (("onnx", "0"), ("libtorch", "__0")):  # (TorchScript's names: INPUT__0)
            identity = _generated(checkouts, repo.parent.parent, "gen_qa_identity_models.py", f"--{backend}")
            name = f"{backend}_zero_1_float32"
            zero = copy_model(identity / name.replace("zero", "nobatch_zero"), repo, name)
            scatter = f'target_name: "OUTPUT{suffix}" kind: BATCH_SCATTER_WITH_INPUT_SHAPE '
            scatter += f'source_input: "INPUT{suffix}"'
            edit_config(zero, ("nobatch_", ""), ("^max_batch_size:.*", "max_batch_size: 8"),
                        (f'name: "INPUT{suffix}"', f'name: "INPUT{suffix}"\nallow_ragged_batch: true'),
                        append=f"batch_output [{{{scatter} }}]\n" + two_six)  # fmt: skip

    def custom(max_batch_size: int, append: str) -> Callable[[Path], None]:
        """test.sh's ``custom_models/custom_zero_1_float32``, its ``KIND_GPU`` instances on the CPU."""

        def build(repo: Path) -> None:
            model = copy_model(checkouts.qa / "custom_models" / "custom_zero_1_float32", repo)
            (model / "1").mkdir(exist_ok=True)
            sizes = ("max_batch_size:.*", f"max_batch_size: {max_batch_size}")
            edit_config(model, (r"dims:.*\[.*\]", "dims: [ -1 ]"), sizes, append=append)
            _on_cpu(model)

        return build

    def case(name: str, label: str, build: Callable[[Path], None], kind: str, delay: int = 0,
             extra_env: dict[str, str] | None = None, **options: Any) -> Suite:  # fmt: skip
        env = {"BACKENDS": BATCHER_BACKENDS, "BATCHER_TYPE": kind, **(extra_env or {})}
        server_env = {}
        if delay:
            env["TRITONSERVER_DELAY_SCHEDULER"] = server_env["TRITONSERVER_DELAY_SCHEDULER"] = str(delay)
        script = _unittest(checkouts, folder, "batcher_test.py", f"BatcherTest.{name}", extra_env=env)
        script = replace(script, name=f"{script.name} [{label.removeprefix(name).strip('-') or kind}]")
        args = (f"--backend-directory={STAND_IN_BACKENDS}", *options.pop("args", ()))
        return Suite(f"qa-batcher-{label}", build, (script,), args, server_env=server_env, **options)

    suites: list[Suite] = []
    for kind in ("FIXED", "VARIABLE"):
        build = fixed(two_six) if kind == "FIXED" else variable
        suites += [case(name, f"{name}-{kind}", build, kind) for name in BATCHER_NO_DELAY]
        suites += [case(name, f"{name}-{kind}", build, kind, delay) for name, delay in BATCHER_DELAYS.items()]
    suites += [case(name, name, variable, "VARIABLE") for name in BATCHER_DIFFERENT_SHAPES]
    name = "test_multi_batch_delayed_preferred_different_shape"
    suites.append(case(name, name, variable, "VARIABLE", 4))
    only = fixed("dynamic_batching { preferred_batch_size: [ 4, 6 ] }\n")
    suites += [case(name, name, only, "FIXED", delay) for name, delay in BATCHER_PREFERRED_ONLY.items()]
    # (test.sh's sed of max_queue_delay_microseconds matches nothing: the model keeps 0 in both cases)
    slow = custom(
        100,
        "dynamic_batching { max_queue_delay_microseconds: 0}\ninstance_group [ { kind: KIND_GPU } ]\n"
        'parameters [\n{ key: "execute_delay_ms"; value: { string_value: "100" }}\n]\n',
    )
    for name, delay_us in (("test_max_queue_delay_only_default", "0"),
                           ("test_max_queue_delay_only_non_default", "20000")):  # fmt: skip
        suites.append(case(name, name, slow, "FIXED", extra_env={"MAX_QUEUE_DELAY_MICROSECONDS": delay_us}))
    delays = ('instance_group [ { kind: KIND_GPU count: 2 }]\nparameters [\n'
              '{ key: "execute_delay_ms"; value: { string_value: "100" }},\n'
              '{ key: "instance_wise_delay_multiplier"; value: { string_value: "4" }}\n]\n')  # fmt: skip
    name = "test_multi_batch_preserve_ordering"
    for label, flag, option in (("not_preserve", (), ""), ("preserve", ("-p",), " preserve_ordering: true")):
        trace = here / f"{label}.log"
        verify = Script(f"{QA}{folder}/verify_timestamps.py {' '.join(flag)} {label}.log".replace("  ", " "),
                        ("{python}", "verify_timestamps.py", *flag, trace.name), here)  # fmt: skip
        batching = f"dynamic_batching {{ preferred_batch_size: [ 4 ]{option} }}\n"
        args = (f"--trace-file={trace}", "--trace-level=MIN", "--trace-rate=1")
        suites.append(case(name, f"{name}-{label}", custom(4, batching + delays), "FIXED", 12, args=args,
                           after_stop=(verify,)))  # fmt: skip
    return suites


def batch_input(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_batch_input's ONNX and TorchScript trials as its test.sh builds them: NVIDIA's
    ``gen_qa_ragged_models.py`` models under the five names and kinds of batch input it gives them
    (element counts, running totals with and without a leading zero, the largest count as a shape, item
    shapes flattened and not), and ``ragged_io``, an identity with a ragged input and a
    ``BATCH_SCATTER_WITH_INPUT_SHAPE`` output; ``batch_input_test.py``'s eight cases send ragged
    requests from threads so that they batch."""
    folder = "L0_batch_input"

    def builder(backend: str) -> Callable[[Path], None]:
        def build(repo: Path) -> None:
            work = repo.parent.parent
            ragged = _generated(checkouts, work, "gen_qa_ragged_models.py", f"--{backend}")
            identity = _generated(checkouts, work, "gen_qa_identity_models.py", f"--{backend}")
            renamed = (f"{backend}_batch_input", f"{backend}_batch_item")
            count, total = "BATCH_ELEMENT_COUNT", "BATCH_ACCUMULATED_ELEMENT_COUNT"
            for name, source, edits in (
                ("ragged_element_count_acc_zero", renamed[0], ()),
                ("ragged_acc_shape", renamed[0], ((count, total),
                 (f"{total}_WITH_ZERO", "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE"))),
                ("batch_item_flatten", renamed[0], ((count, total),
                 (f"{total}_WITH_ZERO", "BATCH_ITEM_SHAPE_FLATTEN"))),
                ("batch_item", renamed[1], ()),
            ):  # fmt: skip
                model = copy_model(ragged / source, repo, name)
                if name == "batch_item_flatten":  # sed "0,/-1/{s/-1/-1, -1/}": the first -1 only
                    config = model / "config.pbtxt"
                    config.write_text(config.read_text().replace("-1", "-1, -1", 1))
                edit_config(model, (source, name), *edits)
            source = f"{backend}_nobatch_zero_1_float32"
            model = copy_model(identity / source, repo, "ragged_io")
            # ("In case of libtorch, update I/O names": the first "__0" of each line)
            edit_config(model, ("__0", "0"), (source, "ragged_io"),
                        ("^max_batch_size:.*", "max_batch_size: 4"),
                        ('name: "INPUT0"', 'name: "INPUT0"\nallow_ragged_batch: true'),
                        append='batch_output [{target_name: "OUTPUT0" kind: BATCH_SCATTER_WITH_INPUT_SHAPE '
                               'source_input: "INPUT0" }] '
                               "dynamic_batching { max_queue_delay_microseconds: 1000000 }\n")  # fmt: skip

        return build

    suites = []
    for backend in ("onnx", "libtorch"):
        script = _unittest(checkouts, folder, "batch_input_test.py")
        script = replace(script, name=f"{script.name} [{backend}]")
        name = "qa-batch_input" + ("" if backend == "onnx" else f"-{backend}")
        suites.append(Suite(name, builder(backend), (script,), ("--exit-timeout-secs=120",)))
    return suites


#: L0_dyna_sequence_batcher's cases, by the ``NO_BATCHING`` its test.sh runs them with.
DYNA_SEQUENCE_UNBATCHED = ("test_simple_sequence", "test_length1_sequence")
DYNA_SEQUENCE_BATCHED = (
    "test_multi_sequence_different_shape",
    "test_multi_sequence",
    "test_multi_parallel_sequence",
    "test_backlog",
    "test_backlog_fill",
    "test_backlog_fill_no_end",
    "test_backlog_sequence_timeout",
)


def dyna_sequence(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_dyna_sequence_batcher as its test.sh runs it, each case on a server of its own, with
    explicit state (``IMPLICIT_STATE=0``, NVIDIA's ``gen_qa_dyna_sequence_models.py`` and qa's
    ``custom_dyna_sequence_int32``, UINT64 and STRING correlation IDs, on the ``dyna_sequence``
    stand-in) and implicit state (``=1``, ``gen_qa_dyna_sequence_implicit_models.py``): the ``oldest``
    sequence batcher with START/END/READY/CORRID controls on ONNX and TorchScript accumulators,
    without batching, then with four candidate sequences and a 5 s queue delay (backlogs, idle
    timeouts, parallel sequences), then the custom model with ``allow_ragged_batch``."""
    folder = "L0_dyna_sequence_batcher"
    custom_source = checkouts.qa / "custom_models" / "custom_dyna_sequence_int32"
    candidates = ("max_candidate_sequences:.*", "max_candidate_sequences:4")
    delay = ("max_queue_delay_microseconds:.*", "max_queue_delay_microseconds:5000000")
    one = ("kind: KIND_CPU", "kind: KIND_CPU\ncount: 1")

    def builder(implicit: bool, batched: bool) -> Callable[[Path], None]:
        generator = f"gen_qa_dyna_sequence{'_implicit' if implicit else ''}_models.py"

        def build(repo: Path) -> None:
            flags = ("--onnx",) if implicit else ("--onnx", "--libtorch")
            source = _generated(checkouts, repo.parent.parent, generator, *flags)
            made = [copy_model(model, repo) for model in sorted(p for p in source.iterdir() if p.is_dir())]
            for model in made:
                edit_config(model, one)
            if not implicit:  # (test.sh: "Implicit state models for custom backend do not exist")
                custom = copy_model(custom_source, repo)
                (custom / "1").mkdir(exist_ok=True)
                edit_config(custom, one)
                string = copy_model(custom, repo, "custom_string_dyna_sequence_int32")
                string_id = (r"(CONTROL_SEQUENCE_CORRID\n.*)data_type:.*", r"\1data_type: TYPE_STRING")
                renamed = ("custom_dyna_sequence_int32", "custom_string_dyna_sequence_int32")
                edit_config(string, renamed, string_id)
                made += [custom, string]
            if batched:
                for model in made:
                    edit_config(model, candidates, delay)

        return build

    def ragged(repo: Path) -> None:
        custom = copy_model(custom_source, repo)
        (custom / "1").mkdir(exist_ok=True)
        allowed = ('name:.*"INPUT"', 'name: "INPUT"\nallow_ragged_batch: true')
        edit_config(custom, one, allowed, candidates, delay)

    def suite(case: str, implicit: bool, env: dict[str, str], build: Callable[[Path], None]) -> Suite:
        script = _unittest(checkouts, folder, "dyna_sequence_batcher_test.py",
                           f"DynaSequenceBatcherTest.{case}", extra_env=env)  # fmt: skip
        state = "implicit" if implicit else "explicit"
        script = replace(script, name=f"{script.name} [{state} state]")
        args = (f"--backend-directory={STAND_IN_BACKENDS}",)
        return Suite(f"qa-dyna_sequence-{case}-{state}", build, (script,), args)

    suites = []
    for implicit in (False, True):
        for batched, cases in ((False, DYNA_SEQUENCE_UNBATCHED), (True, DYNA_SEQUENCE_BATCHED)):
            # (NVIDIA's implicit-state generator takes --libtorch but makes no TorchScript model)
            backends = "onnx" if implicit else "onnx libtorch custom custom_string"
            env = {"BACKENDS": backends, "IMPLICIT_STATE": str(int(implicit)),
                   "NO_BATCHING": str(int(not batched))}  # fmt: skip
            suites += [suite(case, implicit, env, builder(implicit, batched)) for case in cases]
    env = {"BACKENDS": "onnx libtorch custom custom_string", "IMPLICIT_STATE": "0", "NO_BATCHING": "0"}
    suites.append(suite("test_multi_sequence_different_shape_allow_ragged", False, env, ragged))
    return suites


def corrid_data_types(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_sequence_corrid_batcher's ``test_corrid_data_type``, a server per type as its test.sh runs
    it: qa's Python ``add_sub`` with a ``CONTROL_SEQUENCE_CORRID`` control of each type, a string and an
    integer correlation ID sent to each (the wrong kind refused in Triton's words)."""
    folder = "L0_sequence_corrid_batcher"
    suites = []
    for datatype in ("TYPE_STRING", "TYPE_UINT32", "TYPE_INT32", "TYPE_UINT64", "TYPE_INT64"):
        control = (
            'sequence_batching { control_input [{ name: "CORRID" control [{ kind: CONTROL_SEQUENCE_CORRID '
            f"data_type: {datatype} }}] }}] }}\n"
        )

        def build(repo: Path, control: str = control) -> None:
            source = checkouts.qa / "python_models" / "add_sub"
            model = place_python_model(repo, "add_sub", source / "model.py", source / "config.pbtxt")
            edit_config(model, append=control)

        # (test.sh exports NO_BATCHING and MODEL_INSTANCES for its earlier cases; the file reads them)
        env = {"TRITONSERVER_CORRID_DATA_TYPE": datatype, "NO_BATCHING": "0", "MODEL_INSTANCES": "4"}
        script = _unittest(checkouts, folder, "sequence_corrid_batcher_test.py",
                           "SequenceCorrIDBatcherTest.test_corrid_data_type", extra_env=env)  # fmt: skip
        script = replace(script, name=f"{script.name} [{datatype}]")
        suites.append(Suite(f"qa-sequence_corrid-{datatype}", build, (script,)))
    return suites


def iterative_sequence(checkouts: Checkouts) -> Suite:
    """qa/L0_iterative_sequence: an ``iterative_sequence`` model (its C++ test backend on a stand-in)
    whose requests the model releases for rescheduling until their countdown ends, in explicit mode,
    over gRPC streams and ``generate_stream``; a backlog, an idle timeout shorter than the model's
    0.5 s runs, and the schedulers that cannot take a request back (``direct``, ``oldest`` without
    ``iterative_sequence``, the dynamic batcher), each reloaded with its config by the test."""
    folder = "L0_iterative_sequence"

    def build(repo: Path) -> None:
        model = copy_model(checkouts.qa / folder / "models" / "iterative_sequence", repo)
        (model / "1").mkdir(exist_ok=True)

    script = _unittest(checkouts, folder, "iterative_sequence_e2e.py")
    args = ("--model-control-mode=EXPLICIT", f"--backend-directory={STAND_IN_BACKENDS}")
    return Suite("qa-iterative_sequence", build, (script,), args)


#: L0_sequence_batcher's cases and the start delays (queued, backlog) its test.sh runs each with.
SEQUENCE_NO_DELAY = (
    "test_simple_sequence",
    "test_length1_sequence",
    "test_batch_size",
    "test_no_sequence_start",
    "test_no_sequence_start2",
    "test_no_sequence_end",
    "test_no_correlation_id",
)
SEQUENCE_DELAYS = {
    "test_backlog_fill": (10, 2),
    "test_backlog_fill_no_end": (10, 3),
    "test_backlog_same_correlation_id": (12, 2),
    "test_backlog_same_correlation_id_no_end": (16, 0),
    "test_backlog_sequence_timeout": (4, 0),
    "test_half_batch": (8, 0),
    "test_skip_batch": (12, 0),
    "test_full_batch": (12, 0),
    "test_ragged_batch": (12, 0),
    "test_backlog": (12, 0),
}
SEQUENCE_QUEUE_DELAY = (
    "test_queue_delay_no_min_util",
    "test_queue_delay_half_min_util",
    "test_queue_delay_full_min_util",
)
#: test.sh's repositories: (max_batch_size, instance count), None where the trial's models don't batch.
SEQUENCE_TRIALS = {"0": (None, 4), "1": (4, 1), "2": (2, 2), "4": (1, 4), "v": (4, 1)}


#: L0_sequence_batcher's runs: (label, ``IMPLICIT_STATE``, initial state, ``BACKENDS``).  The
#: initial-state repositories hold ONNX models only (NVIDIA's ``gen_qa_model_repository``), and qa's
#: Python ``sequence_int32`` keeps no implicit state, so the state runs leave it out.
SequenceRun = tuple[str, bool, str | None, str]
SEQUENCE_RUNS: tuple[SequenceRun, ...] = (
    ("", False, None, "onnx libtorch python custom"),
    ("implicit-", True, None, "onnx libtorch"),
    ("initial_zero-", True, "zero", "onnx"),
    ("initial_file-", True, "file", "onnx"),
)


def sequence_batcher(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_sequence_batcher as its test.sh runs it, each case on a server of its own, for its
    repositories of one instance of batch 4, two of batch 2, four of batch 1, four that do not batch,
    and variable-size models (``MODEL_TRIALS`` 0, 1, 2, 4, v), then its ``direct`` queue delays with
    no, half and full minimum slot utilization: the ``direct`` sequence batcher's slots, null requests,
    backlogs, idle timeouts and start delays.  Four runs (``SEQUENCE_RUNS``, ``ENSEMBLES=0``): NVIDIA's
    ``gen_qa_sequence_models.py --onnx --libtorch`` accumulators (INT32 and BOOL, fixed and
    ``--variable``) and qa's Python ``sequence_int32`` under their configs; ``gen_qa_implicit_models.py``'s
    accumulators keeping their sums in implicit state (STRING too); and its ONNX ones whose state
    starts from ``initial_state`` zeros or from a data file."""
    folder = "L0_sequence_batcher"
    sequence_py = checkouts.qa / "python_models" / "sequence_int32" / "model.py"

    def models(
        repo: Path, variable: bool, nobatch: bool, run: SequenceRun, ensembles: bool = False
    ) -> list[Path]:
        """test.sh's MODELS for a run's backends: ONNX and TorchScript ones copied (but TorchScript's
        STRING accumulators where they batch), Python ones made from their ONNX twins' configs
        (``generate_python_models``); with an initial state from a file, the file beside each; with
        ``ensembles``, the INT32 accumulators' three ensembles each (``simple_``, ``sequence_`` and
        ``fan_``, NVIDIA's ``gen_qa_sequence_models.py --ensemble``; the Python ones the ONNX ones'
        configs renamed, as test.sh makes them from the fixed-size repository even for ``v``)."""
        _, implicit, initial, backends = run
        generator = "gen_qa_implicit_models.py" if implicit else "gen_qa_sequence_models.py"
        flags: tuple[str, ...] = tuple(f"--{b}" for b in backends.split() if b not in ("python", "custom"))
        # (one repository for both: test.sh turns its zeros into the file)
        flags += ("--initial-state", "zero") if initial else ()
        flags += ("--variable",) if variable else ()
        source = _generated(checkouts, repo.parent.parent, generator, *flags)
        infix = "_nobatch" if nobatch else ""
        made = []
        for dtype in ("object", "int32", "bool") if implicit else ("int32", "bool"):
            onnx = source / f"onnx{infix}_sequence_{dtype}"
            made.append(copy_model(onnx, repo))
            if "libtorch" in backends and (dtype != "object" or nobatch):
                made.append(copy_model(source / f"libtorch{infix}_sequence_{dtype}", repo))
            if "python" in backends:
                python = place_python_model(repo, f"python{infix}_sequence_{dtype}", sequence_py)
                shutil.copyfile(onnx / "config.pbtxt", python / "config.pbtxt")
                edit_config(python, ("platform:.*", 'backend: "python"'), ("onnx", "python"))
                made.append(python)
        if "custom" in backends:  # qa's custom_sequence_int32 (max_batch_size 8) on the sequence stand-in
            custom = copy_model(checkouts.qa / "custom_models" / "custom_sequence_int32", repo)
            (custom / "1").mkdir(exist_ok=True)
            made.append(custom)
        if ensembles:
            fixed = _generated(checkouts, repo.parent.parent, "gen_qa_sequence_models.py", "--ensemble")
            varied = _generated(checkouts, repo.parent.parent, "gen_qa_sequence_models.py", "--ensemble",
                                "--variable") if variable else fixed  # fmt: skip
            for kind in ("simple", "sequence", "fan"):
                for backend in backends.split():
                    if backend == "custom":  # (test.sh makes no ensemble of it)
                        continue
                    if backend == "python":
                        onnx_name = f"{kind}_onnx{infix}_sequence_int32"
                        ensemble = copy_model(fixed / onnx_name, repo, onnx_name.replace("onnx", "python"))
                        edit_config(ensemble, ("onnx", "python"))
                    else:
                        ensemble = copy_model(varied / f"{kind}_{backend}{infix}_sequence_int32", repo)
                    made.append(ensemble)
        if initial == "file":
            for model in made:
                (model / "initial_state").mkdir()
                (model / "initial_state" / "input_state_data").write_bytes(b"\x64\x00\x00\x00")
                edit_config(model, ("zero_data.*", 'data_file:"input_state_data"'))
        return made

    def trial(name: str, run: SequenceRun) -> Callable[[Path], None]:
        max_batch_size, count = SEQUENCE_TRIALS[name]

        def build(repo: Path) -> None:
            ensembles = run[0] == ""  # (the explicit-state run: the state runs' ensembles are not made)
            made = models(
                repo, variable=name == "v", nobatch=max_batch_size is None, run=run, ensembles=ensembles
            )
            for model in made:
                _on_cpu(model)
                edit_config(model, ("kind: KIND_CPU", f"kind: KIND_CPU\ncount: {count}"))
                if max_batch_size is not None:
                    edit_config(model, ("^max_batch_size:.*", f"max_batch_size: {max_batch_size}"))
            if ensembles:  # the ensembles' nop steps (qa's C++ identity models) on the identity stand-in
                fixed = _generated(checkouts, repo.parent.parent, "gen_qa_sequence_models.py", "--ensemble")
                for nop in fixed.glob("nop_*"):
                    (copy_model(nop, repo) / "1").mkdir(exist_ok=True)

        return build

    def queue_delay(run: SequenceRun) -> Callable[[Path], None]:
        def build(repo: Path) -> None:
            delay = "max_queue_delay_microseconds: 3000000\nminimum_slot_utilization: 0"
            direct = f"sequence_batching {{\ndirect {{\n{delay}\n}}"
            for model in models(repo, variable=False, nobatch=False, run=run):
                _on_cpu(model)
                sizes = ("^max_batch_size:.*", "max_batch_size: 4")
                edit_config(
                    model,
                    sizes,
                    ("kind: KIND_CPU", "kind: KIND_CPU\ncount: 1"),
                    ("sequence_batching \\{", direct),
                )
                for suffix, utilization in (("_half", "0.5"), ("_full", "1")):
                    copy = copy_model(model, repo, model.name + suffix)
                    utilized = ("minimum_slot_utilization: 0", f"minimum_slot_utilization: {utilization}")
                    edit_config(copy, (model.name, model.name + suffix), utilized)

        return build

    def ragged(repo: Path) -> None:
        model = copy_model(checkouts.qa / "custom_models" / "custom_sequence_int32", repo)
        (model / "1").mkdir(exist_ok=True)
        edit_config(model, ('name:.*"INPUT"', 'name: "INPUT"\nallow_ragged_batch: true'))

    def case(
        name: str, label: str, build: Callable[[Path], None], env: dict[str, str], delays: tuple[int, int]
    ) -> Suite:
        server_env = {}
        if delays != (0, 0) or name in SEQUENCE_DELAYS or name in SEQUENCE_QUEUE_DELAY:
            server_env = {"TRITONSERVER_DELAY_SCHEDULER": str(delays[0]),
                          "TRITONSERVER_BACKLOG_DELAY_SCHEDULER": str(delays[1])}  # fmt: skip
        script = _unittest(checkouts, folder, "sequence_batcher_test.py", f"SequenceBatcherTest.{name}",
                           extra_env={**env, **server_env})  # fmt: skip
        script = replace(script, name=f"{script.name} [{label}]")
        return Suite(
            f"qa-sequence_batcher-{name}-{label}",
            build,
            (script,),
            ("--log-verbose=1", f"--backend-directory={STAND_IN_BACKENDS}"),
            server_env=server_env,
        )

    suites = []
    for run in SEQUENCE_RUNS:
        prefix, implicit, initial, backends = run
        base = {"BACKENDS": backends, "ENSEMBLES": str(int(not implicit)),
                "IMPLICIT_STATE": str(int(implicit)), "INITIAL_STATE_FILE": str(int(initial == "file")),
                "INITIAL_STATE_ZERO": str(int(initial == "zero")), "USE_SINGLE_BUFFER": "0"}  # fmt: skip
        for name, (max_batch_size, count) in SEQUENCE_TRIALS.items():
            env = {**base, "NO_BATCHING": "1" if max_batch_size is None else "0",
                   "MODEL_INSTANCES": "1" if name == "v" else str(count),
                   "BATCHER_TYPE": "VARIABLE" if name == "v" else "FIXED"}  # fmt: skip
            build = trial(name, run)
            label = f"{prefix}models{name}"
            suites += [case(test, label, build, env, (0, 0)) for test in SEQUENCE_NO_DELAY]
            suites += [case(test, label, build, env, delays) for test, delays in SEQUENCE_DELAYS.items()]
        env = {**base, "NO_BATCHING": "0", "MODEL_INSTANCES": "1", "BATCHER_TYPE": "FIXED"}
        label = f"{prefix}queue_delay_models"
        suites += [case(test, label, queue_delay(run), env, (2, 0)) for test in SEQUENCE_QUEUE_DELAY]
        if "custom" in backends:  # test.sh's ragged_models: requests of different shapes in one batch
            suites.append(case("test_ragged_batch_allowed", f"{prefix}ragged_models", ragged, env, (12, 0)))
    return suites


def sequence_request_timeout(checkouts: Checkouts) -> Suite:
    """L0_sequence_batcher's ``SequenceBatcherRequestTimeoutTest``: its ``custom_sequence_int32_timeout``
    (one slot, the identity backend taking 5 s an execution, here its stand-in), a second sequence whose
    requests time out in the backlog, then one of its requests without START."""
    folder = "L0_sequence_batcher"

    def build(repo: Path) -> None:
        model = copy_model(
            checkouts.qa / folder / "request_timeout_models" / "custom_sequence_int32_timeout", repo
        )
        (model / "1").mkdir(exist_ok=True)

    script = _unittest(checkouts, folder, "sequence_batcher_test.py", "SequenceBatcherRequestTimeoutTest",
                       {"NO_BATCHING": "0", "MODEL_INSTANCES": "1", "IMPLICIT_STATE": "0",
                        "INITIAL_STATE_FILE": "0", "BATCHER_TYPE": "FIXED"})  # fmt: skip
    args = ("--log-verbose=1", f"--backend-directory={STAND_IN_BACKENDS}")
    return Suite("qa-sequence_batcher-request_timeout", build, (script,), args)


def sequence_preserve_ordering(checkouts: Checkouts) -> Suite:
    """L0_sequence_batcher's ``SequenceBatcherPreserveOrderingTest``: qa's Python ``sequence_py`` under
    the ``oldest`` strategy with and without ``preserve_ordering`` (its decoupled copies too, which
    test.sh makes and its cases leave alone): ten sequences from threads on one gRPC stream, each
    sequence's answers in order, with ``preserve_ordering`` every answer in the order sent, and
    executions that batched requests."""
    folder = "L0_sequence_batcher"

    def build(repo: Path) -> None:
        source = checkouts.qa / "python_models" / "sequence_py"
        for mode in ("decoupled", "nondecoupled"):
            for label, preserve in (("no_preserve_ordering", False), ("preserve_ordering", True)):
                name = f"seqpy_{label}_{mode}"
                model = place_python_model(repo, name, source / "model.py")
                shutil.copyfile(source / "config.pbtxt", model / "config.pbtxt")
                if preserve:
                    edit_config(model, ("^preserve_ordering: False", "preserve_ordering: True"))
                if mode == "decoupled":
                    edit_config(model, append="\nmodel_transaction_policy { decoupled: true }\n")

    script = _unittest(checkouts, folder, "sequence_batcher_test.py", "SequenceBatcherPreserveOrderingTest",
                       {"NO_BATCHING": "0", "MODEL_INSTANCES": "1", "IMPLICIT_STATE": "0",
                        "INITIAL_STATE_FILE": "0", "BATCHER_TYPE": "FIXED"})  # fmt: skip
    return Suite("qa-sequence_batcher-preserve_ordering", build, (script,), ("--log-verbose=1",))


def implicit_state(checkouts: Checkouts) -> Suite:
    """qa/L0_implicit_state's cases of the server's own rules, on NVIDIA's ``gen_qa_implicit_models.py``
    ONNX and TorchScript accumulators as its test.sh places them: a client may not ask for a state's
    output unless the config also declares it an output (``_output`` copies that do), then it gets it."""
    folder = "L0_implicit_state"
    backends = "libtorch onnx"

    def build(repo: Path) -> None:
        source = _generated(
            checkouts, repo.parent.parent, "gen_qa_implicit_models.py", "--onnx", "--libtorch"
        )
        for backend in backends.split():
            name = f"{backend}_nobatch_sequence_int32"
            _on_cpu(copy_model(source / name, repo))
            allowed = copy_model(source / name, repo, f"{name}_output")
            _on_cpu(allowed)
            state = "OUTPUT_STATE__1" if backend == "libtorch" else "OUTPUT_STATE"
            output = f'output [{{ name: "{state}" \n data_type: TYPE_INT32 \n dims: [ 1 ] }}]\n'
            edit_config(allowed, ("^name:.*", f'name: "{name}_output"'), append=output)

    scripts = tuple(
        _unittest(checkouts, folder, "implicit_state.py", f"ImplicitStateTest.{case}", {"BACKENDS": backends})
        for case in ("test_request_output_not_allowed", "test_request_output")
    )
    return Suite("qa-implicit_state", build, scripts)


def _limited(resources: str, priority: str = "") -> str:
    """An instance group test.sh appends: one ``KIND_GPU`` instance needing ``resources``."""
    limiter = f"rate_limiter {{ resources [{resources}]{priority}}}"
    return f"instance_group [{{\nkind: KIND_GPU count: 1\n{limiter}\n}}]\n"


#: test.sh's resources: the first model's instances need 4 ``resource1`` (per device), the second's
#: 2 of it and 2 of a global ``resource2``, at priority 2.
RESOURCE1_4 = '{name: "resource1" count: 4 }'
RESOURCES_2_2 = '{name: "resource1" count: 2 }, {name: "resource2" global: True count: 2 }'


def rate_limiter(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_rate_limiter as its test.sh runs it, step by step, each on a server of its own:
    resource flags too small for an instance (the server must not start, and say why in Triton's
    words), a resource both global and per device, two models of priorities 1 and 2 sharing too few
    and enough resources (the first must run about twice as often, then as often), one model of two
    instance groups, its dynamic batches of 4 under a start delay, and a sequence model's instances
    under the limiter.  Its models are ``custom_zero_1_float32`` (the identity stand-in, 100 ms an
    execution) and ``custom_sequence_int32`` (the sequence stand-in), their ``KIND_GPU`` instances on
    the CPU."""
    folder = "L0_rate_limiter"
    delay = 'parameters [\n{ key: "execute_delay_ms"; value: { string_value: "100" }}\n]\n'
    source = checkouts.qa / "custom_models"

    def zero(repo: Path, name: str, append: str) -> Path:
        model = copy_model(source / "custom_zero_1_float32", repo, name)
        (model / "1").mkdir(exist_ok=True)
        edit_config(model, ("custom_zero_1_float32", name), (r"dims:.*\[.*\]", "dims: [ -1 ]"),
                    ("max_batch_size:.*", "max_batch_size: 4"), append=append)  # fmt: skip
        _on_cpu(model)
        return model

    def two_models(conflict: bool = False) -> Callable[[Path], None]:
        def build(repo: Path) -> None:
            zero(repo, "custom_zero_1_float32", _limited(RESOURCE1_4) + delay)
            zero(repo, "custom_zero_1_float32_v2", _limited(RESOURCES_2_2, " priority: 2") + delay)
            if conflict:  # v3: v2 with resource2 per device
                per_device = RESOURCES_2_2.replace("global: True", "global: False")
                zero(repo, "custom_zero_1_float32_v3", _limited(per_device, " priority: 2") + delay)

        return build

    def one_model(batching: bool) -> Callable[[Path], None]:
        def build(repo: Path) -> None:
            groups = _limited(RESOURCE1_4) + _limited(RESOURCES_2_2, " priority: 2")
            model = zero(repo, "custom_zero_1_float32", groups + delay)
            if batching:
                slower = '{ key: "execute_delay_ms"; value: { string_value: "1000" }}'
                edit_config(model, (".*execute_delay_ms.*", slower),
                            append="dynamic_batching { preferred_batch_size: [ 1, 2, 3, 4 ]\n"
                            " max_queue_delay_microseconds: 5000000 }\n")  # fmt: skip

        return build

    def sequence(repo: Path) -> None:
        model = copy_model(source / "custom_sequence_int32", repo)
        (model / "1").mkdir(exist_ok=True)
        first = 'rate_limiter { resources [{name: "resource1" count: 4 }]}'
        edit_config(model, ("max_sequence_idle_microseconds:.*", "max_sequence_idle_microseconds: 1000000"),
                    ("^max_batch_size:.*", "max_batch_size: 1"),
                    ("kind: KIND_GPU", f"kind: KIND_CPU\ncount: 1 \n{first}"),
                    ("kind: KIND_CPU$", f"kind: KIND_CPU\ncount: 1 \n{first}"),
                    append=_limited(RESOURCES_2_2, " priority: 2")
                    + _limited(RESOURCES_2_2, " priority: 3").replace("count: 1", "count: 2", 1))  # fmt: skip
        _on_cpu(model)

    def refused(label: str, flags: tuple[str, ...], text: str, build: Callable[[Path], None]) -> Suite:
        log = f"inference_server_{label}.log"
        return Suite(f"qa-rate_limiter-{label}", build, (_logged(checkouts, folder, log, text),),
                     ("--rate-limit=execution_count", *flags, f"--backend-directory={STAND_IN_BACKENDS}"),
                     log_link=checkouts.qa / folder / log, fails_to_start=True)  # fmt: skip

    def served(label: str, flags: tuple[str, ...], case: str, build: Callable[[Path], None],
               server_env: dict[str, str] | None = None) -> Suite:  # fmt: skip
        script = _unittest(checkouts, folder, "rate_limiter_test.py", f"RateLimiterTest.{case}", server_env)
        script = replace(script, name=f"{script.name} [{label}]")
        return Suite(f"qa-rate_limiter-{label}", build, (script,),
                     ("--rate-limit=execution_count", *flags, f"--backend-directory={STAND_IN_BACKENDS}"),
                     server_env=server_env or {})  # fmt: skip

    def limited_to(count: int) -> str:
        return (f'Resource count for "resource1" is limited to {count} which will prevent scheduling of one '
                "or more model instances, the minimum required count is 4")  # fmt: skip

    resource = "--rate-limit-resource="
    conflict = ('Resource "resource2" is present as both global and device-specific resource in the model '
                "configuration.")
    return [
        refused("r1", (f"{resource}resource1:1",), limited_to(1), two_models()),
        refused("r3", (f"{resource}resource1:3", f"{resource}resource2:2"), limited_to(3), two_models()),
        refused("rdevice", (f"{resource}resource1:10:10", f"{resource}resource2:2"), limited_to(0),
                two_models()),
        refused("conflict", (), conflict, two_models(conflict=True)),
        served("limited_declared", (f"{resource}resource1:4", f"{resource}resource2:2"),
               "test_cross_model_prioritization_limited_resource", two_models()),
        served("limited", (), "test_cross_model_prioritization_limited_resource", two_models()),
        served("plenty", (f"{resource}resource1:6", f"{resource}resource2:2"),
               "test_cross_model_prioritization_plenty_resource", two_models()),
        served("single_limited", (), "test_single_model", one_model(False)),
        served("single_plenty", (f"{resource}resource1:6", f"{resource}resource2:2"), "test_single_model",
               one_model(False)),
        refused("r3i", (f"{resource}resource1:3", f"{resource}resource2:2"), limited_to(3), one_model(False)),
        served("dynamic_batching", (), "test_single_model_dynamic_batching", one_model(True),
               {"TRITONSERVER_DELAY_SCHEDULER": "8"}),
        served("sequence", (), "test_single_model_sequence_batching", sequence),
    ]  # fmt: skip


def passive_instance(checkouts: Checkouts) -> Suite:
    """qa/L0_passive_instance: ``distributed_int32_int32_int32``, one instance that takes requests
    and one ``passive`` instance (``KIND_GPU``, here on the CPU) that the server must never send
    one, on a stand-in for the C++ ``distributed_addsub`` backend whose passive instance refuses any
    request; ``infer_exact``'s sums and differences over HTTP and gRPC."""
    folder = "L0_passive_instance"

    def build(repo: Path) -> None:
        model = copy_model(checkouts.qa / folder / "models" / "distributed_int32_int32_int32", repo)
        (model / "1").mkdir(exist_ok=True)
        _on_cpu(model)

    script = _unittest(checkouts, folder, "passive_instance_test.py")
    args = ("--exit-timeout-secs=120", f"--backend-directory={STAND_IN_BACKENDS}")
    return Suite("qa-passive_instance", build, (script,), args)


def sequence_stress(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_sequence_stress as its test.sh runs it: eight threads of random sequences on gRPC
    streams (valid, without START, cut short, with gaps), 200 iterations each, checked step by step,
    on qa's ``custom_sequence_int32`` (the sequence stand-in) with one instance of batch 4, two of
    batch 2 and four of batch 1; then ``--grpc-infer-thread-count`` -1, 0, 1 and 129, each of which
    must stop the server at start, and 128, with the three repositories again."""
    folder = "L0_sequence_stress"

    def trial(max_batch_size: int, count: int) -> Callable[[Path], None]:
        def build(repo: Path) -> None:
            model = copy_model(checkouts.qa / "custom_models" / "custom_sequence_int32", repo)
            (model / "1").mkdir(exist_ok=True)
            idle = ("max_sequence_idle_microseconds:.*", "max_sequence_idle_microseconds: 1000000")
            edit_config(model, idle, ("^max_batch_size:.*", f"max_batch_size: {max_batch_size}"),
                        ("kind: KIND_CPU", f"kind: KIND_CPU\ncount: {count}"))  # fmt: skip

        return build

    trials = {"1": trial(4, 1), "2": trial(2, 2), "4": trial(1, 4)}
    backends = f"--backend-directory={STAND_IN_BACKENDS}"
    suites = []
    for threads in (None, 128):
        for name, build in trials.items():
            label = f"models{name}" + (f", {threads} threads" if threads else "")
            path = PYTHONPATH.format(common=checkouts.qa / "common")
            script = Script(f"{QA}{folder}/sequence_stress.py [{label}]", ("{python}", "sequence_stress.py"),
                            checkouts.qa / folder, fixed_ports=True, env={"PYTHONPATH": path})  # fmt: skip
            flags = (backends, f"--grpc-infer-thread-count={threads}") if threads else (backends,)
            label = f"models{name}" + (f"-threads{threads}" if threads else "")
            suites.append(Suite(f"qa-sequence_stress-{label}", build, (script,), flags))
        if threads is None:
            for refused in (-1, 0, 1, 129):
                log = f"inference_server_threads{refused}.log"
                text = "invalid argument for --grpc_infer_thread_count. Must be in the range 2 to 128."
                suites.append(Suite(f"qa-sequence_stress-threads{refused}", trials["1"],
                                    (_logged(checkouts, folder, log, text),),
                                    (backends, f"--grpc-infer-thread-count={refused}"),
                                    log_link=checkouts.qa / folder / log, fails_to_start=True))  # fmt: skip
    return suites


#: qa/L0_libtorch_io_names/test.sh's models: name -> its ``sed`` edits of
#: ``libtorch_float32_float32_float32``'s config (in order: the swaps of the last one go through a
#: temporary name, as test.sh's do).
LIBTORCH_IO_NAMES: dict[str, tuple[tuple[str, str], ...]] = {
    "libtorch_output_index": (),
    "libtorch_io_index": (("INPUT0", "INPUT__0"), ("INPUT1", "INPUT__1")),
    "libtorch_no_output_index": (("OUTPUT__0", "OUTPUT0"), ("OUTPUT__1", "OUTPUT1")),
    "libtorch_no_arguments_output_index": (
        ("INPUT0", "INPUTA"), ("INPUT1", "INPUTB"), ("OUTPUT__0", "OUTPUTA"), ("OUTPUT__1", "OUTPUTB"),
    ),
    "libtorch_mix_index": (("INPUT0", "INPUTA"), ("INPUT1", "INPUT__1"), ("OUTPUT__0", "OUTPUTA")),
    "libtorch_mix_arguments": (("INPUT1", "INPUTB"), ("OUTPUT__0", "OUTPUTA")),
    "libtorch_mix_arguments_index": (("INPUT1", "INPUT__1"), ("OUTPUT__0", "OUTPUT0")),
    "libtorch_unordered_index": (
        ("INPUT0", "INPUT_TMP1"), ("INPUT1", "INPUT0"), ("INPUT_TMP1", "INPUT1"),
        ("OUTPUT__0", "OUT__1"), ("OUTPUT__1", "OUT__0"),
    ),
}  # fmt: skip


def libtorch_io_names(checkouts: Checkouts) -> Suite:
    """qa/L0_libtorch_io_names: one TorchScript model (NVIDIA's ``gen_qa_models.py --libtorch``
    ``libtorch_float32_float32_float32``) under eight configs naming its inputs and outputs by the
    PyTorch backend's conventions (``INPUT__<i>``/``OUTPUT__<i>`` indices, ``forward``'s argument
    names, mixes of both, indices out of order), each answering its sum and difference."""
    folder = "L0_libtorch_io_names"

    def build(repo: Path) -> None:
        generated = _generated(checkouts, repo.parent.parent, "gen_qa_models.py", "--onnx", "--libtorch")
        for name, edits in LIBTORCH_IO_NAMES.items():
            model = copy_model(generated / "libtorch_float32_float32_float32", repo, name)
            edit_config(model, ("libtorch_float32_float32_float32", name), *edits)  # (in order)
            _on_cpu(model)

    script = _unittest(checkouts, folder, "io_names_client.py")
    return Suite("qa-libtorch_io_names", build, (script,))


def libtorch_shared_weights(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_libtorch_shared_weights: NVIDIA's ``libtorch_nobatch_zero_1_float32`` identity
    (``gen_qa_identity_models.py --libtorch``) with 16 instances, each run on a server of its own:
    without ``ENABLE_WEIGHT_SHARING`` no instance reuses another's TorchScript model; with it, on
    ``KIND_CPU`` and on ``KIND_GPU`` (here on the CPU), fifteen of the sixteen do ("Reusing
    TorchScript model for instance", counted in the server's log)."""
    folder = "L0_libtorch_shared_weights"
    sharing = 'parameters: {\n key: "ENABLE_WEIGHT_SHARING"\n value: {\n string_value: "true"\n }\n}\n'

    def build(kind: str, shared: bool) -> Callable[[Path], None]:
        def build(repo: Path) -> None:
            generated = _generated(checkouts, repo.parent.parent, "gen_qa_identity_models.py", "--libtorch")
            model = copy_model(generated / "libtorch_nobatch_zero_1_float32", repo)
            group = f"instance_group [ {{ count: 16 kind: {kind}}}]\n"
            edit_config(model, append=group + (sharing if shared else ""))
            _on_cpu(model)

        return build

    suites = []
    for label, kind, shared, reused in (("0", "KIND_GPU", False, 0), ("1", "KIND_CPU", True, 15),
                                        ("2", "KIND_GPU", True, 15)):  # fmt: skip
        log = f"inference_server_{label}.log"
        case = "SharedWeightsTest.test_pytorch_identity_model"
        test = _unittest(checkouts, folder, "libtorch_shared_weights_test.py", case)
        test = replace(test, name=f"{test.name} [{kind}{', shared' if shared else ''}]")
        reuse = "Reusing TorchScript model for instance"
        counted = ("sh", "-c", _grep_count(reuse, log, f"= {reused}"))
        count = Script(f"{QA}{folder}/test.sh: {reused} '{reuse}' in {log}", counted, checkouts.qa / folder)
        args = ("--exit-on-error=false", "--exit-timeout-secs=10")
        suites.append(Suite(f"qa-libtorch_shared_weights-{label}", build(kind, shared), (test, count), args,
                            log_link=checkouts.qa / folder / log))  # fmt: skip
    return suites


def libtorch_parameters(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_libtorch_inference_mode and L0_libtorch_optimized_execution: NVIDIA's
    ``libtorch_int32_int32_int32`` (``gen_qa_models.py --libtorch``, three versions) with
    ``INFERENCE_MODE`` and then ``DISABLE_OPTIMIZED_EXECUTION`` true and false, each on a server of
    its own: qa's ``libtorch_infer_client.py`` gets its sums and differences, and the server logs what
    the parameter set once per version, in the PyTorch backend's words."""
    suites = []
    for folder, key, line in (("L0_libtorch_inference_mode", "INFERENCE_MODE", "Inference Mode is {}"),
                              ("L0_libtorch_optimized_execution", "DISABLE_OPTIMIZED_EXECUTION",
                               "Optimized execution is {}")):  # fmt: skip
        for flag in ("true", "false"):

            def build(repo: Path, key: str = key, flag: str = flag) -> None:
                flags = ("--onnx", "--libtorch")
                generated = _generated(checkouts, repo.parent.parent, "gen_qa_models.py", *flags)
                model = copy_model(generated / "libtorch_int32_int32_int32", repo)
                parameter = f'parameters: {{ key: "{key}" value: {{ string_value: "{flag}" }} }}\n'
                edit_config(model, append=parameter)
                _on_cpu(model)

            said = ("enabled" if flag == "true" else "disabled") if key == "INFERENCE_MODE" else (
                "disabled" if flag == "true" else "enabled")  # fmt: skip
            log = f"inference_server_{flag}.log"
            client = Script(f"{QA}common/libtorch_infer_client.py [{key}={flag}]",
                            ("{python}", "../common/libtorch_infer_client.py"), checkouts.qa / folder,
                            fixed_ports=True)  # fmt: skip
            counted = ("sh", "-c", _grep_count(line.format(said), log, "= 3"))
            name = f"{QA}{folder}/test.sh: 3 '{line.format(said)}' in {log}"
            count = Script(name, counted, checkouts.qa / folder)
            suites.append(Suite(f"qa-{folder.removeprefix('L0_')}-{flag}", build, (client, count),
                                ("--log-verbose=1",), log_link=checkouts.qa / folder / log))  # fmt: skip
    return suites


def libtorch_io_types(checkouts: Checkouts) -> list[Suite]:
    """qa/L0_libtorch_io_types: TorchScript models (``gen_qa_models.py --libtorch``'s
    ``libtorch_int32_int8_int8``, ``gen_qa_sequence_models.py --libtorch --variable``'s
    ``libtorch_sequence_int32``) whose configs give an input, an output and a sequence control a type
    PyTorch has not (UINT32, UINT64): each server must not start, and must say why in the PyTorch
    backend's words."""
    folder = "L0_libtorch_io_types"

    def int8(name: str, *edits: tuple[str, str]) -> Callable[[Path], None]:
        def build(repo: Path) -> None:
            flags = ("--onnx", "--libtorch")
            generated = _generated(checkouts, repo.parent.parent, "gen_qa_models.py", *flags)
            model = copy_model(generated / "libtorch_int32_int8_int8", repo, name)
            edit_config(model, ("libtorch_int32_int8_int8", name), *edits)
            _on_cpu(model)

        return build

    def sequence(repo: Path) -> None:
        flags = ("--onnx", "--libtorch", "--variable")
        generated = _generated(checkouts, repo.parent.parent, "gen_qa_sequence_models.py", *flags)
        name = "libtorch_invalid_sequence_int32"
        model = copy_model(generated / "libtorch_sequence_int32", repo, name)
        typed = (r"CORRID\n(.*)int32_false_true: \[ 0, 1 \]", "CORRID\ndata_type: TYPE_UINT32")
        edit_config(model, ("libtorch_sequence_int32", name), ("READY__2", "CORRID__2"),
                    ("CONTROL_SEQUENCE_READY", "CONTROL_SEQUENCE_CORRID"), typed)  # fmt: skip
        _on_cpu(model)

    cases = (
        ("input", int8("libtorch_invalid_input_type", ("TYPE_INT32", "TYPE_UINT32")),
         "unsupported datatype TYPE_UINT32 for input 'INPUT0' for model 'libtorch_invalid_input_type'"),
        ("output", int8("libtorch_invalid_output_type", ("TYPE_INT8", "TYPE_UINT64")),
         "unsupported datatype TYPE_UINT64 for output 'OUTPUT__0' for model 'libtorch_invalid_output_type'"),
        ("sequence", sequence, "input 'CORRID__2' type 'TYPE_UINT32' is not supported by PyTorch."),
    )  # fmt: skip
    suites = []
    for label, build, text in cases:
        log = f"server_{label}.log"
        suites.append(Suite(f"qa-libtorch_io_types-{label}", build, (_logged(checkouts, folder, log, text),),
                            log_link=checkouts.qa / folder / log, fails_to_start=True))  # fmt: skip
    return suites


def batching_suites(checkouts: Checkouts) -> list[Suite]:
    return [
        implicit_state(checkouts),
        sequence_preserve_ordering(checkouts),
        sequence_request_timeout(checkouts),
        *sequence_batcher(checkouts),
        iterative_sequence(checkouts),
        *batcher_suites(checkouts),
        *batch_input(checkouts),
        *dyna_sequence(checkouts),
        *corrid_data_types(checkouts),
        *rate_limiter(checkouts),
        passive_instance(checkouts),
        *sequence_stress(checkouts),
        libtorch_io_names(checkouts),
        *libtorch_shared_weights(checkouts),
        *libtorch_parameters(checkouts),
        *libtorch_io_types(checkouts),
    ]
