"""What ``execute`` receives and how its return value becomes one result per request."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from naiad.core.errors import ErrorCode, InferenceServerError
from naiad.core.request import InferRequest, InferResponse, Tensor

from tests.backends.python.models import LoadInstance, request, write_model

CONFIG = """
    backend: "python"
    input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]
    output [
      { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
      { name: "OUTPUT1" data_type: TYPE_STRING dims: [ -1 ] }
    ]
"""


def model(tmp_path: Path, execute_body: str, prelude: str = "") -> Path:
    """A model whose ``execute`` is ``execute_body`` (indented by four spaces inside the method)."""
    body = "\n".join("        " + line for line in execute_body.strip("\n").splitlines())
    source = (
        "import json\nimport numpy as np\nimport triton_python_backend_utils as pb_utils\n"
        f"{prelude}\n\nclass TritonPythonModel:\n    def execute(self, requests):\n{body}\n"
    )
    return write_model(tmp_path, "m", source, CONFIG)


def test_received_requests_expose_what_the_client_sent(tmp_path: Path, instances: LoadInstance) -> None:
    instance = instances(
        model(
            tmp_path,
            """
responses = []
for request in requests:
    seen = {
        "id": request.request_id(),
        "correlation_id": request.correlation_id(),
        "flags": request.flags(),
        "timeout": request.timeout(),
        "parameters": json.loads(request.parameters()),
        "outputs": request.requested_output_names(),
        "inputs": [t.name() for t in request.inputs()],
        "shape": pb_utils.get_input_tensor_by_name(request, "INPUT0").shape(),
        "dtype": pb_utils.get_input_tensor_by_name(request, "INPUT0").triton_dtype(),
        "missing": pb_utils.get_input_tensor_by_name(request, "NOPE"),
        "cancelled": request.is_cancelled(),
        "is_request": isinstance(request, pb_utils.InferenceRequest),
    }
    out = pb_utils.Tensor("OUTPUT1", np.array([json.dumps(seen).encode()], dtype=object))
    responses.append(pb_utils.InferenceResponse([out]))
return responses
""",
        )
    )
    sequenced = request("m", "req-7", outputs=["OUTPUT1"], INPUT0=[1, 2, 3, 4])
    sequenced.sequence_id = "corr-1"
    sequenced.sequence_start = True
    sequenced.sequence_end = True
    sequenced.timeout_us = 2500
    sequenced.parameters = {"temperature": 0.5, "greedy": True, "label": "x", "n": 3}
    ending = request("m", INPUT0=[1, 2, 3, 4])
    ending.sequence_id = 42
    ending.sequence_end = True
    results = instance.execute([sequenced, ending])
    seen = [json.loads(r.outputs[0].data[0]) for r in results if isinstance(r, InferResponse)]
    assert seen == [
        {
            "id": "req-7",
            "correlation_id": "corr-1",
            "flags": 3,
            "timeout": 2500,
            "parameters": {"temperature": 0.5, "greedy": True, "label": "x", "n": 3},
            "outputs": ["OUTPUT1"],
            "inputs": ["INPUT0"],
            "shape": [4],
            "dtype": 11,
            "missing": None,
            "cancelled": False,
            "is_request": True,
        },
        {
            "id": "",
            "correlation_id": 42,
            "flags": 2,
            "timeout": 0,
            "parameters": {},
            "outputs": ["OUTPUT0", "OUTPUT1"],
            "inputs": ["INPUT0"],
            "shape": [4],
            "dtype": 11,
            "missing": None,
            "cancelled": False,
            "is_request": True,
        },
    ]


FAIL_NEGATIVE = """
responses = []
for request in requests:
    data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
    if data[0] < 0:
        error = pb_utils.TritonError("INPUT0 must be non-negative", pb_utils.TritonError.INVALID_ARG)
        responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
    else:
        responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data * 2)]))
return responses
"""


def test_a_response_error_fails_only_its_own_request(tmp_path: Path, instances: LoadInstance) -> None:
    instance = instances(model(tmp_path, FAIL_NEGATIVE))
    results = instance.execute(
        [request("m", f"r{i}", INPUT0=[value, 0, 0, 0]) for i, value in enumerate([1.0, -1.0, 2.0])]
    )
    first, second, third = results
    assert isinstance(first, InferResponse) and isinstance(third, InferResponse)
    np.testing.assert_array_equal(first.outputs[0].data, [2, 0, 0, 0])
    np.testing.assert_array_equal(third.outputs[0].data, [4, 0, 0, 0])
    assert third.id == "r2"
    assert isinstance(second, InferenceServerError)
    assert second.code is ErrorCode.INVALID_ARG
    assert second.message == "INPUT0 must be non-negative"


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("UNKNOWN", ErrorCode.UNKNOWN),
        ("INTERNAL", ErrorCode.INTERNAL),
        ("NOT_FOUND", ErrorCode.NOT_FOUND),
        ("INVALID_ARG", ErrorCode.INVALID_ARG),
        ("UNAVAILABLE", ErrorCode.UNAVAILABLE),
        ("UNSUPPORTED", ErrorCode.UNSUPPORTED),
        ("ALREADY_EXISTS", ErrorCode.ALREADY_EXISTS),
        ("CANCELLED", ErrorCode.CANCELLED),
        ("", ErrorCode.INTERNAL),
    ],
)
def test_triton_error_codes_map_to_server_codes(
    tmp_path: Path, instances: LoadInstance, name: str, code: ErrorCode
) -> None:
    argument = f", pb_utils.TritonError.{name}" if name else ""
    instance = instances(
        model(tmp_path, f'return [pb_utils.InferenceResponse(error=pb_utils.TritonError("no"{argument}))]')
    )
    (result,) = instance.execute([request("m", INPUT0=[1, 2, 3, 4])])
    assert isinstance(result, InferenceServerError)
    assert (result.code, result.message) == (code, "no")


def test_an_exception_in_execute_fails_every_request_and_the_instance_stays_usable(
    tmp_path: Path, instances: LoadInstance
) -> None:
    instance = instances(
        model(
            tmp_path,
            """
if pb_utils.get_input_tensor_by_name(requests[0], "INPUT0").as_numpy()[0] < 0:
    raise pb_utils.TritonModelException("negative input")
if len(requests) == 2:
    return [1 / 0]
return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.ones(4, np.float32))]) for _ in requests]
""",
        )
    )
    failures = instance.execute([request("m", INPUT0=[-1, 0, 0, 0]) for _ in range(3)])
    # Triton 2.51's words (checked side by side), with the model's frames as its stub appends them
    source = next(path for path in tmp_path.rglob("model.py"))
    assert [(f.code, f.message) for f in failures if isinstance(f, InferenceServerError)] == 3 * [
        (
            ErrorCode.INTERNAL,
            "Failed to process the request(s) for model 'm_0', "
            f"message: TritonModelException: negative input\n\nAt:\n  {source}(9): execute\n",
        )
    ]
    failures = instance.execute([request("m", INPUT0=[1, 0, 0, 0]) for _ in range(2)])
    messages = [f.message for f in failures if isinstance(f, InferenceServerError)]
    assert len(messages) == 2
    assert all(
        m.endswith(f"ZeroDivisionError: division by zero\n\nAt:\n  {source}(11): execute\n") for m in messages
    )
    (result,) = instance.execute([request("m", INPUT0=[1, 0, 0, 0])])
    assert isinstance(result, InferResponse)


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        ("[]", "InferenceRequest(s) size is:3, and InferenceResponse(s) size is:0"),
        ("[ok, ok, ok, ok]", "InferenceRequest(s) size is:3, and InferenceResponse(s) size is:4"),
        ("None", "Expected a list in the execute return, got NoneType"),
        ("tuple([ok, ok, ok])", "Expected a list in the execute return, got tuple"),
    ],
)
def test_a_wrong_return_fails_every_request_with_a_clear_message(
    tmp_path: Path, instances: LoadInstance, returned: str, message: str
) -> None:
    instance = instances(
        model(
            tmp_path,
            f"""
ok = pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.ones(4, np.float32))])
return {returned}
""",
        )
    )
    results = instance.execute([request("m", INPUT0=[1, 2, 3, 4]) for _ in range(3)])
    assert len(results) == 3
    for result in results:
        assert isinstance(result, InferenceServerError)
        assert result.code is ErrorCode.INTERNAL
        assert message in result.message


def test_a_non_response_entry_fails_only_its_request(tmp_path: Path, instances: LoadInstance) -> None:
    instance = instances(
        model(
            tmp_path,
            'return [None, pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.ones(4, np.float32))])]',
        )
    )
    first, second = instance.execute([request("m", INPUT0=[1, 2, 3, 4]) for _ in range(2)])
    assert isinstance(first, InferenceServerError)
    assert "returned NoneType for request 0" in first.message
    assert isinstance(second, InferResponse)


def test_outputs_become_server_tensors_with_bytes_as_object_arrays(
    tmp_path: Path, instances: LoadInstance
) -> None:
    instance = instances(
        model(
            tmp_path,
            """
outputs = [
    pb_utils.Tensor("OUTPUT0", np.arange(4, dtype=">f4")),
    pb_utils.Tensor("OUTPUT1", np.array(["h\\u00e9", "x\\x00y"])),
    pb_utils.Tensor("BYTES_S", np.array([b"a\\x00b", b"c"])),
    pb_utils.Tensor("MIXED", np.array([b"\\x00", "s", 7, np.bytes_(b"n")], dtype=object)),
    pb_utils.Tensor("INT8", np.array([[1, -2]], dtype=np.int8)),
    pb_utils.Tensor("BOOL", np.array([True])),
]
return [pb_utils.InferenceResponse(outputs, parameters={"note": "ok", "n": 2})]
""",
        )
    )
    (result,) = instance.execute([request("m", INPUT0=[1, 2, 3, 4])])
    assert isinstance(result, InferResponse)
    outputs = {t.name: t for t in result.outputs}
    assert [(t.name, t.datatype) for t in result.outputs] == [
        ("OUTPUT0", "FP32"),
        ("OUTPUT1", "BYTES"),
        ("BYTES_S", "BYTES"),
        ("MIXED", "BYTES"),
        ("INT8", "INT8"),
        ("BOOL", "BOOL"),
    ]
    assert outputs["OUTPUT0"].data.dtype.isnative
    np.testing.assert_array_equal(outputs["OUTPUT0"].data, [0, 1, 2, 3])
    for name in ("OUTPUT1", "BYTES_S", "MIXED"):
        assert outputs[name].data.dtype == np.object_
        assert all(type(item) is bytes for item in outputs[name].data)
    assert outputs["OUTPUT1"].data.tolist() == ["hé".encode(), b"x\x00y"]
    assert outputs["BYTES_S"].data.tolist() == [b"a\x00b", b"c"]
    assert outputs["MIXED"].data.tolist() == [b"\x00", b"s", b"7", b"n"]
    assert outputs["INT8"].shape == (1, 2)
    assert result.parameters == {"note": "ok", "n": 2}


def test_bytes_inputs_reach_the_model_as_object_arrays_of_bytes(
    tmp_path: Path, instances: LoadInstance
) -> None:
    instance = instances(
        model(
            tmp_path,
            """
data = pb_utils.get_input_tensor_by_name(requests[0], "INPUT0").as_numpy()
kinds = [type(item).__name__ for item in data.reshape(-1)]
seen = json.dumps([data.dtype.str, kinds, [item.hex() for item in data.reshape(-1)]])
return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT1", np.array([seen.encode()], dtype=object))])]
""",
        )
    )
    data = np.array([b"he\x00llo", b"\x00\x01"], dtype=np.object_)
    core = InferRequest(model_name="m", inputs=[Tensor("INPUT0", "BYTES", data)])
    (result,) = instance.execute([core])
    assert isinstance(result, InferResponse)
    assert json.loads(result.outputs[0].data[0]) == ["|O", ["bytes", "bytes"], ["6865006c6c6f", "0001"]]
