"""The ``--grpc-*`` flags reach grpcio with Triton's names and defaults."""

from __future__ import annotations

from typing import Any

from naiad.cli import parse_settings
from naiad.frontends.grpc.server import channel_options, listen_address
from naiad.frontends.grpc.servicer import metadata_headers


def test_defaults_are_tritons() -> None:
    options = dict(channel_options(parse_settings(["--model-repository=/m"])))
    assert options == {
        "grpc.max_receive_message_length": 2**31 - 1,
        "grpc.max_send_message_length": 2**31 - 1,
        "grpc.keepalive_time_ms": 7_200_000,
        "grpc.keepalive_timeout_ms": 20_000,
        "grpc.keepalive_permit_without_calls": 0,
        "grpc.http2.max_pings_without_data": 2,
        "grpc.http2.min_ping_interval_without_data_ms": 300_000,
        "grpc.http2.max_ping_strikes": 2,
        "grpc.so_reuseport": 0,
    }


def test_flags_set_the_options() -> None:
    settings = parse_settings([
        "--model-repository=/m",
        "--grpc-keepalive-time=1000",
        "--grpc-keepalive-timeout=500",
        "--grpc-keepalive-permit-without-calls=1",
        "--grpc-http2-max-pings-without-data=0",
        "--grpc-http2-min-recv-ping-interval-without-data=10",
        "--grpc-http2-max-ping-strikes=5",
        "--grpc-max-connection-age=60000",
        "--grpc-max-connection-age-grace=5000",
        "--grpc-max-message-size=1024",
        "--reuse-grpc-port=true",
        "--grpc-infer-response-compression-level=LOW",
    ])
    options = dict(channel_options(settings))
    assert options["grpc.keepalive_time_ms"] == 1000
    assert options["grpc.keepalive_timeout_ms"] == 500
    assert options["grpc.keepalive_permit_without_calls"] == 1
    assert options["grpc.http2.max_pings_without_data"] == 0
    assert options["grpc.http2.min_ping_interval_without_data_ms"] == 10
    assert options["grpc.http2.max_ping_strikes"] == 5
    assert options["grpc.max_connection_age_ms"] == 60000
    assert options["grpc.max_connection_age_grace_ms"] == 5000
    assert options["grpc.max_receive_message_length"] == 1024
    assert options["grpc.so_reuseport"] == 1
    assert settings.grpc_infer_response_compression_level == "low"


def test_listen_addresses() -> None:
    assert listen_address("0.0.0.0", 8001) == "0.0.0.0:8001"
    assert listen_address("::", 8001) == "[::]:8001"
    assert listen_address("[::1]", 8001) == "[::1]:8001"


class _Context:
    def invocation_metadata(self) -> Any:
        return (("x-user", "alice"), ("trace-bin", b"\x00"), ("user-agent", "grpc-python"))


def test_metadata_becomes_request_headers() -> None:
    assert metadata_headers(_Context()) == {"x-user": "alice", "user-agent": "grpc-python"}  # type: ignore[arg-type]
