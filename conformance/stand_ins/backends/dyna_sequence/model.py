"""A stand-in for Triton's ``dyna_sequence`` test backend (the C++ backend of qa's
``custom_dyna_sequence_int32`` models), as a Python-based backend (``--backend-directory``), written
from its documented behaviour.

Each instance keeps an INT32 accumulator per correlation ID (the ``CORRID`` control input, UINT64,
or a STRING holding a decimal number): the oldest-first sequence batcher may run a sequence on any
position of any batch.  A request with READY true adds the sum of its ``INPUT`` to its sequence's
accumulator, or with START true sets it to that sum; with END true it then adds the correlation ID
(truncated to 32 bits) and forgets the sequence.  ``OUTPUT``, when asked for, has ``INPUT``'s shape,
every element the accumulator.  A request with READY false answers without outputs.  With batching,
a request must carry one timestep.  The model's ``execute_delay_ms`` parameter delays every
execution.
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
        self.max_requests = max(1, config.get("max_batch_size", 0))
        self.accumulators = {}
        delay = config.get("parameters", {}).get("execute_delay_ms", {}).get("string_value", "0")
        self.delay_s = int(delay) / 1000

    def execute(self, requests):
        if len(requests) > self.max_requests:
            raise pb_utils.TritonModelException("unable to execute batch larger than max-batch-size")
        if self.delay_s:
            time.sleep(self.delay_s)
        return [self._step(request) for request in requests]

    def _step(self, request):
        values = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
        if self.batching and values.ndim > 0 and values.shape[0] != 1:
            error = pb_utils.TritonError(
                "unable to execute more than one timestep at a time", pb_utils.TritonError.UNSUPPORTED
            )
            return pb_utils.InferenceResponse(error=error)

        def control(name):
            return pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0]

        start, end, ready, corrid = control("START"), control("END"), control("READY"), control("CORRID")
        if isinstance(corrid, bytes | str):
            try:
                corrid = int(corrid)
            except ValueError:
                error = pb_utils.TritonError(
                    "dyna sequence backend expects correlation ID to be decodable into an integer",
                    pb_utils.TritonError.INVALID_ARG,
                )
                return pb_utils.InferenceResponse(error=error)
        corrid = int(corrid)
        if not ready:
            return pb_utils.InferenceResponse([])
        total = int(values.astype(np.int64).sum())
        value = _int32((0 if start else self.accumulators.get(corrid, 0)) + total)
        if end:
            value = _int32(value + _int32(corrid & 0xFFFFFFFF))
            self.accumulators.pop(corrid, None)
        else:
            self.accumulators[corrid] = value
        if not request.requested_output_names():
            return pb_utils.InferenceResponse([])
        output = np.full(values.shape, value, dtype=np.int32)
        return pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", output)])
