"""``/config``'s JSON text as Triton's C++ printer writes it: every field, 64-bit integers as numbers,
fields in the order the proto declares them (tools grep the text: NVIDIA's ``L0_config_json``)."""

from __future__ import annotations

import json

from google.protobuf import text_format
from naiad.codecs.model_config_json import config_to_dict
from tritonclient.grpc import model_config_pb2 as mc

CONFIG = """
name: "m"
backend: "python"
max_batch_size: 1
dynamic_batching {
  priority_levels: 18446744073709551615
  default_priority_level: 4294967295
  priority_queue_policy { key: 4294967296 value {
    timeout_action: REJECT default_timeout_microseconds: 18446744073709551615
    allow_timeout_override: true max_queue_size: 10 } }
}
"""


def _text(config: mc.ModelConfig) -> str:
    return json.dumps(config_to_dict(config), separators=(",", ":"))


def test_fields_keep_their_declared_order_whether_set_or_default() -> None:
    text = _text(text_format.Parse(CONFIG, mc.ModelConfig()))
    assert text.startswith(
        '{"name":"m","platform":"","backend":"python","runtime":"","max_batch_size":1,"input":[]'
    )
    # REJECT is the enum's default: Python's printer would put it last, Triton's keeps it first
    policy = (
        '"4294967296":{"timeout_action":"REJECT","default_timeout_microseconds":18446744073709551615,'
        '"allow_timeout_override":true,"max_queue_size":10}'
    )
    assert policy in text
    assert '"dynamic_batching":{"preferred_batch_size":[],"max_queue_delay_microseconds":0,' in text
    assert '"priority_levels":18446744073709551615,"default_priority_level":4294967295,' in text


def test_64_bit_integers_are_numbers_everywhere() -> None:
    config = text_format.Parse(
        'name: "m" input [{ name: "x" dims: [ -1, 9007199254740993 ] }]', mc.ModelConfig()
    )
    rendered = config_to_dict(config)
    assert rendered["input"][0]["dims"] == [-1, 9007199254740993]
    assert rendered["max_batch_size"] == 0


def test_fields_newer_than_triton_2_51_show_only_when_set() -> None:
    """(2.51's proto has no ``max_inflight_requests``: its ``/config`` of an ensemble shows none.)"""
    text = (
        'name: "e" platform: "ensemble" ensemble_scheduling { step [{ model_name: "m" model_version: -1 }] }'
    )
    config = text_format.Parse(text, mc.ModelConfig())
    assert "max_inflight_requests" not in config_to_dict(config)["ensemble_scheduling"]
    config.ensemble_scheduling.max_inflight_requests = 4
    assert config_to_dict(config)["ensemble_scheduling"]["max_inflight_requests"] == 4
