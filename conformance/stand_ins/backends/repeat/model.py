"""A stand-in for Triton's ``repeat`` backend (a C++ example backend NVIDIA's qa uses), as a
Python-based backend (``--backend-directory``), written from its documented behaviour.

A request carries ``IN`` (INT32) and ``DELAY`` (UINT32) of one shape and ``WAIT`` (UINT32, one
element).  For each element of ``IN`` in turn it waits that element's ``DELAY`` milliseconds, then
answers ``OUT`` (the element) and ``IDX`` (its index), from a thread of its own; after the last it
sends the final flag alone.  ``execute`` returns after ``WAIT`` milliseconds, whether or not the
responses are all sent.  The backend never asks whether its model is decoupled: a model that is not
(qa's ``NonDecoupledTest``) sends its one response and then the final flag apart, which the server
must answer as one response.  A request whose ``IN`` and ``DELAY`` differ in shape gets one error.
"""

import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self._threads = []

    def execute(self, requests):
        wait_ms = 0
        for request in requests:
            wait_ms = self._start(request)
        time.sleep(wait_ms / 1000)
        return None

    def _start(self, request):
        """Start ``request``'s responses; the milliseconds it asks ``execute`` to wait."""
        sender = request.get_response_sender()
        wait = pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy()
        if wait.size != 1:
            self._refuse(sender, "unexpected size for WAIT input")
            return 0
        values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
        delays = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy()
        if values.shape != delays.shape:
            shapes = f"[{','.join(map(str, values.shape))}] and [{','.join(map(str, delays.shape))}]"
            self._refuse(sender, f"expected IN and DELAY shape to match, got {shapes}")
            return int(wait.reshape(-1)[0])
        thread = threading.Thread(
            target=self._respond, args=(sender, values.reshape(-1).copy(), delays.reshape(-1).copy())
        )
        thread.start()
        self._threads.append(thread)
        return int(wait.reshape(-1)[0])

    @staticmethod
    def _refuse(sender, message):
        error = pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG)
        sender.send(
            pb_utils.InferenceResponse(error=error), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        )

    @staticmethod
    def _respond(sender, values, delays):
        for index, (value, delay) in enumerate(zip(values, delays, strict=True)):
            time.sleep(int(delay) / 1000)
            outputs = [
                pb_utils.Tensor("OUT", np.array([value], dtype=np.int32)),
                pb_utils.Tensor("IDX", np.array([index], dtype=np.uint32)),
            ]
            sender.send(pb_utils.InferenceResponse(output_tensors=outputs))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self._threads:
            thread.join()
