"""Loading, isolating and unloading Python models: initialize args, module privacy, finalize, failures."""

from __future__ import annotations

import json
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
from naiad.backends.python.instance import PythonModelInstance
from naiad.core.errors import ErrorCode, InferenceServerError
from naiad.core.request import InferResponse

from tests.backends.python.models import LoadInstance, instance_context, request, write_model
from tests.support.backends import get_backend

#: Opts a model into running inside the engine instead of a model process.
IN_THE_ENGINE = 'parameters { key: "NAIAD_INSTANCE_PROCESSES" value: { string_value: "false" } }\n'

FP32_IO = """
    backend: "python"
    input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]
    output [{ name: "OUTPUT0" data_type: TYPE_STRING dims: [ 1 ] }]
"""

# A model that answers every request with one BYTES element: the JSON of what it wants to report.
REPORTING_MODEL = """
    import json
    import numpy as np
    import triton_python_backend_utils as pb_utils
    {prelude}

    class TritonPythonModel:
        {body}

        def execute(self, requests):
            return [
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUTPUT0", np.array([json.dumps(self.report()).encode()], dtype=object))]
                )
                for _ in requests
            ]
"""


def reporting_model(root: Path, name: str, body: str, prelude: str = "", **files: str) -> Path:
    indented = textwrap.dedent(body).strip().replace("\n", "\n        ")
    model_py = REPORTING_MODEL.format(prelude=prelude, body=indented)
    return write_model(root, name, model_py, FP32_IO, files)


def report(instance: PythonModelInstance, count: int = 1) -> list[object]:
    results = instance.execute([request("m", INPUT0=[1, 2, 3, 4]) for _ in range(count)])
    reports = []
    for result in results:
        assert isinstance(result, InferResponse), result
        reports.append(json.loads(result.outputs[0].data[0]))
    return reports


def test_initialize_receives_tritons_seven_string_arguments(tmp_path: Path, instances: LoadInstance) -> None:
    model_dir = reporting_model(
        tmp_path,
        "recorder",
        """
        def initialize(self, args):
            self.args = args

        def report(self):
            return self.args
        """,
    )
    (args,) = report(instances(model_dir, index=2))
    assert isinstance(args, dict)
    assert set(args) == {
        "model_config",
        "model_instance_kind",
        "model_instance_name",
        "model_instance_device_id",
        "model_repository",
        "model_version",
        "model_name",
    }
    assert all(isinstance(value, str) for value in args.values())
    assert args["model_instance_kind"] == "CPU"
    assert args["model_instance_name"] == "recorder_2"
    assert args["model_instance_device_id"] == "0"
    assert args["model_repository"] == str(model_dir)
    assert args["model_version"] == "1"
    assert args["model_name"] == "recorder"
    config = json.loads(args["model_config"])
    assert config["name"] == "recorder"
    assert config["backend"] == "python"
    assert config["max_batch_size"] == 0
    assert config["input"][0]["name"] == "INPUT0"
    assert config["input"][0]["data_type"] == "TYPE_FP32"
    assert config["input"][0]["dims"] == [4]
    assert config["output"][0]["data_type"] == "TYPE_STRING"
    assert config["instance_group"][0]["kind"] == "KIND_CPU"


def test_two_instances_of_one_model_do_not_share_module_globals(
    tmp_path: Path, instances: LoadInstance
) -> None:
    model_dir = reporting_model(
        tmp_path,
        "counter",
        """
        def report(self):
            global CALLS
            CALLS += 1
            return CALLS
        """,
        prelude="CALLS = 0",
    )
    first, second = instances(model_dir, 0), instances(model_dir, 1)
    assert report(first, 3) == [1, 2, 3]
    assert report(second, 2) == [1, 2]
    assert report(first) == [4]


def test_modules_next_to_model_py_are_importable_and_private_to_their_model(
    tmp_path: Path, instances: LoadInstance
) -> None:
    body = """
        def report(self):
            return VALUE
    """
    prelude = "from helper import VALUE"
    one = reporting_model(tmp_path, "one", body, prelude, **{"helper.py": "VALUE = 1"})
    two = reporting_model(tmp_path, "two", body, prelude, **{"helper.py": "VALUE = 2"})
    path_before = list(sys.path)
    assert report(instances(one)) == [1]
    assert report(instances(two)) == [2]
    assert sys.path == path_before
    assert "helper" not in sys.modules


def test_a_module_that_answers_every_attribute_does_not_break_the_load(
    tmp_path: Path, instances: LoadInstance
) -> None:
    """``import torch`` loads ``torch.classes``, whose ``__getattr__`` answers ``__path__`` with an object
    that is not a list: NVIDIA's pytorch example failed to load on it."""
    body = """
        def report(self):
            return VALUE
    """
    prelude = "from anything import VALUE"
    anything = "VALUE = 7\n\ndef __getattr__(name):\n    return object()\n"
    model = reporting_model(tmp_path, "anything", body, prelude, **{"anything.py": anything})
    assert report(instances(model)) == [7]
    assert "anything" not in sys.modules


def test_close_calls_finalize_once(tmp_path: Path) -> None:
    model_dir = reporting_model(
        tmp_path,
        "finalizing",
        """
        def initialize(self, args):
            self.marker = args["model_repository"] + "/finalized"

        def finalize(self):
            with open(self.marker, "a") as f:
                f.write("x")

        def report(self):
            return 0
        """,
    )
    instance = get_backend("python").create_instance(instance_context(model_dir))
    assert not (model_dir / "finalized").exists()
    instance.close()
    instance.close()
    assert (model_dir / "finalized").read_text() == "x"


def test_a_failing_finalize_is_logged_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """In the engine (where ``caplog`` sees the log; a model process logs to the server's stderr)."""
    model_dir = reporting_model(
        tmp_path,
        "bad_finalize",
        """
        def finalize(self):
            raise RuntimeError("cleanup went wrong")

        def report(self):
            return 0
        """,
    )
    config = model_dir / "config.pbtxt"
    config.write_text(config.read_text() + IN_THE_ENGINE)
    instance = get_backend("python").create_instance(instance_context(model_dir))
    instance.close()
    assert "cleanup went wrong" in caplog.text


def test_async_execute_runs_on_one_loop_per_instance_from_the_instance_thread(
    tmp_path: Path, instances: LoadInstance
) -> None:
    model_dir = write_model(
        tmp_path,
        "async_model",
        """
        import asyncio
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            async def initialize(self, args):
                await asyncio.sleep(0)

            async def execute(self, requests):
                await asyncio.sleep(0)
                loop = id(asyncio.get_running_loop())
                return [
                    pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.array([loop], dtype=np.int64))])
                    for _ in requests
                ]
        """,
        """
        backend: "python"
        input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]
        output [{ name: "OUTPUT0" data_type: TYPE_INT64 dims: [ 1 ] }]
        """,
    )
    instance = instances(model_dir)
    loops: list[int] = []

    def serve() -> None:
        for _ in range(3):
            for result in instance.execute([request("m", INPUT0=[1, 2, 3, 4]) for _ in range(2)]):
                assert isinstance(result, InferResponse)
                assert result.outputs[0].datatype == "INT64"
                loops.append(int(result.outputs[0].data[0]))

    thread = threading.Thread(target=serve)
    thread.start()
    thread.join()
    assert len(loops) == 6
    assert len(set(loops)) == 1


@pytest.mark.parametrize(
    ("model_py", "expected"),
    [
        ("class SomethingElse:\n    pass\n", "defines no class TritonPythonModel"),
        ("class TritonPythonModel:\n    pass\n", "has no execute() method"),
    ],
    ids=["no-class", "no-execute"],
)
def test_a_model_that_cannot_load_fails_with_a_reason_naming_it(
    tmp_path: Path, model_py: str, expected: str
) -> None:
    model_dir = write_model(tmp_path, "broken", "class TritonPythonModel:\n    pass\n", FP32_IO)
    context = instance_context(model_dir)
    (model_dir / "1" / "model.py").write_text(model_py)
    with pytest.raises(InferenceServerError) as caught:
        get_backend("python").create_instance(context)
    assert "model 'broken'" in caught.value.message
    assert expected in caught.value.message
    assert not any(name.startswith("_naiad_model_broken") for name in sys.modules)


def test_a_model_py_that_cannot_import_fails_with_triton_s_reason(tmp_path: Path) -> None:
    """Triton 2.51's reason (checked side by side, a POLL reload of a model.py that raises): its status,
    the exception and the frames it passed through (a syntax error has none: they are the compiler's)."""
    model_dir = write_model(tmp_path, "broken", "class TritonPythonModel:\n    pass\n", FP32_IO)
    context = instance_context(model_dir)
    source = model_dir / "1" / "model.py"
    source.write_text("import not_a_module_anywhere\n")
    with pytest.raises(InferenceServerError) as caught:
        get_backend("python").create_instance(context)
    message = caught.value.message
    assert (caught.value.code, message.split("\n\nAt:\n")[0]) == (
        ErrorCode.INTERNAL,
        "Internal: ModuleNotFoundError: No module named 'not_a_module_anywhere'",
    )
    assert message.split("\n\nAt:\n")[1].startswith(f"  {source}(1): <module>\n")
    source.write_text("class TritonPythonModel:\n    def execute(self, requests)\n        return []\n")
    with pytest.raises(InferenceServerError) as caught:
        get_backend("python").create_instance(context)
    assert caught.value.message == "Internal: SyntaxError: expected ':' (model.py, line 2)"
    assert not any(name.startswith("_naiad_model_broken") for name in sys.modules)


def test_a_model_whose_initialize_raises_fails_with_triton_s_reason(tmp_path: Path) -> None:
    """Triton 2.51's reason (checked side by side): its status, the exception and the model's frames,
    the innermost first, as its stub reports them."""
    model_dir = write_model(tmp_path, "broken", "class TritonPythonModel:\n    pass\n", FP32_IO)
    context = instance_context(model_dir)
    source = model_dir / "1" / "model.py"
    source.write_text(
        "def check(args):\n"
        "    raise ValueError('weights missing')\n"
        "class TritonPythonModel:\n"
        "    def initialize(self, args):\n"
        "        check(args)\n"
        "    def execute(self, requests):\n"
        "        return []\n"
    )
    with pytest.raises(InferenceServerError) as caught:
        get_backend("python").create_instance(context)
    assert (caught.value.code, caught.value.message) == (
        ErrorCode.INTERNAL,
        f"Internal: ValueError: weights missing\n\nAt:\n  {source}(2): check\n  {source}(5): initialize\n",
    )
    assert not any(name.startswith("_naiad_model_broken") for name in sys.modules)


def test_a_model_py_that_cannot_import_fails_auto_complete_as_tritons_stub_reports_it(tmp_path: Path) -> None:
    model_dir = write_model(tmp_path, "broken", "# has an auto_complete_config\ndef oops(:\n", FP32_IO)
    with pytest.raises(InferenceServerError) as caught:
        instance_context(model_dir)
    assert (caught.value.code, caught.value.message) == (
        ErrorCode.INTERNAL,
        "SyntaxError: invalid syntax (model.py, line 2)",
    )


def test_a_model_py_without_auto_complete_config_that_cannot_import_fails_its_load(tmp_path: Path) -> None:
    """No process is started to auto-complete a model whose sources define its class and never
    mention it (a class from elsewhere, or with a base, is always asked: test_auto_complete.py)."""
    model_dir = write_model(tmp_path, "broken", "class TritonPythonModel:\n    pass\n\ndef oops(:\n", FP32_IO)
    with pytest.raises(InferenceServerError) as caught:
        get_backend("python").create_instance(instance_context(model_dir))
    assert caught.value.message == "Internal: SyntaxError: invalid syntax (model.py, line 4)"


def test_execute_gets_writable_inputs_copied_only_when_the_request_is_read_only(
    tmp_path: Path, instances: LoadInstance
) -> None:
    """As in Triton, a model may change its inputs in place (``x += 1``).  In the engine an input the
    request holds writable (a worker's arena block, a decoded JSON array) is handed over as is; a
    read-only one (a view of an HTTP body or a gRPC message) is copied by ``as_numpy``, and the
    request's bytes stay as they were.  (A model process's inputs: tests/backends/python/test_zero_copy.py.)"""
    model_dir = write_model(
        tmp_path,
        "views",
        """
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                responses = []
                for request in requests:
                    array = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                    array += 1
                    seen = [array.ctypes.data, int(array.flags.writeable), *array.astype(np.int64)]
                    responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.array(seen))]))
                return responses
        """,
        """
        backend: "python"
        input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]
        output [{ name: "OUTPUT0" data_type: TYPE_INT64 dims: [ 6 ] }]
        """
        + IN_THE_ENGINE,
    )
    instance = instances(model_dir)
    read_only = request("m", INPUT0=[1, 2, 3, 4])
    assert not read_only.inputs[0].data.flags.writeable
    (result,) = instance.execute([read_only])
    assert isinstance(result, InferResponse)
    address, writable, *values = result.outputs[0].data.tolist()
    assert (writable, values) == (1, [2, 3, 4, 5])
    assert address != read_only.inputs[0].data.ctypes.data  # a copy of the model's own
    assert read_only.inputs[0].data.tolist() == [1, 2, 3, 4]
    own = request("m", INPUT0=[1, 2, 3, 4])
    own.inputs[0].data = np.array([1, 2, 3, 4], np.float32)
    (result,) = instance.execute([own])
    assert isinstance(result, InferResponse)
    address, writable, *values = result.outputs[0].data.tolist()
    assert (address, writable, values) == (own.inputs[0].data.ctypes.data, 1, [2, 3, 4, 5])  # no copy
