"""A stand-in for Triton's ``square`` backend (a C++ example backend NVIDIA's qa uses), as a
Python-based backend (``--backend-directory``), written from its documented behaviour.

A request's ``IN`` holds one INT32 ``n``: the model answers ``n`` responses, each ``OUT`` = ``n`` in
``IN``'s number of dimensions, from a thread of its own, then the final flag alone; a request found
cancelled between two responses gets a CANCELLED error and no more.
"""

import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self._threads = []

    def execute(self, requests):
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if value.ndim == 2 and value.shape[0] != 1:
                error = pb_utils.TritonError(
                    "unexpected shape for IN input", pb_utils.TritonError.INVALID_ARG
                )
                request.get_response_sender().send(
                    pb_utils.InferenceResponse(error=error),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
                continue
            count = int(value.reshape(-1)[0])
            args = (request.get_response_sender(), count, value.ndim)
            thread = threading.Thread(target=self._respond, args=args)
            thread.start()
            self._threads.append(thread)
        return None

    @staticmethod
    def _respond(sender, count, ndim):
        for _ in range(count):
            if sender.is_cancelled():
                error = pb_utils.TritonError("cancelled", pb_utils.TritonError.CANCELLED)
                sender.send(pb_utils.InferenceResponse(error=error))
                break
            out = np.full([1] * ndim, count, dtype=np.int32)
            sender.send(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", out)]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self._threads:
            thread.join()
