"""gRPC messages of the statistics, trace and logging extensions, to and from the data plane's forms.

ModelStatistics answers the statistics extension's document parsed into ``ModelStatisticsResponse``
(its field names are the document's).  TraceSetting values are lists of strings, an empty list clearing
the key; LogSettings values are ``bool_param``, ``uint32_param`` or ``string_param``.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb


def statistics_response(document: dict[str, Any]) -> pb.ModelStatisticsResponse:
    return json_format.ParseDict(document, pb.ModelStatisticsResponse())


def trace_changes(request: pb.TraceSettingRequest) -> dict[str, list[str] | None]:
    return {key: list(setting.value) or None for key, setting in request.settings.items()}


def trace_response(settings: dict[str, Any]) -> pb.TraceSettingResponse:
    response = pb.TraceSettingResponse()
    for key, value in settings.items():
        response.settings[key].value.extend(value if isinstance(value, list) else [value])
    return response


def log_changes(request: pb.LogSettingsRequest) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    for key, setting in request.settings.items():
        kind = setting.WhichOneof("parameter_choice")
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
