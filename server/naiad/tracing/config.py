"""``--trace-config``: tritonserver's trace flags, parsed into the settings a server starts with.

Global settings are ``<setting>=<value>`` (``level``, ``rate``, ``count``, ``mode``); mode-specific
ones are ``<mode>,<setting>=<value>``: ``triton,file=``, ``triton,log-frequency=``,
``opentelemetry,url=``, ``opentelemetry,resource=<key>=<value>`` (repeatable) and the batch span
processor's ``opentelemetry,bsp_max_queue_size=``, ``bsp_schedule_delay=`` (ms) and
``bsp_max_export_batch_size=``.  ``level`` may be given several times (``TIMESTAMPS`` and ``TENSORS``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")
#: The other spellings Triton's parser takes for a level (any case): older releases' MIN and MAX, booleans.
LEVEL_ALIASES = {
    "FALSE": "OFF",
    "TRUE": "TIMESTAMPS",
    "ON": "TIMESTAMPS",
    "MIN": "TIMESTAMPS",
    "MAX": "TIMESTAMPS",
}
MODES = ("triton", "opentelemetry")
#: Where OTLP/HTTP spans go unless ``opentelemetry,url=`` says otherwise (Triton's default).
DEFAULT_OTLP_URL = "http://localhost:4318/v1/traces"


@dataclass(frozen=True, slots=True)
class OpenTelemetryConfig:
    """The exporter and batch span processor settings (Triton's defaults)."""

    url: str = DEFAULT_OTLP_URL
    resource: dict[str, str] = field(default_factory=lambda: {"service.name": "triton-inference-server"})
    bsp_max_queue_size: int = 2048
    bsp_schedule_delay_ms: int = 5000
    bsp_max_export_batch_size: int = 512


@dataclass(frozen=True, slots=True)
class TraceConfig:
    """The trace settings at start: what ``null`` in a settings update reverts a global key to."""

    level: tuple[str, ...] = ("OFF",)
    rate: int = 1000
    count: int = -1
    log_frequency: int = 0
    file: str = ""
    mode: str = "triton"
    opentelemetry: OpenTelemetryConfig = field(default_factory=OpenTelemetryConfig)


def parse_trace_config(items: Sequence[str]) -> TraceConfig:
    """Fold ``--trace-config`` items into a :class:`TraceConfig`; ``ValueError`` names the bad one."""
    levels: list[str] = []
    config = TraceConfig()
    otel = OpenTelemetryConfig()
    for item in items:
        mode, comma, rest = item.partition(",")
        if not comma:
            mode, rest = "", item
        key, eq, value = rest.partition("=")
        key = key.strip().replace("-", "_")
        if not eq:
            raise ValueError(f"--trace-config expects [<mode>,]<setting>=<value>, got '{item}'")
        if mode == "":
            if key == "level":
                level = value.strip().upper()
                level = LEVEL_ALIASES.get(level, level)
                if level not in LEVELS:
                    raise ValueError(f"invalid --trace-config level '{value}': expected {', '.join(LEVELS)}")
                levels.append(level)
            elif key == "mode":
                if value not in MODES:
                    raise ValueError(f"invalid --trace-config mode '{value}': expected {' or '.join(MODES)}")
                config = replace(config, mode=value)
            elif key == "rate":
                config = replace(config, rate=_integer(key, value, 0))
            elif key == "count":
                config = replace(config, count=_integer(key, value, -1))
            else:
                raise ValueError(f"unknown --trace-config setting '{key}'")
        elif mode == "triton" and key == "file":
            config = replace(config, file=value)
        elif mode == "triton" and key == "log_frequency":
            config = replace(config, log_frequency=_integer(key, value, 0))
        elif mode == "opentelemetry" and key == "url":
            otel = replace(otel, url=value)
        elif mode == "opentelemetry" and key == "resource":
            name, has_value, attribute = value.partition("=")
            if not has_value:
                raise ValueError(f"--trace-config opentelemetry,resource wants <key>=<value>, not '{value}'")
            otel = replace(otel, resource={**otel.resource, name: attribute})
        elif mode == "opentelemetry" and key == "bsp_schedule_delay":
            otel = replace(otel, bsp_schedule_delay_ms=_integer(key, value, 0))
        elif mode == "opentelemetry" and key == "bsp_max_queue_size":
            otel = replace(otel, bsp_max_queue_size=_integer(key, value, 1))
        elif mode == "opentelemetry" and key == "bsp_max_export_batch_size":
            otel = replace(otel, bsp_max_export_batch_size=_integer(key, value, 1))
        else:
            raise ValueError(f"unknown --trace-config setting '{mode},{key}'")
    return replace(config, level=_level(levels), opentelemetry=otel)


def _level(levels: list[str]) -> tuple[str, ...]:
    chosen = tuple(dict.fromkeys(level for level in levels if level != "OFF"))
    return chosen or ("OFF",)


def _integer(key: str, value: str, minimum: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"--trace-config {key} expects an integer, got '{value}'") from None
    if number < minimum:
        raise ValueError(f"--trace-config {key} must be >= {minimum}, got {number}")
    return number
