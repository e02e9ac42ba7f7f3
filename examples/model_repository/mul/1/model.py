"""Element-wise product of INPUT0 and INPUT1; the second step of the add_sub -> mul ensemble."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            out = pb_utils.Tensor("OUTPUT", (in_0 * in_1).astype("float32"))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
