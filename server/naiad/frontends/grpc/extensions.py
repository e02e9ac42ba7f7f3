"""gRPC messages of the statistics, trace and logging extensions, to and from the data plane's forms.

ModelStatistics answers the statistics extension's document parsed into ``ModelStatisticsResponse``
(its field names are the document's).  TraceSetting values are lists of strings, an empty list clearing
the key; LogSettings values are ``bool_param``, ``uint32_param`` or ``string_param``.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb

from naiad.core.errors import InvalidArgumentError


def statistics_response(document: dict[str, Any]) -> pb.ModelStatisticsResponse:
    return json_format.ParseDict(document, pb.ModelStatisticsResponse())


def trace_changes(request: pb.TraceSettingRequest) -> dict[str, list[str] | None]:
    return {key: list(setting.value) or None for key, setting in request.settings.items()}


def trace_response(settings: dict[str, Any]) -> pb.TraceSettingResponse:
    response = pb.TraceSettingResponse()
    for key, value in settings.items():
        response.settings[key].value.extend(value if isinstance(value, list) else [value])
    return response


#: The member each of Triton's log settings must set, and how its gRPC frontend words a mismatch.
_LOG_KINDS = {
    "log_info": ("bool_param", "boolean"),
    "log_warning": ("bool_param", "boolean"),
    "log_error": ("bool_param", "boolean"),
    "log_verbose_level": ("uint32_param", "int32"),
    "log_format": ("string_param", "string"),
}


def log_changes(request: pb.LogSettingsRequest) -> dict[str, Any]:
    """The settings a LogSettings request changes; a value of the wrong kind refused in Triton's gRPC
    words (``log_file``'s refusal, which Triton makes first, is the data plane's)."""
    changes: dict[str, Any] = {}
    for key, setting in request.settings.items():
        kind = setting.WhichOneof("parameter_choice")
        expected = _LOG_KINDS.get(key)
        if expected is not None and kind != expected[0] and "log_file" not in request.settings:
            raise InvalidArgumentError(f"expect {expected[1]} for '{key}'")
        if kind is not None:
            changes[key] = getattr(setting, kind)
    return changes


def log_response(settings: dict[str, Any]) -> pb.LogSettingsResponse:
    response = pb.LogSettingsResponse()
    for key, value in settings.items():
        if isinstance(value, bool):
            response.settings[key].bool_param = value
        elif isinstance(value, int):
            response.settings[key].uint32_param = value
        else:
            response.settings[key].string_param = value
    return response
