"""The TensorRT backend's shape and config logic, on engine descriptions made here (no TensorRT needed)."""

from __future__ import annotations

import pytest
from naiad.backends.tensorrt import autocomplete
from naiad.backends.tensorrt.bindings import Binding, bind
from naiad.backends.tensorrt.profiles import choose_profile, group_profiles, max_batch
from naiad.backends.tensorrt.tensors import EngineTensor, ProfileShapes
from naiad.core.errors import InvalidArgumentError, UnsupportedError
from naiad.repository.config import parse_text

#: An MLP engine with two profiles: batches 1-8 (tuned for 4) and 9-64 (tuned for 32).
SMALL = ProfileShapes((1, 16), (4, 16), (8, 16))
LARGE = ProfileShapes((9, 16), (32, 16), (64, 16))
ENGINE = [
    EngineTensor("INPUT__0", True, "FLOAT", (-1, 16), (SMALL, LARGE)),
    EngineTensor("OUTPUT__0", False, "FLOAT", (-1, 8)),
]
INPUTS = [t for t in ENGINE if t.is_input]

CONFIG = """
name: "mlp"
platform: "tensorrt_plan"
max_batch_size: 64
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 8 ] } ]
"""


@pytest.mark.parametrize(
    ("batch", "allowed", "chosen"),
    [(2, [0, 1], 0), (8, [0, 1], 0), (9, [0, 1], 1), (40, [1, 0], 1), (9, [0], None), (65, [0, 1], None)],
)
def test_the_fitting_profile_tuned_closest_to_the_shapes_is_chosen(
    batch: int, allowed: list[int], chosen: int | None
) -> None:
    assert choose_profile(INPUTS, allowed, {"INPUT__0": (batch, 16)}) == chosen


def test_overlapping_profiles_prefer_the_one_tuned_nearer() -> None:
    wide = ProfileShapes((1, 16), (64, 16), (64, 16))
    narrow = ProfileShapes((1, 16), (2, 16), (8, 16))
    inputs = [EngineTensor("INPUT__0", True, "FLOAT", (-1, 16), (wide, narrow))]
    assert choose_profile(inputs, [0, 1], {"INPUT__0": (3, 16)}) == 1
    assert choose_profile(inputs, [0, 1], {"INPUT__0": (60, 16)}) == 0
    assert choose_profile(inputs, [0, 1], {"INPUT__0": (3, 15)}) is None  # non-batch dim out of range


def test_instance_groups_pick_their_profiles_and_default_to_profile_0() -> None:
    groups = '{ name: "big" profile: [ "1" ] }, { name: "all" profile: [ "0", "1" ] }, { name: "plain" }'
    config = parse_text(f"{CONFIG} instance_group [ {groups} ]")
    assert group_profiles(config, "big_0", 2) == [1]
    assert group_profiles(config, "all_3", 2) == [0, 1]
    assert group_profiles(config, "plain_4", 2) == [0]
    with pytest.raises(
        InvalidArgumentError, match="instance group 'big' specifies optimization profile '1', but"
    ):
        group_profiles(config, "big_0", 1)


def test_max_batch_is_what_every_input_accepts_under_some_allowed_profile() -> None:
    assert max_batch(INPUTS, [0]) == 8
    assert max_batch(INPUTS, [0, 1]) == 64


def test_auto_complete_fills_io_batching_and_the_dynamic_batcher() -> None:
    config = parse_text('name: "mlp"')
    autocomplete.complete(config, ENGINE)
    assert config.platform == "tensorrt_plan"
    assert config.max_batch_size == 8  # what profile 0 accepts
    assert config.HasField("dynamic_batching")
    assert [(io.name, list(io.dims)) for io in config.input] == [("INPUT__0", [16])]
    assert [(io.name, list(io.dims)) for io in config.output] == [("OUTPUT__0", [8])]


def test_auto_complete_keeps_configured_io_and_rejects_batching_a_fixed_engine() -> None:
    config = parse_text(CONFIG)
    autocomplete.complete(config, ENGINE)
    assert config.max_batch_size == 64 and len(config.input) == 1
    fixed = [EngineTensor("X", True, "FLOAT", (4,), (ProfileShapes((4,), (4,), (4,)),))]
    with pytest.raises(
        InvalidArgumentError, match="autofill failed for model 'mlp': model does not support batching"
    ):
        autocomplete.complete(parse_text('name: "mlp" max_batch_size: 4'), fixed)
    fp8 = [EngineTensor("X", True, "FP8", (4,), (ProfileShapes((4,), (4,), (4,)),))]
    with pytest.raises(UnsupportedError, match="tensor 'X' has type FP8"):
        autocomplete.complete(parse_text('name: "mlp"'), fp8)


def test_a_config_matching_the_engine_binds() -> None:
    inputs, outputs = bind(parse_text(CONFIG), ENGINE, [0, 1])
    assert inputs == {"INPUT__0": Binding("INPUT__0", "FP32", (16,))}
    assert outputs == {"OUTPUT__0": Binding("OUTPUT__0", "FP32", (8,))}


@pytest.mark.parametrize(
    ("change", "profiles", "message"),
    [
        (
            ('"INPUT__0" data_type: TYPE_FP32', '"INPUT__0" data_type: TYPE_FP16'),
            [0, 1],
            "configuration expects datatype TYPE_FP16 for input 'INPUT__0', model provides TYPE_FP32",
        ),
        (("dims: [ 16 ]", "dims: [ 15 ]"), [0, 1], "input 'INPUT__0' dims [16] in the engine don't match"),
        (
            ('"OUTPUT__0"', '"SCORES"'),
            [0, 1],
            "configuration specified output 'SCORES', which is not an output",
        ),
        (
            ("", ""),
            [0],
            "model configuration specified max-batch 64 but TensorRT engine only supports max-batch 8",
        ),
    ],
)
def test_a_config_disagreeing_with_the_engine_fails_to_load(
    change: tuple[str, str], profiles: list[int], message: str
) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        bind(parse_text(CONFIG.replace(*change)), ENGINE, profiles)
    assert message in raised.value.message
