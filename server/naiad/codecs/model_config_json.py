"""``ModelConfig`` as Triton renders it in JSON: proto field names, every field printed, int64 as numbers,
fields in the order the proto declares them.

The same rendering is read by clients (``/v2/models/{m}/config``) and by Python models
(``args["model_config"]``, ``auto_complete_config``'s ``as_dict()``), so both must come from one place.
protobuf's own JSON writes 64-bit integers as strings; Triton writes numbers, and model code does
arithmetic on ``dims`` and ``max_batch_size``, so every int64 field is turned back into an ``int``.
Python's protobuf also prints the fields left at their defaults after the others, where Triton's (C++)
printer keeps the declared order: tools that read the text (NVIDIA's ``L0_config_json`` greps
``"4294967296":{"timeout_action":"REJECT",...}``) see Triton's order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

#: Fields newer than Triton 2.51's ``model_config.proto`` (tritonclient's is newer), printed only when
#: set: 2.51 does not know them, so its text has none at their defaults.
_NEWER_THAN_251 = {"inference.ModelEnsembling": frozenset({"max_inflight_requests"})}

_INT64_TYPES = {
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED64,
}


def config_to_dict(config: Message) -> dict[str, Any]:
    """Triton's JSON rendering of ``config`` as a dict (ready for ``json.dumps``)."""
    raw = json_format.MessageToDict(
        config,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
    )
    return _ints(raw, cast(Descriptor, config.DESCRIPTOR))


def _ints(value: dict[str, Any], descriptor: Descriptor) -> dict[str, Any]:
    for name in _NEWER_THAN_251.get(descriptor.full_name, ()):
        if value.get(name) in (0, "0"):
            del value[name]
    if len(value) > 1:
        order = {field.name: index for index, field in enumerate(descriptor.fields)}
        value = dict(sorted(value.items(), key=lambda kv: order.get(kv[0], len(order))))
    for key, item in value.items():
        field = descriptor.fields_by_name.get(key)
        if field is None:
            continue
        if field.message_type is not None:
            if field.message_type.GetOptions().map_entry:
                value_field = field.message_type.fields_by_name["value"]
                if value_field.message_type is not None:
                    for k in item:
                        item[k] = _ints(item[k], value_field.message_type)
                elif value_field.type in _INT64_TYPES:
                    value[key] = {k: int(v) for k, v in item.items()}
            elif isinstance(item, list):
                value[key] = [_ints(v, field.message_type) for v in item]
            elif isinstance(item, Mapping):
                value[key] = _ints(dict(item), field.message_type)
        elif field.type in _INT64_TYPES:
            value[key] = [int(v) for v in item] if isinstance(item, list) else int(item)
    return value
