"""The classification extension with tritonclient's ``class_count``: Triton's exact strings (checked
against tritonserver 2.51), labels from ``label_filename``, shapes, and the refusals."""

from __future__ import annotations

import numpy as np

from tests.extensions.clients import client_for, refused, status_of
from tests.support.server import ServerProcess

SCORES = np.array([[0.5, 3.3, -1.25, 2.0], [1e10, 1e-7, 7, 7]], dtype=np.float32)


def _classify(
    protocol: str, server: ServerProcess, output: str, count: int, binary: bool = True, model: str = "classifier"
) -> np.ndarray:
    with client_for(protocol, server) as client:
        tensor = client.input("INPUT0", list(SCORES.shape), "FP32")
        tensor.set_data_from_numpy(SCORES)
        extra = {"binary_data": binary} if protocol == "http" else {}
        requested = client.output(output, class_count=count, **extra)
        result = client.client.infer(model, [tensor], outputs=[requested])
        assert result.get_output(output)  # named in the response
        return result.as_numpy(output)


EXPECTED = [
    ["3.300000:1:one", "2.000000:3:three", "0.500000:0:zero"],
    ["10000000000.000000:0:zero", "7.000000:2:two", "7.000000:3:three"],
]


def test_top_classes_with_labels(protocol: str, ext_server: ServerProcess) -> None:
    classes = _classify(protocol, ext_server, "OUTPUT0", 3)
    assert classes.shape == (2, 3)
    assert [[c.decode() for c in row] for row in classes] == EXPECTED


def test_an_ensemble_output_without_labels_takes_its_step_models(protocol: str, ext_server: ServerProcess) -> None:
    """As Triton's core completes an ensemble's labels at load: an output whose config names no label
    file is labelled as the step model's output that makes it (NVIDIA's L0_infer checks it)."""
    classes = _classify(protocol, ext_server, "SCORES", 3, model="classifier_chain")
    assert [[c.decode() for c in row] for row in classes] == EXPECTED
    counts = _classify(protocol, ext_server, "COUNTS", 2, model="classifier_chain")
    assert counts.tolist() == [[b"33:1", b"20:3"], [b"70:2", b"70:3"]]  # (the step's output has none)


def test_top_classes_as_json(ext_server: ServerProcess) -> None:
    assert _classify("http", ext_server, "OUTPUT0", 3, binary=False).tolist() == EXPECTED


def test_count_capped_at_the_classes_there_are(protocol: str, ext_server: ServerProcess) -> None:
    classes = _classify(protocol, ext_server, "OUTPUT0", 10)
    assert classes.shape == (2, 4)
    assert classes[0, 3] == b"-1.250000:2:two"
    assert classes[1, 3] == b"0.000000:1:one"  # 1e-7 prints as std::to_string does


def test_integers_print_plain_and_without_labels(protocol: str, ext_server: ServerProcess) -> None:
    classes = _classify(protocol, ext_server, "OUTPUT1", 2)
    assert classes.tolist() == [[b"33:1", b"20:3"], [b"70:2", b"70:3"]]


def test_model_without_batching_gets_a_flat_list(protocol: str, ext_server: ServerProcess) -> None:
    with client_for(protocol, ext_server) as client:
        inputs = [client.input("INPUT0", [4], "FP32"), client.input("INPUT1", [4], "FP32")]
        for tensor in inputs:
            tensor.set_data_from_numpy(np.arange(1, 5, dtype=np.float32))
        result = client.client.infer("add_sub", inputs, outputs=[client.output("OUTPUT0", class_count=2)])
        assert result.as_numpy("OUTPUT0").tolist() == [b"8.000000:3", b"6.000000:2"]


def test_unsupported_datatype_is_refused(protocol: str, ext_server: ServerProcess) -> None:
    with refused(
        status_of(protocol, 400, "INVALID_ARGUMENT"),
        "class result not available for output due to unsupported type 'BYTES'",
    ):
        _classify(protocol, ext_server, "OUTPUT2", 2)


def test_an_output_too_large_to_classify_is_refused(protocol: str, ext_server: ServerProcess) -> None:
    """More than a million elements per batch item: refused as current Triton refuses it (sorting
    an output of any size would let one request hold the CPU); at the limit, classified."""
    with client_for(protocol, ext_server) as client:
        for size, refusal in ((1_000_001, True), (1_000_000, False)):
            scores = np.zeros(size, dtype=np.float32)
            scores[size - 1] = 1.0
            tensor = client.input("INPUT0", [size], "FP32")
            tensor.set_data_from_numpy(scores)
            requested = [client.output("OUTPUT0", class_count=1)]
            if refusal:
                with refused(
                    status_of(protocol, 400, "INVALID_ARGUMENT"), "classification output tensor too large"
                ):
                    client.client.infer("wide", [tensor], outputs=requested)
            else:
                result = client.client.infer("wide", [tensor], outputs=requested)
                assert result.as_numpy("OUTPUT0").tolist() == [f"1.000000:{size - 1}".encode()]
