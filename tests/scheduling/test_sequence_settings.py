"""Reading a ``sequence_batching`` section: implicit states' initial values, from zeros or from a
``data_file`` in the model's ``initial_state`` folder, and the load errors a bad one gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from naiad.codecs import bytes_tensor
from naiad.core.errors import InvalidArgumentError
from naiad.scheduling.sequence_settings import SequenceSettings, sequence_settings_of
from tritonclient.grpc import model_config_pb2 as mc


def settings(
    model_dir: Path, data_type: str, initial: str, dims: str = "[ 2 ]", batch: int = 4
) -> SequenceSettings:
    config = f"""
    name: "m" max_batch_size: {batch}
    sequence_batching {{ state [{{
      input_name: "IN" output_name: "OUT" data_type: {data_type} dims: {dims}
      {initial}
    }}] }}
    """
    return sequence_settings_of(text_format.Parse(config, mc.ModelConfig()), model_dir)


def from_file(data_type: str, name: str, dims: str = "[ 2 ]") -> str:
    return f'initial_state {{ name: "init" data_type: {data_type} dims: {dims} data_file: "{name}" }}'


def write(model_dir: Path, name: str, content: bytes) -> None:
    path = model_dir / "initial_state" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)


def test_a_data_file_is_read_as_little_endian_rows(tmp_path: Path) -> None:
    write(tmp_path, "init.bin", np.array([7, -3], dtype="<i4").tobytes())
    write(tmp_path, "nested/init.bin", np.array([1.5, 2.5], dtype="<f4").tobytes())
    state = settings(tmp_path, "TYPE_INT32", from_file("TYPE_INT32", "init.bin")).states[0]
    assert state.initial.tolist() == [[7, -3]] and state.initial.dtype == np.int32  # batch dim added
    assert not state.initial.flags.writeable  # shared by every sequence
    unbatched = settings(tmp_path, "TYPE_FP32", from_file("TYPE_FP32", "nested/init.bin"), batch=0)
    assert unbatched.states[0].initial.tolist() == [1.5, 2.5]


def test_a_variable_state_dim_takes_the_initial_states_size(tmp_path: Path) -> None:
    write(tmp_path, "three", np.arange(3, dtype="<i8").tobytes())
    state = settings(tmp_path, "TYPE_INT64", from_file("TYPE_INT64", "three", "[ 3 ]"), dims="[ -1 ]").states[
        0
    ]
    assert state.initial.tolist() == [[0, 1, 2]]


def test_string_states(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A file holding the state's strings gives them; one of 4 bytes an element that does not gives
    empty strings, as Triton 2.51 does with any such file (it zeroes a string state's bytes; NVIDIA's
    L0_sequence_batcher gives a STRING state of one element the 4 bytes of an INT32 100); any other
    fails the load (Triton fails each request of the sequence: "unexpected number of string elements
    2 for inference input 'INPUT_STATE', expecting 1", checked)."""
    zero = 'initial_state { name: "init" data_type: TYPE_STRING dims: [ 2 ] zero_data: true }'
    assert settings(tmp_path, "TYPE_STRING", zero).states[0].initial.tolist() == [[b"", b""]]
    assert settings(tmp_path, "TYPE_STRING", "").states[0].initial.tolist() == [[b"", b""]]
    write(tmp_path, "words", bytes_tensor.serialize(np.array([b"hello", b""], dtype=np.object_)))
    state = settings(tmp_path, "TYPE_STRING", from_file("TYPE_STRING", "words")).states[0]
    assert state.datatype == "BYTES" and state.initial.tolist() == [[b"hello", b""]]
    write(tmp_path, "qa", b"\x64\x00\x00\x00" * 2)
    state = settings(tmp_path, "TYPE_STRING", from_file("TYPE_STRING", "qa")).states[0]
    assert state.initial.tolist() == [[b"", b""]]
    assert (
        "data_file 'qa' does not hold 2 strings; as in Triton, the state starts as 2 empty strings"
        in caplog.text
    )
    write(tmp_path, "short", bytes_tensor.serialize(np.array([b"one"], dtype=np.object_)))
    with pytest.raises(InvalidArgumentError, match=r"data_file 'short'.*expected 2 string elements"):
        settings(tmp_path, "TYPE_STRING", from_file("TYPE_STRING", "short"))


def test_a_data_file_too_short_fails_the_load(tmp_path: Path) -> None:
    write(tmp_path, "init.bin", bytes(4))
    with pytest.raises(InvalidArgumentError) as info:
        settings(tmp_path, "TYPE_INT32", from_file("TYPE_INT32", "init.bin"))
    assert info.value.message == (
        "initial_state of state 'IN' of model 'm' expects 8 bytes (2 INT32 elements), but data_file "
        "'init.bin' only has 4 bytes"
    )


def test_a_longer_data_file_gives_its_first_bytes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """As Triton does (NVIDIA's L0_sequence_batcher gives a BOOL state of one element a 4-byte file)."""
    write(tmp_path, "init.bin", np.array([5, 6, 7], dtype="<i4").tobytes())
    state = settings(tmp_path, "TYPE_INT32", from_file("TYPE_INT32", "init.bin")).states[0]
    assert state.initial.tolist() == [[5, 6]]
    assert "takes the first 8 bytes (2 INT32 elements) of data_file 'init.bin', which has 12" in caplog.text
    write(tmp_path, "flag", b"\x64\x00\x00\x00")
    flag = settings(tmp_path, "TYPE_BOOL", from_file("TYPE_BOOL", "flag", "[ 1 ]"), dims="[ 1 ]").states[0]
    assert flag.initial.tolist() == [[True]]


@pytest.mark.parametrize("name", ["../secret", "a/../../secret", "/etc/passwd", "..", "sub/../../x"])
def test_a_data_file_outside_the_folder_is_refused(tmp_path: Path, name: str) -> None:
    model_dir = tmp_path / "model"
    write(model_dir, "ok", bytes(8))
    (model_dir / "secret").write_bytes(bytes(8))
    with pytest.raises(InvalidArgumentError, match="must be a path relative to the model's 'initial_state'"):
        settings(model_dir, "TYPE_INT32", from_file("TYPE_INT32", name))


def test_a_symlink_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "outside").write_bytes(bytes(8))
    write(tmp_path / "model", "placeholder", b"")
    (tmp_path / "model" / "initial_state" / "link").symlink_to(tmp_path / "outside")
    with pytest.raises(
        InvalidArgumentError, match="data_file 'link' leads out of the model's 'initial_state'"
    ):
        settings(tmp_path / "model", "TYPE_INT32", from_file("TYPE_INT32", "link"))


@pytest.mark.parametrize("name", ["absent", ""])
def test_a_missing_data_file_fails_the_load(tmp_path: Path, name: str) -> None:
    (tmp_path / "initial_state").mkdir()
    with pytest.raises(InvalidArgumentError, match=f"cannot read data_file '{name}'"):
        settings(tmp_path, "TYPE_INT32", from_file("TYPE_INT32", name))


@pytest.mark.parametrize(
    ("initial", "message"),
    [
        ("initial_state { data_type: TYPE_INT32 dims: [ 2 ] zero_data: true }", "Field 'name' must be set"),
        ('initial_state { name: "i" data_type: TYPE_INT32 dims: [ 2 ] }', "to have state_data set"),
        ('initial_state { name: "i" data_type: TYPE_FP32 dims: [ 2 ] zero_data: true }', "does not match"),
        ('initial_state { name: "i" data_type: TYPE_INT32 dims: [ 3 ] zero_data: true }', "don't match"),
    ],
)
def test_triton_checks_of_initial_state(tmp_path: Path, initial: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        settings(tmp_path, "TYPE_INT32", initial)


def test_an_initial_state_needs_fixed_dims(tmp_path: Path) -> None:
    initial = 'initial_state { name: "i" data_type: TYPE_INT32 dims: [ -1 ] zero_data: true }'
    with pytest.raises(InvalidArgumentError, match="contains variable dimensions"):
        settings(tmp_path, "TYPE_INT32", initial, dims="[ -1 ]")
