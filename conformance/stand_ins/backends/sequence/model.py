"""A stand-in for Triton's ``sequence`` test backend (the C++ backend of qa's ``custom_sequence_int32``
models), as a Python-based backend (``--backend-directory``), written from its documented behaviour.

Each instance keeps one INT32 accumulator per batch position (``max_batch_size`` of them, at least
one): the sequence batcher's direct strategy gives each sequence a position of its own, and fills
the positions of a batch that have nothing with null requests (READY false).  A request with READY
true adds the sum of its ``INPUT`` to its position's accumulator, or with START true sets it to that
sum; ``OUTPUT``, when asked for, has ``INPUT``'s shape, every element the accumulator.  A request
with READY false answers without outputs and leaves the accumulator alone.  With batching, a
request must carry one timestep (batch dimension 1).  The model's ``execute_delay_ms`` parameter
delays every execution.
"""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def _int32(value):
    """``value`` wrapped to INT32, as the backend's ``int32_t`` arithmetic does."""
    return (value + 2**31) % 2**32 - 2**31


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.batching = config.get("max_batch_size", 0) > 0
        self.accumulators = [0] * max(1, config.get("max_batch_size", 0))
        delay = config.get("parameters", {}).get("execute_delay_ms", {}).get("string_value", "0")
        self.delay_s = int(delay) / 1000

    def execute(self, requests):
        if len(requests) > len(self.accumulators):
            raise pb_utils.TritonModelException("unable to execute batch larger than max-batch-size")
        if self.delay_s:
            time.sleep(self.delay_s)
        return [self._step(position, request) for position, request in enumerate(requests)]

    def _step(self, position, request):
        values = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
        if self.batching and values.ndim > 0 and values.shape[0] != 1:
            error = pb_utils.TritonError(
                "unable to execute more than one timestep at a time", pb_utils.TritonError.UNSUPPORTED
            )
            return pb_utils.InferenceResponse(error=error)
        start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy().reshape(-1)[0]
        ready = pb_utils.get_input_tensor_by_name(request, "READY").as_numpy().reshape(-1)[0]
        if not ready:
            return pb_utils.InferenceResponse([])
        total = int(values.astype(np.int64).sum())
        before = 0 if start else self.accumulators[position]
        self.accumulators[position] = _int32(before + total)
        if not request.requested_output_names():
            return pb_utils.InferenceResponse([])
        output = np.full(values.shape, self.accumulators[position], dtype=np.int32)
        return pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", output)])
