"""A stand-in for Triton's ``iterative_sequence`` test backend (a C++ backend NVIDIA's
``qa/L0_iterative_sequence`` uses), as a Python-based backend (``--backend-directory``), written from
its documented behaviour.

A request's ``INPUT`` (INT32, one element) starts a countdown kept per correlation ID: each run of the
request answers ``OUTPUT`` = what is left after taking one off, then waits 0.5 s; while something is
left the request is released for rescheduling (``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE``) and its
answer is not final, so the scheduler runs it again; the run that reaches 0 answers with the final
flag.  So an input of 2 answers 1, then 0.  A decoupled model: answers go through the request's
response sender.  Where the scheduler cannot take the request back, the server answers it with the
reason (the C++ backend attaches that error to its own answer instead).
"""

import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self._remaining = {}

    def execute(self, requests):
        for request in requests:
            value = int(pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy().reshape(-1)[0])
            corrid = request.correlation_id()
            left = self._remaining.get(corrid, value) - 1
            if left > 0:
                self._remaining[corrid] = left
            else:
                self._remaining.pop(corrid, None)
            output = pb_utils.Tensor("OUTPUT", np.array([[left]], dtype=np.int32))
            time.sleep(0.5)  # the backend's wait before it releases the request
            sender = request.get_response_sender()
            if left > 0:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                sender.send(pb_utils.InferenceResponse(output_tensors=[output]))
            else:
                sender.send(
                    pb_utils.InferenceResponse(output_tensors=[output]),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
        return None
