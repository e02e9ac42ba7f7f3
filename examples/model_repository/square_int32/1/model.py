"""Decoupled: IN = n sends n responses, each OUT = n, then the final flag (IN = 0: only the flag).

The interface of Triton's python_backend ``square`` example; here the responses are sent from
``execute`` itself, the final flag together with the last response.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            for i in range(n):
                response = pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([n], np.int32))])
                final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if i == n - 1 else 0
                sender.send(response, flags=final)
            if n <= 0:
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
