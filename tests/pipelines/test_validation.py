"""Every load-time check of an ensemble: the broken ones are UNAVAILABLE with Triton's reason (naming
the step or model at fault) while the valid pipeline next to them serves."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.pipelines.models import (
    BATCHED_ADD_SUB,
    BATCHED_ADD_SUB_PY,
    FP32_4,
    copy_examples,
    ensemble,
    step,
    tensors,
)
from tests.support.models import write_model
from tests.support.server import ServerProcess

ADD_SUB = {"INPUT0": "A", "INPUT1": "B"}
INT32_1 = "data_type: TYPE_INT32 dims: [ 1 ]"
SUM_DIFF = {"OUTPUT0": "S", "OUTPUT1": "D"}
MUL_SD = step("mul", {"INPUT0": "S", "INPUT1": "D"}, {"OUTPUT": "OUT"})
AB = tensors("A", "B")
OUT = tensors("OUT")

#: name -> (config, the reason the index must show).
BROKEN: dict[str, tuple[str, str]] = {
    "missing_step": (
        ensemble("missing_step", step("ghost", {"IN": "A"}, {"OUT": "OUT"}), tensors("A"), OUT),
        "ensemble missing_step contains models that are not available or ambiguous: ghost",
    ),
    "bad_input_name": (
        ensemble(
            "bad_input_name", step("add_sub", {"INPUT0": "A", "NOPE": "B"}, SUM_DIFF) + "," + MUL_SD, AB, OUT
        ),
        "in ensemble bad_input_name, ensemble tensor B is mapping to non-existing input NOPE in model add_sub",
    ),
    "bad_output_name": (
        ensemble(
            "bad_output_name", step("add_sub", ADD_SUB, {"OUTPUT0": "S", "NOPE": "D"}) + "," + MUL_SD, AB, OUT
        ),
        "in ensemble bad_output_name, ensemble tensor D is mapped from non-existing output NOPE in model add_sub",
    ),
    "unmapped_input": (
        ensemble(
            "unmapped_input", step("add_sub", {"INPUT0": "A"}, SUM_DIFF) + "," + MUL_SD, tensors("A"), OUT
        ),
        "in ensemble unmapped_input, input INPUT1 in model add_sub is not mapped to any ensemble tensors",
    ),
    "dtype_mismatch": (
        ensemble(
            "dtype_mismatch",
            step("add_sub", ADD_SUB, SUM_DIFF) + "," + MUL_SD,
            tensors("A", "B", spec="data_type: TYPE_INT32 dims: [ 4 ]"),
            OUT,
        ),
        "in ensemble dtype_mismatch, ensemble tensor A: inconsistent data type: TYPE_INT32 is inferred from "
        "model dtype_mismatch while TYPE_FP32 is inferred from model add_sub",
    ),
    "shape_mismatch": (
        ensemble(
            "shape_mismatch",
            step("add_sub", ADD_SUB, SUM_DIFF) + "," + MUL_SD,
            AB,
            tensors("OUT", spec="data_type: TYPE_FP32 dims: [ 3 ]"),
        ),
        "in ensemble shape_mismatch, ensemble tensor OUT: inconsistent shape: [4] is inferred from model mul "
        "while [3] is inferred from model shape_mismatch",
    ),
    "cycle": (
        ensemble(
            "cycle",
            step("mul", {"INPUT0": "A", "INPUT1": "LOOP"}, {"OUTPUT": "C"})
            + ","
            + step("add_sub", {"INPUT0": "C", "INPUT1": "A"}, {"OUTPUT0": "LOOP", "OUTPUT1": "OUT"}),
            tensors("A"),
            OUT,
        ),
        # (Triton's words for a graph whose steps need each other's tensors: what it leaves unwritten)
        "output 'OUT' for ensemble 'cycle' is not written",
    ),
    "unused_input": (
        ensemble(
            "unused_input", step("add_sub", ADD_SUB, SUM_DIFF) + "," + MUL_SD, tensors("A", "B", "EXTRA"), OUT
        ),
        "ensemble input 'EXTRA' for ensemble unused_input' is not used",
    ),
    "unwritten_output": (
        ensemble(
            "unwritten_output",
            step("mul", {"INPUT0": "A", "INPUT1": "NOWHERE"}, {"OUTPUT": "OUT"}),
            tensors("A"),
            OUT,
        ),
        "output 'OUT' for ensemble 'unwritten_output' is not written: at least one of its depending tensors, "
        "'NOWHERE', is not connected (it is an input of step 0, model 'mul')",
    ),
    "unknown_output": (
        ensemble(
            "unknown_output", step("add_sub", ADD_SUB, SUM_DIFF) + "," + MUL_SD, AB, tensors("OUT", "GHOST")
        ),
        "ensemble output 'GHOST' for ensemble unknown_output' is not used",
    ),
    "unused_tensor": (
        ensemble(
            "unused_tensor",
            step("add_sub", ADD_SUB, {"OUTPUT0": "OUT", "OUTPUT1": "SPARE"}),
            AB,
            OUT,
        ),
        "ensemble tensor 'SPARE' is unused in ensemble 'unused_tensor' (written by step 0, model 'add_sub')",
    ),
    "written_twice": (
        ensemble(
            "written_twice",
            step("add_sub", ADD_SUB, {"OUTPUT0": "OUT", "OUTPUT1": "D"})
            + ","
            + step("mul", {"INPUT0": "A", "INPUT1": "D"}, {"OUTPUT": "OUT"}),
            AB,
            OUT,
        ),
        "ensemble tensor 'OUT' can appear in an output map only once for ensemble 'written_twice' step 1",
    ),
    "mixed_step_inputs": (
        ensemble(
            "mixed_step_inputs",
            step("square_int32", {"IN": "N"}, {"OUT": "SQ"})
            + ","
            + step("repeat_int32", {"IN": "SQ", "DELAY": "D", "WAIT": "W"}, {"OUT": "OUT", "IDX": "IDX"}),
            tensors("N", spec=INT32_1) + "," + tensors("D", "W", spec="data_type: TYPE_UINT32 dims: [ 1 ]"),
            tensors("OUT", spec=INT32_1) + "," + tensors("IDX", spec="data_type: TYPE_UINT32 dims: [ 1 ]"),
        ),
        "in ensemble mixed_step_inputs, step of model 'repeat_int32' receives inputs originated from "
        "different decoupled models",
    ),
    "mixed_outputs": (
        ensemble(
            "mixed_outputs",
            step("square_int32", {"IN": "N"}, {"OUT": "A"})
            + ","
            + step("square_int32", {"IN": "N"}, {"OUT": "B"}),
            tensors("N", spec=INT32_1),
            tensors("A", "B", spec=INT32_1),
        ),
        "in ensemble mixed_outputs, step of model 'mixed_outputs' receives inputs originated from different "
        "decoupled models",
    ),
    "too_big_batch": (
        ensemble(
            "too_big_batch",
            step("batched_add_sub", ADD_SUB, SUM_DIFF)
            + ","
            + step("batched_add_sub", {"INPUT0": "S", "INPUT1": "D"}, {"OUTPUT0": "OUT", "OUTPUT1": "X"}),
            AB,
            tensors("OUT", "X"),
            "max_batch_size: 16",
        ),
        "ensemble too_big_batch allows maximum batch size 16, but it contains model batched_add_sub which only "
        "allows maximum batch size to be 8",
    ),
    "no_steps": (
        f'name: "no_steps" platform: "ensemble" input [{{ name: "A" {FP32_4} }}] output [{{ name: "OUT" {FP32_4} }}] '
        "ensemble_scheduling { }",
        "must specify 'step' for ensemble 'no_steps'",
    ),
}


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, str]]]:
    repo = tmp_path_factory.mktemp("broken_ensembles")
    copy_examples(repo, ("add_sub", "mul", "add_sub_mul", "square_int32", "repeat_int32"))
    write_model(repo, "batched_add_sub", BATCHED_ADD_SUB, BATCHED_ADD_SUB_PY)
    for name, (config, _) in BROKEN.items():
        write_model(repo, name, config)
    with ServerProcess([repo], ["--exit-on-error=false"], wait_ready=False) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.is_server_live()
        rows: dict[str, dict[str, str]] = {}
        deadline = time.monotonic() + 60
        while len(rows) < len(BROKEN) + 6 and time.monotonic() < deadline:
            # every model once its load ended (a model still LOADING is not counted yet)
            rows = {
                row["name"]: row
                for row in client.get_model_repository_index()
                if row.get("state") not in (None, "", "LOADING")
            }
            time.sleep(0.05)
        assert not client.is_server_ready()  # strict readiness: broken models hold it down
        a = np.array([1, 2, 3, 4], dtype=np.float32)
        inputs = [httpclient.InferInput("INPUT0", [4], "FP32"), httpclient.InferInput("INPUT1", [4], "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(a)
        assert not client.infer("add_sub_mul", inputs).as_numpy("OUTPUT").any()  # a valid pipeline serves
        client.close()
        yield rows


#: The broken ensembles whose graph alone (or a step model found nowhere) says what is wrong.
POLLED = frozenset(
    ("cycle", "missing_step", "no_steps", "unknown_output", "unused_input", "unused_tensor", "unwritten_output",
     "written_twice")
)  # fmt: skip


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_ensemble_is_unavailable_with_the_reason(
    index: dict[str, dict[str, str]], name: str
) -> None:
    row = index[name]
    assert row["state"] == "UNAVAILABLE"
    if name in POLLED:  # its graph alone is wrong: found when the ensemble is polled, before any version
        assert row["reason"] == BROKEN[name][1]
    else:  # found when its version loads against its step models: with Triton's status prefix (checked)
        assert row["reason"] == "Invalid argument: " + BROKEN[name][1]


def test_the_valid_models_beside_them_are_ready(index: dict[str, dict[str, str]]) -> None:
    for name in ("add_sub", "mul", "add_sub_mul", "square_int32", "repeat_int32", "batched_add_sub"):
        assert index[name]["state"] == "READY", name
