"""Decoupled: one response per element of IN (OUT = IN[i], IDX = i), DELAY[i] ms apart, then the final flag.

The interface of Triton's python_backend ``repeat`` example.  Responses are sent from a thread of
the model's own, so ``execute`` returns after WAIT ms while they are still coming: with one
instance, several requests stream at once.  An empty IN sends no response, only the final flag.
"""

import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.senders = []

    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            delays = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy()
            wait = pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy()
            sender = request.get_response_sender()
            thread = threading.Thread(target=self.respond, args=(sender, values, delays), daemon=True)
            self.senders = [t for t in self.senders if t.is_alive()] + [thread]
            thread.start()
            time.sleep(float(wait[0]) / 1000)
        return None

    def respond(self, sender, values, delays):
        for index, (value, delay) in enumerate(zip(values, delays)):
            time.sleep(float(delay) / 1000)
            if sender.is_cancelled():
                break
            out = pb_utils.Tensor("OUT", np.array([value], np.int32))
            idx = pb_utils.Tensor("IDX", np.array([index], np.uint32))
            sender.send(pb_utils.InferenceResponse(output_tensors=[out, idx]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.senders:
            thread.join()
