"""The ``triton_python_backend_utils`` surface models call directly."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import numpy as np
import pytest
from naiad.backends.python import pb_utils
from naiad.backends.python.custom_metrics import MetricStore


def test_tensor_reports_name_shape_type_and_holds_the_array_itself() -> None:
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = pb_utils.Tensor("X", array)
    assert tensor.name() == "X"
    assert tensor.as_numpy() is array
    assert tensor.shape() == [2, 3]
    assert tensor.triton_dtype() == 11
    assert tensor.is_cpu()
    assert pb_utils.Tensor("S", np.array([b"a"], dtype=object)).triton_dtype() == 13
    assert pb_utils.Tensor("L", [1, 2]).as_numpy().tolist() == [1, 2]
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.Tensor("V", np.zeros(1, dtype="V4"))


def test_dlpack_round_trips_share_memory_and_read_only_inputs_export_safely() -> None:
    array = np.arange(4, dtype=np.int32)
    tensor = pb_utils.Tensor("X", array)
    back = pb_utils.Tensor.from_dlpack("Y", tensor.to_dlpack())
    assert back.name() == "Y"
    assert np.shares_memory(back.as_numpy(), array)
    assert np.shares_memory(np.from_dlpack(tensor), array)
    assert np.shares_memory(pb_utils.Tensor.from_dlpack("Z", tensor).as_numpy(), array)

    read_only = np.frombuffer(array.tobytes(), dtype=np.int32)
    view = pb_utils.Tensor("R", read_only)
    assert pb_utils.Tensor.from_dlpack("C", view.to_dlpack()).as_numpy().tolist() == [0, 1, 2, 3]
    assert np.from_dlpack(view).tolist() == [0, 1, 2, 3]
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.Tensor("B", np.array([b"x"], dtype=object)).to_dlpack()


def test_byte_tensors_serialize_with_length_prefixes_and_keep_nuls() -> None:
    data = np.array([b"he\x00llo", b"", "\u00e9"], dtype=object)
    encoded = pb_utils.serialize_byte_tensor(data)
    assert encoded == b"\x06\x00\x00\x00he\x00llo" + b"\x00\x00\x00\x00" + b"\x02\x00\x00\x00\xc3\xa9"
    decoded = pb_utils.deserialize_bytes_tensor(encoded)
    assert decoded.dtype == np.object_
    assert decoded.tolist() == [b"he\x00llo", b"", "é".encode()]
    assert pb_utils.serialize_byte_tensor(np.zeros(2, dtype=np.float32)) is None
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.deserialize_bytes_tensor(b"\x09\x00\x00\x00abc")


def test_type_conversions_follow_tritons_tables() -> None:
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.triton_string_to_numpy("TYPE_BOOL") is bool
    assert pb_utils.triton_to_numpy_type(8) is np.int32
    assert pb_utils.triton_to_numpy_type(13) is np.object_
    assert pb_utils.triton_to_numpy_type(99) is None
    assert pb_utils.numpy_to_triton_type(np.float16) == 10
    assert pb_utils.numpy_to_triton_type(np.dtype("uint64")) == 5
    assert pb_utils.numpy_to_triton_type(np.bytes_) == 13
    assert pb_utils.numpy_to_triton_type(np.object_) == 13
    assert pb_utils.numpy_to_triton_type(np.complex64) is None


def test_config_lookups_read_the_model_config_dict() -> None:
    config = {
        "input": [{"name": "A", "dims": [1]}],
        "output": [{"name": "B", "dims": [2]}],
        "model_transaction_policy": {"decoupled": True},
    }
    assert pb_utils.get_input_config_by_name(config, "A") == {"name": "A", "dims": [1]}
    assert pb_utils.get_input_config_by_name(config, "B") is None
    assert pb_utils.get_output_config_by_name(config, "B") == {"name": "B", "dims": [2]}
    assert pb_utils.using_decoupled_model_transaction_policy(config)
    assert not pb_utils.using_decoupled_model_transaction_policy({})


def test_responses_and_errors() -> None:
    out = pb_utils.Tensor("OUT", np.zeros(1))
    response = pb_utils.InferenceResponse(output_tensors=[out], parameters={"k": 1})
    assert response.output_tensors() == [out]
    assert not response.has_error()
    assert response.error() is None
    assert json.loads(response.parameters()) == {"k": 1}
    assert pb_utils.get_output_tensor_by_name(response, "OUT") is out
    assert pb_utils.get_output_tensor_by_name(response, "NOPE") is None

    error = pb_utils.TritonError("gone", pb_utils.TritonError.NOT_FOUND)
    failed = pb_utils.InferenceResponse(error=error)
    assert failed.has_error()
    assert failed.error() is error
    assert (error.message(), error.code(), str(error)) == ("gone", 2, "gone")
    assert pb_utils.TritonError("x").code() == pb_utils.TritonError.INTERNAL
    assert pb_utils.InferenceResponse().output_tensors() == []
    with pytest.raises(TypeError):
        pb_utils.InferenceResponse(error="not an error")  # type: ignore[arg-type]
    assert pb_utils.TritonModelException("why").message() == "why"


def test_constants_have_tritons_values() -> None:
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START == 1
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END == 2
    assert pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL == 1
    assert pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL == 1
    assert pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE == 2


def test_logger_writes_to_python_logging(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="naiad.python_backend"):
        pb_utils.Logger.log_info("info message")
        pb_utils.Logger.log_warn("warn message")
        pb_utils.Logger.log_error("error message")
        pb_utils.Logger.log_verbose("verbose message")
        pb_utils.Logger.log("explicit", pb_utils.Logger.ERROR)
        pb_utils.Logger.log("default level")
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("naiad.python_backend", logging.INFO, "info message"),
        ("naiad.python_backend", logging.WARNING, "warn message"),
        ("naiad.python_backend", logging.ERROR, "error message"),
        ("naiad.python_backend", logging.DEBUG, "verbose message"),
        ("naiad.python_backend", logging.ERROR, "explicit"),
        ("naiad.python_backend", logging.INFO, "default level"),
    ]


def test_model_config_setters_check_what_is_already_configured() -> None:
    config = pb_utils.ModelConfig(
        json.dumps({"name": "m", "max_batch_size": 0, "input": [{"name": "A", "data_type": "TYPE_INVALID",
                                                                 "dims": []}], "output": []})
    )
    config.add_input({"name": "A", "data_type": "TYPE_INT64", "dims": [2]})
    config.add_input({"name": "A", "data_type": "TYPE_INT64", "dims": [2]})
    assert config.as_dict()["input"] == [{"name": "A", "data_type": "TYPE_INT64", "dims": [2]}]
    with pytest.raises(ValueError, match="configuration expects datatype TYPE_INT64 for input 'A'"):
        config.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [2]})
    with pytest.raises(ValueError, match="the model expects dims \\[3\\]"):
        config.add_input({"name": "A", "data_type": "TYPE_INT64", "dims": [3]})
    config.set_max_batch_size(4)
    assert config.max_batch_size() == 4
    with pytest.raises(ValueError, match="configuration specified max_batch_size 4"):
        config.set_max_batch_size(2)
    config.set_model_transaction_policy({"decoupled": True})
    with pytest.raises(ValueError, match="contains property other than 'decoupled'"):
        config.set_model_transaction_policy({"decoupled": True, "other": 1})


def test_bls_requests_take_bytes_names_as_tritons_std_string_arguments_do() -> None:
    """NVIDIA's BLS example names the model with a BYTES tensor's element: ``b"add_sub"``."""
    request = pb_utils.InferenceRequest(
        model_name=b"add_sub", requested_output_names=[b"OUTPUT0", "OUTPUT1"], request_id=b"7", inputs=[]
    )
    assert request.model_name() == "add_sub"
    assert request.requested_output_names() == ["OUTPUT0", "OUTPUT1"]
    assert request.request_id() == "7"


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ([], "Expect dict, got <class 'list'>"),
        ({1: "int key"}, "Expect parameters keys to have type str, found type <class 'int'>"),
        ({"float": 0.5}, "Expect parameters values to have type bool/int/str, found type <class 'float'>"),
        ({"null": None}, "Expect parameters values to have type bool/int/str, found type <class 'NoneType'>"),
        ({"list": ["x"]}, "Expect parameters values to have type bool/int/str, found type <class 'list'>"),
    ],
)
def test_parameters_are_checked_when_made_with_tritons_messages(parameters: object, message: str) -> None:
    """As Triton's constructors check them (qa/L0_backend_python/parameters asserts these messages)."""
    for make in (pb_utils.InferenceResponse, pb_utils.InferenceRequest):
        with pytest.raises(pb_utils.TritonModelException) as caught:
            make(parameters=parameters)  # type: ignore[arg-type]
        assert str(caught.value) == message
    response = pb_utils.InferenceResponse(parameters={"b": True, "i": 2, "s": ""})
    assert json.loads(response.parameters()) == {"b": True, "i": 2, "s": ""}


def test_arguments_of_the_wrong_type_raise_as_tritons_bindings_do() -> None:
    """NVIDIA's qa argument_validation model tests these: a wrong type (None included) is a TypeError,
    a None among tensors a TritonModelException; bytes are taken for str (pybind11's std::string)."""
    tensor = pb_utils.Tensor("INPUT0", np.asarray([1, 2], dtype=np.int32))
    request = {"inputs": [tensor], "model_name": "m", "requested_output_names": ["OUT"]}
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.InferenceRequest(**{**request, "inputs": [None]})
    for name, value in (
        ("inputs", None),
        ("model_name", None),
        ("requested_output_names", None),
        ("requested_output_names", [None]),
        ("correlation_id", None),
        ("request_id", None),
        ("model_version", None),
        ("flags", None),
    ):
        with pytest.raises(TypeError, match=name):
            pb_utils.InferenceRequest(**{**request, name: value})
    assert pb_utils.InferenceRequest(**request, correlation_id="id-5").correlation_id() == "id-5"
    assert pb_utils.InferenceRequest(**{**request, "model_name": b"m"}).model_name() == "m"
    pb_utils.InferenceRequest(requested_output_names=[], inputs=[], model_name="m")
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.InferenceResponse(output_tensors=[None])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        pb_utils.InferenceResponse(output_tensors=None)  # type: ignore[arg-type]
    assert pb_utils.InferenceResponse().output_tensors() == []
    with pytest.raises(TypeError):
        pb_utils.Tensor(None, np.zeros(1))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        pb_utils.Tensor("OUTPUT0", None)
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.Tensor.from_dlpack("OUTPUT0", None)
    logger = pb_utils.Logger
    for call in (
        lambda: logger.log("Invalid Level", None),  # type: ignore[arg-type]
        lambda: logger.log("Invalid Level", 1),  # type: ignore[arg-type]
        lambda: logger.log_info(None),  # type: ignore[arg-type]
        lambda: logger.log_warn(None),  # type: ignore[arg-type]
        lambda: logger.log_error(None),  # type: ignore[arg-type]
        lambda: logger.log_verbose(None),  # type: ignore[arg-type]
    ):
        with pytest.raises(TypeError):
            call()
    logger.log("Level unspecified")
    logger.log("warned", logger.WARNING)


@pytest.fixture
def metric_store() -> Iterator[MetricStore]:
    """Custom metrics bound as a served model has them (its process's store)."""
    store = MetricStore()
    token = pb_utils.SERVICES.set(pb_utils.ModelServices(store))
    yield store
    pb_utils.SERVICES.reset(token)


def test_histogram_buckets_must_be_strictly_ascending(metric_store: MetricStore) -> None:
    family = pb_utils.MetricFamily("latency", "d", pb_utils.MetricFamily.HISTOGRAM)
    for buckets in ([2.5, 0.1, 1.0], [1, 1, 2]):
        with pytest.raises(pb_utils.TritonModelException, match="Bucket Boundaries must be strictly sorted"):
            family.Metric(labels={}, buckets=buckets)
    empty = family.Metric(labels={}, buckets=[])
    metric = family.Metric(labels={"a": "b"}, buckets=[0.5, 1, 2])
    metric.observe(0.7)
    empty.observe(3)
    (series,) = [s for name, _, _, series in metric_store.snapshot() if name == "latency" for s in series if s.labels]
    assert (series.counts, series.observed) == ([0, 1, 1], 1)


def test_a_metric_whose_family_was_deleted_refuses_every_operation(metric_store: MetricStore) -> None:
    """As Triton's: deleting the ``MetricFamily`` object first clears its metrics (a metric does not
    keep it alive), and the family leaves the exported metrics."""
    family = pb_utils.MetricFamily("gone", "d", pb_utils.MetricFamily.GAUGE)
    metric = family.Metric(labels={"k": "v"})
    metric.set(3)
    assert metric.value() == 3
    del family
    for operation in (lambda: metric.set(1), lambda: metric.increment(1), metric.value):
        with pytest.raises(pb_utils.TritonModelException, match="'MetricFamily' has been deleted"):
            operation()
    assert [name for name, *_ in metric_store.snapshot()] == []
