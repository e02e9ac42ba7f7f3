"""``TritonPythonModel.auto_complete_config`` filling and checking the configuration."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from naiad.core.errors import ErrorCode, InferenceServerError
from naiad.core.request import InferResponse
from naiad.repository.config import parse_text

from tests.backends.python.models import LoadInstance, instance_context, load_config, request, write_model
from tests.support.backends import get_backend

COMPLETING_MODEL = """
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        @staticmethod
        def auto_complete_config(auto_complete_model_config):
            auto_complete_model_config.set_max_batch_size(8)
            auto_complete_model_config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [3]})
            auto_complete_model_config.add_input(
                {"name": "MASK", "data_type": "TYPE_BOOL", "dims": [-1], "optional": True}
            )
            auto_complete_model_config.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [3]})
            auto_complete_model_config.set_dynamic_batching()
            auto_complete_model_config.set_model_transaction_policy({"decoupled": False})
            return auto_complete_model_config

        def execute(self, requests):
            return [
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 10)]
                )
                for r in requests
            ]
"""


def test_a_model_with_no_config_file_is_completed_by_its_model_py(
    tmp_path: Path, instances: LoadInstance
) -> None:
    model_dir = write_model(tmp_path, "completed", COMPLETING_MODEL)
    config = load_config(model_dir)
    assert config.name == "completed"
    assert config.backend == "python"
    assert config.max_batch_size == 8
    assert [(t.name, t.data_type, list(t.dims), t.optional) for t in config.input] == [
        ("IN", 11, [3], False),
        ("MASK", 1, [-1], True),
    ]
    assert [(t.name, list(t.dims)) for t in config.output] == [("OUT", [3])]
    assert config.HasField("dynamic_batching")
    assert config.HasField("model_transaction_policy")
    assert not config.model_transaction_policy.decoupled
    assert not any(name.startswith("_naiad_model_completed") for name in sys.modules)

    batch = request("completed", IN=np.ones((2, 3), dtype=np.float32))
    assert instance_context(model_dir).signature.validate(batch) == 2
    (result,) = instances(model_dir).execute([batch])
    assert isinstance(result, InferResponse)
    np.testing.assert_array_equal(result.outputs[0].data, np.full((2, 3), 10, dtype=np.float32))


@pytest.mark.parametrize(
    "model_py",
    [
        "from completing_base import *\n",  # NVIDIA's L0_model_namespacing models import theirs so
        "import completing_base\n\nclass TritonPythonModel(completing_base.TritonPythonModel):\n    pass\n",
    ],
    ids=["star-import", "subclass"],
)
def test_a_completing_class_from_outside_the_model_folder_completes_it(
    tmp_path: Path, model_py: str
) -> None:
    """The model folder's sources never name ``auto_complete_config``: the class (or its base) comes
    from a module elsewhere on the path, and Triton still completes the configuration with it."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "completing_base.py").write_text(textwrap.dedent(COMPLETING_MODEL))
    model_dir = write_model(
        tmp_path / "repo", "elsewhere", f"import sys\nsys.path.append({str(shared)!r})\n" + model_py
    )
    config = load_config(model_dir)
    assert config.max_batch_size == 8
    assert [t.name for t in config.input] == ["IN", "MASK"]
    assert [t.name for t in config.output] == ["OUT"]


def test_auto_complete_agrees_with_a_config_that_already_says_the_same(tmp_path: Path) -> None:
    model_dir = write_model(
        tmp_path,
        "agreeing",
        COMPLETING_MODEL,
        """
        backend: "python"
        max_batch_size: 4
        input [{ name: "IN" data_type: TYPE_FP32 dims: [ 3 ] }]
        """,
    )
    config = load_config(model_dir)
    assert config.max_batch_size == 8
    assert [t.name for t in config.input] == ["IN", "MASK"]


@pytest.mark.parametrize(
    ("config_text", "message"),
    [
        (
            'backend: "python"\ninput [{ name: "IN" data_type: TYPE_INT32 dims: [ 3 ] }]',
            "configuration expects datatype TYPE_INT32 for input 'IN', model provides TYPE_FP32",
        ),
        (
            'backend: "python"\noutput [{ name: "OUT" data_type: TYPE_FP32 dims: [ 5 ] }]',
            "the model expects dims [3] but the model configuration specifies dims [5]",
        ),
        (
            'backend: "python"\nmax_batch_size: 16',
            "configuration specified max_batch_size 16, but in auto-complete-config function for "
            "model 'conflicting' specified max_batch_size 8",
        ),
        (
            'backend: "python"\nsequence_batching {}',
            "Configuration specified scheduling_choice as 'sequence_batching'",
        ),
        (
            'backend: "python"\nmodel_transaction_policy { decoupled: true }',
            "trying to change decoupled property",
        ),
    ],
    ids=["datatype", "dims", "max-batch-size", "scheduler", "decoupled"],
)
def test_auto_complete_that_contradicts_the_config_fails_with_tritons_value_error(
    tmp_path: Path, config_text: str, message: str
) -> None:
    model_dir = write_model(tmp_path, "conflicting", COMPLETING_MODEL, config_text)
    with pytest.raises(InferenceServerError) as caught:
        load_config(model_dir)
    # as Triton's stub reports it: Internal, the exception, then the model's frames
    assert caught.value.code is ErrorCode.INTERNAL
    assert caught.value.message.startswith("ValueError: ")
    assert "model 'conflicting'" in caught.value.message
    assert message in caught.value.message
    assert "/conflicting/1/model.py(" in caught.value.message.split("\n\nAt:\n", 1)[1]


def test_a_model_without_auto_complete_config_leaves_the_config_alone(tmp_path: Path) -> None:
    """Nothing is added (the isolation choice included), so ``/config`` is Triton's."""
    model_dir = write_model(
        tmp_path,
        "plain",
        "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n",
        'backend: "python"\ninput [{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }]\n',
    )
    config = parse_text((model_dir / "config.pbtxt").read_text())
    expected = parse_text((model_dir / "config.pbtxt").read_text())
    get_backend("python").auto_complete(config, model_dir, model_dir / "1")
    get_backend("python").auto_complete(config, model_dir, None)
    assert config == expected


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("return None", "auto_complete_config function in model 'broken' must return a valid pb.ModelConfig object."),
        (
            'config.add_input({"name": "X", "data_type": "NOT_A_TYPE", "dims": [1]})\nreturn config',
            "produced an invalid configuration",
        ),
        ('config.add_input({"name": "X", "dims": [1]})\nreturn config', "is missing 'data_type' property"),
        (
            'config.add_output({"name": "X", "data_type": "TYPE_FP32", "dims": [1], "optional": True})\n'
            "return config",
            "contains property other than 'name', 'data_type' and 'dims'",
        ),
    ],
    ids=["returns-none", "bad-type", "missing-field", "extra-field"],
)
def test_a_broken_auto_complete_config_fails_the_model(tmp_path: Path, body: str, message: str) -> None:
    indented = body.replace("\n", "\n        ")
    model_dir = write_model(
        tmp_path,
        "broken",
        "class TritonPythonModel:\n"
        "    @staticmethod\n"
        "    def auto_complete_config(config):\n"
        f"        {indented}\n"
        "    def execute(self, requests):\n"
        "        return []\n",
    )
    with pytest.raises(InferenceServerError) as caught:
        load_config(model_dir)
    assert "model 'broken'" in caught.value.message
    assert message in caught.value.message


def test_an_auto_complete_that_changes_nothing_leaves_the_config_byte_identical(tmp_path: Path) -> None:
    model_dir = write_model(
        tmp_path,
        "identity",
        "class TritonPythonModel:\n"
        "    @staticmethod\n"
        "    def auto_complete_config(config):\n"
        "        return config\n"
        "    def execute(self, requests):\n"
        "        return []\n",
        """
        name: "identity"
        backend: "python"
        max_batch_size: 4
        input [{ name: "A" data_type: TYPE_STRING dims: [ -1, 3 ] reshape { shape: [ 3 ] } }]
        output [{ name: "B" data_type: TYPE_INT64 dims: [ 2 ] label_filename: "labels.txt" }]
        dynamic_batching { preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 9000000000 }
        parameters { key: "k" value { string_value: "v" } }
        instance_group [{ count: 2 kind: KIND_CPU }]
        """,
    )
    config = parse_text((model_dir / "config.pbtxt").read_text())
    before = config.SerializeToString(deterministic=True)
    get_backend("python").auto_complete(config, model_dir, model_dir / "1")
    assert config.SerializeToString(deterministic=True) == before
