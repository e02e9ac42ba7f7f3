"""A Python model's config ``reshape``, as Triton 2.51 applies it (checked side by side): the model sees
an input of ``dims [4,4] reshape [16]`` as ``[batch, 16]``, and its output of ``dims [2,8] reshape [16]``,
made as ``[batch, 16]``, reaches the client as ``[batch, 2, 8]``; in a model process and in the engine,
batched, and through a decoupled model's response sender."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.models import write_model
from tests.support.server import ServerProcess

#: Answers its input as it saw it, and the shape it saw (per batch item when batching).
ECHO_PY = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.batching = config["max_batch_size"] > 0

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            seen = np.array(x.shape, dtype=np.int64)
            if self.batching:
                seen = np.tile(seen, (x.shape[0], 1))
            response = pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x), pb_utils.Tensor("SEEN", seen)])
            if not self.decoupled:
                responses.append(response)
                continue
            sender = request.get_response_sender()
            sender.send(response)
            sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None if self.decoupled else responses
"""


def _config(batching: bool, extra: str = "") -> str:
    return f"""
    backend: "python"
    max_batch_size: {4 if batching else 0}
    input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4, 4 ] reshape: {{ shape: [ 16 ] }} }} ]
    output [
      {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2, 8 ] reshape: {{ shape: [ 16 ] }} }},
      {{ name: "SEEN" data_type: TYPE_INT64 dims: [ {2 if batching else 1} ] }}
    ]
    {extra}
    """


IN_ENGINE = 'parameters [ { key: "NAIAD_INSTANCE_PROCESSES" value: { string_value: "false" } } ]'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo: Path = tmp_path_factory.mktemp("reshape")
    write_model(repo, "processes", _config(True), ECHO_PY)
    write_model(repo, "engine", _config(True, IN_ENGINE), ECHO_PY)
    write_model(repo, "streaming", _config(False, "model_transaction_policy { decoupled: true }"), ECHO_PY)
    with ServerProcess([repo]) as process:
        yield process


@pytest.mark.parametrize("model", ["processes", "engine"])
def test_the_model_sees_the_reshape_and_the_client_the_dims(server: ServerProcess, model: str) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    data = np.arange(48, dtype=np.float32).reshape(3, 4, 4)
    tensor = httpclient.InferInput("INPUT0", [3, 4, 4], "FP32")
    tensor.set_data_from_numpy(data)
    result = client.infer(model, [tensor])
    assert result.as_numpy("SEEN").tolist() == [[3, 16]] * 3
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data.reshape(3, 2, 8))
    assert client.get_model_metadata(model)["outputs"][0]["shape"] == [-1, 2, 8]
    client.close()


def test_a_decoupled_models_responses_come_in_the_dims(server: ServerProcess) -> None:
    answers: list[tuple[np.ndarray, np.ndarray]] = []
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: answers.append(
        (result.as_numpy("OUTPUT0"), result.as_numpy("SEEN")) if error is None else pytest.fail(str(error))
    ))  # fmt: skip
    data = np.arange(16, dtype=np.float32).reshape(4, 4)
    tensor = grpcclient.InferInput("INPUT0", [4, 4], "FP32")
    tensor.set_data_from_numpy(data)
    client.async_stream_infer("streaming", [tensor])
    client.stop_stream()
    client.close()
    assert len(answers) == 2
    for output, seen in answers:
        np.testing.assert_array_equal(output, data.reshape(2, 8))
        assert seen.tolist() == [16]


#: Answers OUTPUT0 in the shape its INPUT0's first value names (a model not keeping to its reshape).
SHAPED_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            shape = [int(d) for d in x.reshape(-1)[:2]]
            out = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses
"""


@pytest.mark.parametrize("where", ["", IN_ENGINE])
def test_an_output_made_in_another_shape_than_its_reshape_is_answered_as_triton_answers(
    tmp_path: Path, where: str
) -> None:
    # (Triton 2.51, side by side: the output gets the config's dims whatever shape of as many
    # elements the model made; one of another size is refused in its HTTP frontend's words)
    config = """
    backend: "python"
    max_batch_size: 2
    input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ]
    """ + where
    write_model(tmp_path, "loose", config, SHAPED_PY)
    with ServerProcess([tmp_path]) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            tensor = httpclient.InferInput("INPUT0", [1, 2], "FP32")
            tensor.set_data_from_numpy(np.array([[1, 4]], dtype=np.float32))  # made as [1, 4], not [1, 2, 2]
            np.testing.assert_array_equal(client.infer("loose", [tensor]).as_numpy("OUTPUT0"), [[0, 1, 2, 3]])
            tensor.set_data_from_numpy(np.array([[1, 3]], dtype=np.float32))  # three elements, not four
            with pytest.raises(InferenceServerException) as refused:
                client.infer("loose", [tensor])
            assert (refused.value.status(), refused.value.message()) == (
                "500",
                "output tensor shape does not match size of output for 'OUTPUT0'",
            )
        finally:
            client.close()
