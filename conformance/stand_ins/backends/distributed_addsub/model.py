"""A stand-in for Triton's ``distributed_addsub`` test backend (qa/L0_passive_instance), as a
Python-based backend (``--backend-directory``), written from its documented behaviour: ``OUTPUT0``
is ``INPUT0 + INPUT1`` and ``OUTPUT1`` is ``INPUT0 - INPUT1``, and only the model's non-passive
instances take requests from the server (the C++ backend hands part of the work to its passive
instance itself; here each process computes both).  An instance of a ``passive`` group that is
sent a request answers with an error, so a server that schedules passive instances fails the test.
"""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        group = args["model_instance_name"].rsplit("_", 1)[0]
        groups = config.get("instance_group", [])
        self.passive = any(g.get("passive") and g.get("name") == group for g in groups)

    def execute(self, requests):
        if self.passive:
            error = pb_utils.TritonError("a passive instance was sent a request")
            return [pb_utils.InferenceResponse(error=error) for _ in requests]
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            outputs = [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
