"""A stand-in for Triton's ``identity`` backend (a C++ test backend NVIDIA's qa uses), as a
Python-based backend (``--backend-directory``): each requested ``OUTPUT<n>`` is the request's
``INPUT<n>``; an optional ``INPUT<n>`` the request lacks gives zeros of its configured shape (with
the request's batch dimension); the model's ``execute_delay_ms`` parameter delays every execution,
by that times ``instance_wise_delay_multiplier`` times the instance's index where that is at least 1
(the backend numbers instances in the order it creates them; here, within their group).
Written from the backend's documented behaviour, for NVIDIA's tests to run unchanged here."""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.batching = config.get("max_batch_size", 0) > 0
        self.optional = {
            item["name"][len("INPUT") :]: (pb_utils.triton_string_to_numpy(item["data_type"]), item["dims"])
            for item in config.get("input", [])
            if item.get("optional")
        }
        parameters = config.get("parameters", {})
        delay = int(parameters.get("execute_delay_ms", {}).get("string_value", "0"))
        multiplier = int(parameters.get("instance_wise_delay_multiplier", {}).get("string_value", "0"))
        if multiplier:
            multiplier *= int(args["model_instance_name"].rsplit("_", 1)[-1])
        self.delay_s = delay * max(multiplier, 1) / 1000

    def execute(self, requests):
        if self.delay_s:
            time.sleep(self.delay_s)
        return [self._respond(request) for request in requests]

    def _respond(self, request):
        inputs = {tensor.name()[len("INPUT") :]: tensor for tensor in request.inputs()}
        batch = next(iter(inputs.values())).as_numpy().shape[0] if self.batching and inputs else None
        outputs = []
        for name in request.requested_output_names():
            index = name[len("OUTPUT") :]
            tensor = inputs.get(index)
            if tensor is not None:
                outputs.append(pb_utils.Tensor(name, tensor.as_numpy()))
            elif index in self.optional:
                dtype, dims = self.optional[index]
                shape = ([batch] if batch is not None else []) + [int(d) for d in dims]
                outputs.append(pb_utils.Tensor(name, np.zeros(shape, dtype=dtype)))
            else:
                error = pb_utils.TritonError(
                    f"failed to get input 'INPUT{index}'", pb_utils.TritonError.UNSUPPORTED
                )
                return pb_utils.InferenceResponse(error=error)
        return pb_utils.InferenceResponse(outputs)
