"""The models the pipeline tests serve: ensembles, BLS callers, decoupled and stateful Python models.

Each writer puts one model (``config.pbtxt`` and, for Python models, ``1/model.py``) into a repository,
so a test module builds exactly the repository its server needs.  The example repository's
``add_sub``, ``mul``, ``add_sub_mul``, ``repeat_int32`` and ``square_int32`` are copied as they are.
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

from tests.support.models import IDENTITY_PY, add_sub_returning, write_model
from tests.support.server import EXAMPLES

EXAMPLE_MODELS = ("add_sub", "mul", "add_sub_mul", "repeat_int32", "square_int32")


def copy_examples(repo: Path, names: tuple[str, ...] = EXAMPLE_MODELS) -> None:
    for name in names:
        shutil.copytree(EXAMPLES / name, repo / name)
        for path in (repo / name).rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)


def copy_example_in_processes(repo: Path, name: str, copy: str) -> None:
    """The example ``name`` as model ``copy`` with two instances, so it runs in worker processes."""
    shutil.copytree(EXAMPLES / name, repo / copy)
    for path in (repo / copy).rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    config = repo / copy / "config.pbtxt"
    text = config.read_text().replace(f'name: "{name}"', f'name: "{copy}"')
    config.write_text(
        text.replace("instance_group [{ kind: KIND_CPU }]", "instance_group [{ kind: KIND_CPU count: 2 }]")
    )


# ---- ensembles --------------------------------------------------------------------------------------

#: ``SLEEPER``: OUT = IN + ADD after DELAY seconds (both from the config's parameters).
SLEEPER_PY = """
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.delay = float(parameters["DELAY"]["string_value"])
        self.add = float(parameters["ADD"]["string_value"])

    def execute(self, requests):
        time.sleep(self.delay)
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if (x < 0).any():
                error = pb_utils.TritonError("negative input", pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            out = pb_utils.Tensor("OUT", (x + self.add).astype(np.float32))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""


def sleeper_config(name: str, delay: float, add: float) -> str:
    return f"""
    name: "{name}"
    backend: "python"
    max_batch_size: 8
    input [{{ name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }}]
    output [{{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }}]
    parameters [
      {{ key: "DELAY" value: {{ string_value: "{delay}" }} }},
      {{ key: "ADD" value: {{ string_value: "{add}" }} }}
    ]
    instance_group [{{ kind: KIND_CPU }}]
    dynamic_batching {{ }}
    """


#: A diamond: X -> (left: +1, right: +10, in parallel) -> add_sub -> SUM, DIFF.
DIAMOND = """
name: "diamond"
platform: "ensemble"
max_batch_size: 8
input [{ name: "X" data_type: TYPE_FP32 dims: [ 4 ] }]
output [
  { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "DIFF" data_type: TYPE_FP32 dims: [ 4 ] }
]
ensemble_scheduling {
  step [
    { model_name: "left" model_version: -1
      input_map { key: "IN" value: "X" } output_map { key: "OUT" value: "L" } },
    { model_name: "right" model_version: -1
      input_map { key: "IN" value: "X" } output_map { key: "OUT" value: "R" } },
    { model_name: "batched_add_sub" model_version: -1
      input_map { key: "INPUT0" value: "L" } input_map { key: "INPUT1" value: "R" }
      output_map { key: "OUTPUT0" value: "SUM" } output_map { key: "OUTPUT1" value: "DIFF" } }
  ]
}
"""

BATCHED_ADD_SUB = """
name: "batched_add_sub"
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
instance_group [{ kind: KIND_CPU }]
"""

BATCHED_ADD_SUB_PY = add_sub_returning(
    '[pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]'
)


def write_diamond(repo: Path, delay: float) -> None:
    write_model(repo, "left", sleeper_config("left", delay, 1), SLEEPER_PY)
    write_model(repo, "right", sleeper_config("right", delay, 10), SLEEPER_PY)
    write_model(repo, "batched_add_sub", BATCHED_ADD_SUB, BATCHED_ADD_SUB_PY)
    write_model(repo, "diamond", DIAMOND)


def write_reshaped(repo: Path) -> None:
    """``reshaped``: an ensemble whose input ``[2, 8]`` and output ``[4, 4]`` are ``[16]`` to its step,
    an identity that takes and gives ``[16]`` only (as Triton's ensembles see config ``reshape``)."""
    flat = 'data_type: TYPE_FP32 dims: [ 16 ]'
    config = f"""
    backend: "python"
    max_batch_size: 8
    input [{tensors("INPUT0", spec=flat)}]
    output [{tensors("OUTPUT0", spec=flat)}]
    """
    write_model(repo, "flat16", config, IDENTITY_PY)
    steps = step("flat16", {"INPUT0": "IN"}, {"OUTPUT0": "OUT"})
    inputs = tensors("IN", spec="data_type: TYPE_FP32 dims: [ 2, 8 ] reshape: { shape: [ 16 ] }")
    outputs = tensors("OUT", spec="data_type: TYPE_FP32 dims: [ 4, 4 ] reshape: { shape: [ 16 ] }")
    write_model(repo, "reshaped", ensemble("reshaped", steps, inputs, outputs, "max_batch_size: 8"))


def ensemble(name: str, steps: str, inputs: str, outputs: str, extra: str = "") -> str:
    """An ensemble config; ``steps`` is the body of ``ensemble_scheduling { step [...] }``."""
    return f"""
    name: "{name}"
    platform: "ensemble"
    input [{inputs}]
    output [{outputs}]
    ensemble_scheduling {{ step [{steps}] }}
    {extra}
    """


def step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    maps = [f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items()]
    maps += [f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items()]
    return f'{{ model_name: "{model}" model_version: -1 {" ".join(maps)} }}'


FP32_4 = "data_type: TYPE_FP32 dims: [ 4 ]"


def tensors(*names: str, spec: str = FP32_4) -> str:
    return ", ".join(f'{{ name: "{name}" {spec} }}' for name in names)


# ---- ensembles with decoupled steps -----------------------------------------------------------------

#: ``int_square``: OUT = IN * IN (INT32 [1]); a negative IN fails the request.
INT_SQUARE = """
name: "int_square"
backend: "python"
max_batch_size: 0
input [{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }]
output [{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }]
instance_group [{ kind: KIND_CPU }]
"""

INT_SQUARE_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if (x < 0).any():
                error = pb_utils.TritonError("negative input", pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x * x)]))
        return responses
"""

#: ``counter``: decoupled; N responses K = 0..N-1, all sent at once.  K is [1, 1] so that a batching
#: step can take it (a batch of one).
COUNTER = """
name: "counter"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [{ name: "N" data_type: TYPE_INT32 dims: [ 1 ] }]
output [{ name: "K" data_type: TYPE_INT32 dims: [ 1, 1 ] }]
instance_group [{ kind: KIND_CPU }]
"""

COUNTER_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            sender = request.get_response_sender()
            for k in range(n):
                out = pb_utils.Tensor("K", np.full((1, 1), k, np.int32))
                sender.send(pb_utils.InferenceResponse([out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def probe_config(name: str) -> str:
    """Dynamic batching that waits up to 100 ms for a batch: requests in flight at once share one."""
    return f"""
    name: "{name}"
    backend: "python"
    max_batch_size: 8
    input [{{ name: "K" data_type: TYPE_INT32 dims: [ 1 ] }}]
    output [
      {{ name: "K_OUT" data_type: TYPE_INT32 dims: [ 1 ] }},
      {{ name: "BATCH" data_type: TYPE_INT32 dims: [ 1 ] }}
    ]
    dynamic_batching {{ max_queue_delay_microseconds: 100000 }}
    instance_group [{{ kind: KIND_CPU }}]
    """


#: K_OUT = K, and BATCH = how many requests the execution took (its batch size).
PROBE_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            k = pb_utils.get_input_tensor_by_name(request, "K").as_numpy()
            batch = pb_utils.Tensor("BATCH", np.full(k.shape, len(requests), np.int32))
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("K_OUT", k), batch]))
        return responses
"""


def counted_config(name: str, probe: str, max_inflight_requests: int) -> str:
    """counter -> probe: each of counter's responses is one request to the probe."""
    k11 = "data_type: TYPE_INT32 dims: [ 1, 1 ]"
    return f"""
    name: "{name}"
    platform: "ensemble"
    input [{{ name: "N" data_type: TYPE_INT32 dims: [ 1 ] }}]
    output [{{ name: "K" {k11} }}, {{ name: "BATCH" {k11} }}]
    ensemble_scheduling {{
      max_inflight_requests: {max_inflight_requests}
      step [
        {step("counter", {"N": "N"}, {"K": "COUNT"})},
        {step(probe, {"K": "COUNT"}, {"K_OUT": "K", "BATCH": "BATCH"})}
      ]
    }}
    """


INT32_1 = "data_type: TYPE_INT32 dims: [ 1 ]"
#: repeat_int32's inputs, as the ensembles before it take them.
REPEAT_INPUTS = ", ".join(
    [
        tensors("IN", spec="data_type: TYPE_INT32 dims: [ -1 ]"),
        tensors("DELAY", spec="data_type: TYPE_UINT32 dims: [ -1 ]"),
        tensors("WAIT", spec="data_type: TYPE_UINT32 dims: [ 1 ]"),
    ]
)
REPEAT_MAP = {"IN": "IN", "DELAY": "DELAY", "WAIT": "WAIT"}


def write_decoupled_ensembles(repo: Path) -> None:
    """``repeat_then_square`` (repeat_int32 -> int_square: OUT = IN[i]^2, IDX = i per response),
    ``repeat_square_square`` (repeat_int32 -> square_int32 -> int_square: two decoupled steps in a row),
    and counter -> probe without a cap (``counted``) and with ``max_inflight_requests: 1``
    (``counted_capped``), each with a probe of its own; and the probe alone in a plain ensemble, without
    a cap (``probed``) and with one (``probed_capped``)."""
    write_model(repo, "int_square", INT_SQUARE, INT_SQUARE_PY)
    write_model(repo, "counter", COUNTER, COUNTER_PY)
    write_model(
        repo,
        "repeat_then_square",
        ensemble(
            "repeat_then_square",
            step("repeat_int32", REPEAT_MAP, {"OUT": "R", "IDX": "IDX"})
            + ","
            + step("int_square", {"IN": "R"}, {"OUT": "OUT"}),
            REPEAT_INPUTS,
            tensors("OUT", spec=INT32_1) + ", " + tensors("IDX", spec="data_type: TYPE_UINT32 dims: [ 1 ]"),
        ),
    )
    write_model(
        repo,
        "repeat_square_square",
        ensemble(
            "repeat_square_square",
            ",".join(
                [
                    step("repeat_int32", REPEAT_MAP, {"OUT": "R"}),
                    step("square_int32", {"IN": "R"}, {"OUT": "S"}),
                    step("int_square", {"IN": "S"}, {"OUT": "OUT"}),
                ]
            ),
            REPEAT_INPUTS,
            tensors("OUT", spec=INT32_1),
        ),
    )
    for name, cap in (("counted", 0), ("counted_capped", 1)):
        write_model(repo, f"{name}_probe", probe_config(f"{name}_probe"), PROBE_PY)
        write_model(repo, name, counted_config(name, f"{name}_probe", cap))
    for name, cap in (("probed", 0), ("probed_capped", 1)):
        write_model(repo, f"{name}_probe", probe_config(f"{name}_probe"), PROBE_PY)
        write_model(repo, name, probed_config(name, f"{name}_probe", cap))


def probed_config(name: str, probe: str, max_inflight_requests: int) -> str:
    """A plain (not decoupled) ensemble of one step, the probe: each request is one request to it."""
    k = "data_type: TYPE_INT32 dims: [ 1 ]"
    return f"""
    name: "{name}"
    platform: "ensemble"
    max_batch_size: 8
    input [{{ name: "K" {k} }}]
    output [{{ name: "K_OUT" {k} }}, {{ name: "BATCH" {k} }}]
    ensemble_scheduling {{
      max_inflight_requests: {max_inflight_requests}
      step [{step(probe, {"K": "K"}, {"K_OUT": "K_OUT", "BATCH": "BATCH"})}]
    }}
    """


# ---- BLS --------------------------------------------------------------------------------------------

#: MODE picks what the model does with X (FP32 [4]) through BLS; Y is the result.
BLS_CONFIG = """
name: "{name}"
backend: "python"
input [
  {{ name: "MODE" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "X" data_type: TYPE_FP32 dims: [ 4 ] }}
]
output [{{ name: "Y" data_type: TYPE_FP32 dims: [ -1 ] }}]
instance_group [{{ kind: KIND_CPU count: {count} }}]
"""

BLS_PY = """
import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


def add_sub(x, version=-1):
    return pb_utils.InferenceRequest(
        model_name="add_sub", model_version=version, requested_output_names=["OUTPUT0"],
        inputs=[pb_utils.Tensor("INPUT0", x), pb_utils.Tensor("INPUT1", x)])


def again(name, mode, x):
    return pb_utils.InferenceRequest(
        model_name=name, requested_output_names=["Y"],
        inputs=[pb_utils.Tensor("MODE", np.array([mode.encode()], dtype=object)),
                pb_utils.Tensor("X", x.astype(np.float32))])


def output(response, name):
    if response.has_error():
        raise pb_utils.TritonModelException(response.error().message())
    return pb_utils.get_output_tensor_by_name(response, name).as_numpy()


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_name"]

    async def execute(self, requests):
        responses = []
        for request in requests:
            mode = pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0].decode()
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            try:
                y = await self.run(mode, x)
            except pb_utils.TritonModelException as exc:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(exc.message())))
                continue
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.asarray(y, np.float32))]))
        return responses

    async def run(self, mode, x):
        if mode == "sync":  # blocking exec() inside async execute
            return output(add_sub(x).exec(), "OUTPUT0")
        if mode == "async":  # ten calls in flight at once
            answers = await asyncio.gather(*(add_sub(x * i).async_exec() for i in range(10)))
            return sum(output(answer, "OUTPUT0") for answer in answers)
        if mode == "decoupled":  # every response of square_int32, and the empty final one
            n = int(x[0])
            request = pb_utils.InferenceRequest(
                model_name="square_int32", requested_output_names=["OUT"],
                inputs=[pb_utils.Tensor("IN", np.array([n], np.int32))])
            answers = list(request.exec(decoupled=True))
            values = [output(a, "OUT")[0] for a in answers if a.output_tensors()]
            return [len(answers)] + values
        if mode == "async_decoupled":
            n = int(x[0])
            request = pb_utils.InferenceRequest(
                model_name="square_int32", requested_output_names=["OUT"],
                inputs=[pb_utils.Tensor("IN", np.array([n], np.int32))])
            answers = list(await request.async_exec(decoupled=True))
            return [output(a, "OUT")[0] for a in answers if a.output_tensors()]
        if mode == "missing":
            answer = pb_utils.InferenceRequest(
                model_name="no_such_model", requested_output_names=["Y"], inputs=[]).exec()
            raise pb_utils.TritonModelException(f"{answer.error().code()}: {answer.error().message()}")
        if mode == "bad_input":
            answer = pb_utils.InferenceRequest(
                model_name="add_sub", requested_output_names=["OUTPUT0"],
                inputs=[pb_utils.Tensor("INPUT0", x)]).exec()
            raise pb_utils.TritonModelException(answer.error().message())
        if mode == "factorial":  # recursion through this very model: x[0]! (sync exec)
            n = int(x[0])
            if n <= 1:
                return [1.0]
            return output(again(self.name, mode, x - 1).exec(), "Y") * n
        if mode == "async_factorial":
            n = int(x[0])
            if n <= 1:
                return [1.0]
            return output(await again(self.name, mode, x - 1).async_exec(), "Y") * n
        if mode == "ping":  # A -> B -> A: the partner calls back into this model
            return output(again("bls_partner", f"pong:{self.name}", x).exec(), "Y")
        if mode.startswith("pong:"):
            return output(again(mode.removeprefix("pong:"), "leaf", x).exec(), "Y")
        if mode == "leaf":
            return x * 2
        raise pb_utils.TritonModelException(f"unknown mode {mode}")
"""


def write_bls(repo: Path, name: str, count: int = 1) -> None:
    write_model(repo, name, BLS_CONFIG.format(name=name, count=count), BLS_PY)


#: ``bls_helper``: Y = X + X, computed in place, or by a BLS call to add_sub when X[0] < 0; the call is
#: made by a module beside model.py, so model.py itself never names a request.  A model that may call
#: out must never run on the event loop, however rarely it does.
BLS_HELPER_MODEL_PY = """
import importlib.util
from pathlib import Path

import triton_python_backend_utils as pb_utils

_spec = importlib.util.spec_from_file_location("bls_helper_calls", Path(__file__).with_name("calls.py"))
calls = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(calls)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", calls.doubled(x))]))
        return responses
"""

BLS_HELPER_CALLS_PY = """
import triton_python_backend_utils as pb_utils


def doubled(x):
    if x[0] >= 0:
        return x + x
    inputs = [pb_utils.Tensor("INPUT0", x), pb_utils.Tensor("INPUT1", x)]
    request = pb_utils.InferenceRequest(model_name="add_sub", requested_output_names=["OUTPUT0"], inputs=inputs)
    response = request.exec()
    if response.has_error():
        raise pb_utils.TritonModelException(response.error().message())
    return pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy()
"""


def write_bls_helper(repo: Path) -> None:
    config = BLS_CONFIG.format(name="bls_helper", count=1).replace(
        '{ name: "MODE" data_type: TYPE_STRING dims: [ 1 ] },', ""
    )
    model_dir = write_model(repo, "bls_helper", config, BLS_HELPER_MODEL_PY)
    (model_dir / "1" / "calls.py").write_text(textwrap.dedent(BLS_HELPER_CALLS_PY))


# ---- sequences --------------------------------------------------------------------------------------

#: Shaped like Triton's simple_sequence: OUTPUT accumulates (INPUT + START) * READY per sequence;
#: the CORRID control must equal the request's correlation ID.
ACCUMULATOR_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.totals = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            value = int(pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy().reshape(-1)[0])
            start = int(pb_utils.get_input_tensor_by_name(request, "START").as_numpy().reshape(-1)[0])
            ready = int(pb_utils.get_input_tensor_by_name(request, "READY").as_numpy().reshape(-1)[0])
            corrid = pb_utils.get_input_tensor_by_name(request, "CORRID").as_numpy().reshape(-1)[0]
            key = request.correlation_id()
            if isinstance(corrid, bytes):
                corrid = corrid.decode()
            if corrid != key:
                error = pb_utils.TritonError(f"CORRID {corrid!r} is not the correlation ID {key!r}")
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            total = (0 if start else self.totals.get(key, 0)) + (value + start) * ready
            self.totals[key] = total
            end = pb_utils.get_input_tensor_by_name(request, "END")
            if end is not None and int(end.as_numpy().reshape(-1)[0]):
                del self.totals[key]
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT", np.full((1, 1), total, np.int32))]))
        return responses
"""


def accumulator_config(
    name: str, strategy: str, corrid_type: str, extra_controls: str = "", idle_us: int = 0
) -> str:
    return f"""
    name: "{name}"
    backend: "python"
    max_batch_size: 8
    sequence_batching {{
      max_sequence_idle_microseconds: {idle_us}
      {strategy}
      control_input [
        {{ name: "START" control [{{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }}] }},
        {{ name: "READY" control [{{ kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] }}] }},
        {{ name: "CORRID" control [{{ kind: CONTROL_SEQUENCE_CORRID data_type: {corrid_type} }}] }}
        {extra_controls}
      ]
    }}
    input [{{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }}]
    output [{{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }}]
    instance_group [{{ kind: KIND_CPU }}]
    """


END_CONTROL = ', { name: "END" control [{ kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] }] }'

#: Implicit state: the batcher carries STATE_OUT of one request to STATE_IN of the next.
STATEFUL = """
name: "stateful"
backend: "python"
max_batch_size: 4
sequence_batching {
  control_input [
    { name: "START" control [{ kind: CONTROL_SEQUENCE_START bool_false_true: [ false, true ] }] }
  ]
  state [{
    input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ]
    initial_state { name: "zero" data_type: TYPE_INT32 dims: [ 1 ] zero_data: true }
  }]
}
input [{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }]
output [{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }]
instance_group [{ kind: KIND_CPU }]
"""

STATEFUL_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            state = pb_utils.get_input_tensor_by_name(request, "STATE_IN").as_numpy()
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            total = state + value
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT", total), pb_utils.Tensor("STATE_OUT", total)]))
        return responses
"""


#: Direct batching over 4 slots, with implicit state: POSITION is the batch position the request had,
#: TOTAL its sequence's running sum (STATE_IN + INPUT), SEEN what the whole batch was, as
#: (position, READY, CORRID, STATE_IN) per position.  A request that is not ready (a null request)
#: gets a state output no sequence may ever see.  A request with a ``gate`` parameter holds the
#: execution until that file exists (it creates ``<gate>.entered`` first).
SLOTTED = """
name: "slotted"
backend: "python"
max_batch_size: 4
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  direct { }
  control_input [
    { name: "START" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }] },
    { name: "END" control [{ kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] }] },
    { name: "READY" control [{ kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] }] },
    { name: "CORRID" control [{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 }] }
  ]
  state [{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] }]
}
input [{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }]
output [
  { name: "POSITION" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "TOTAL" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "SEEN" data_type: TYPE_INT64 dims: [ -1 ] }
]
instance_group [{ kind: KIND_CPU }]
"""

SLOTTED_PY = """
import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def first(request, name):
    return int(pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0])


class TritonPythonModel:
    def execute(self, requests):
        seen = []
        for position, request in enumerate(requests):
            seen += [position, first(request, "READY"), first(request, "CORRID"), first(request, "STATE_IN")]
        for request in requests:
            gate = json.loads(request.parameters()).get("gate")
            if gate:
                open(gate + ".entered", "w").close()
                deadline = time.monotonic() + 30
                while not os.path.exists(gate) and time.monotonic() < deadline:
                    time.sleep(0.005)
        responses = []
        for position, request in enumerate(requests):
            ready = first(request, "READY")
            total = first(request, "STATE_IN") + first(request, "INPUT") if ready else -999
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("POSITION", np.array([[position]], np.int32)),
                pb_utils.Tensor("TOTAL", np.array([[total]], np.int32)),
                pb_utils.Tensor("SEEN", np.array([seen], np.int64)),
                pb_utils.Tensor("STATE_OUT", np.array([[total]], np.int32)),
            ]))
        return responses
"""


def write_seeded(repo: Path, name: str, data_file: str, seed: bytes, data_type: str = "TYPE_INT32") -> None:
    """``stateful`` with its initial state read from ``<name>/initial_state/<data_file>``, which holds
    ``seed`` (for a good model, one element); ``data_type`` is the type of the input, output and state
    (STATEFUL_PY's ``+`` adds numbers and joins strings)."""
    config = STATEFUL.replace('name: "stateful"', f'name: "{name}"').replace(
        'initial_state { name: "zero" data_type: TYPE_INT32 dims: [ 1 ] zero_data: true }',
        f'initial_state {{ name: "seed" data_type: TYPE_INT32 dims: [ 1 ] data_file: "{data_file}" }}',
    )
    config = config.replace("TYPE_INT32", data_type)
    model_dir = write_model(repo, name, config, STATEFUL_PY)
    path = model_dir / "initial_state" / data_file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(seed)


#: Long enough that no sequence of the interleaving tests is forgotten while a loaded machine stalls its
#: client (Triton's default, 1 s, was crossed once with six test processes on two cores);
#: ``forgetful`` tests the idle timeout itself.
PATIENT_US = 30_000_000


def write_sequences(repo: Path) -> None:
    direct = "direct { }"
    oldest = "oldest { max_candidate_sequences: 16 preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 2000 }"
    write_model(
        repo,
        "accumulator",
        accumulator_config("accumulator", direct, "TYPE_UINT64", idle_us=PATIENT_US),
        ACCUMULATOR_PY,
    )
    write_model(
        repo,
        "dyna_accumulator",
        accumulator_config("dyna_accumulator", oldest, "TYPE_STRING", END_CONTROL, idle_us=PATIENT_US),
        ACCUMULATOR_PY,
    )
    write_model(
        repo,
        "forgetful",
        accumulator_config("forgetful", direct, "TYPE_UINT64", idle_us=300_000),
        ACCUMULATOR_PY,
    )
    write_model(repo, "stateful", STATEFUL, STATEFUL_PY)
    write_model(repo, "slotted", SLOTTED, SLOTTED_PY)
    write_seeded(repo, "seeded", "seed.bin", (40).to_bytes(4, "little", signed=True))
    write_seeded(repo, "seeded_text", "seed", b"\x01\x00\x00\x00>", data_type="TYPE_STRING")
