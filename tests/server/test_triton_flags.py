"""The rest of tritonserver's command line (``naiad.triton_flags``): a Triton deployment's flags start Naiad.

Deprecated flags mean what they mean in Triton 2.51 (checked side by side: ``--strict-model-config``,
``--response-cache-byte-size`` and the ``--trace-*`` flags with its warnings); knobs of Triton's C++
internals are checked and named in the log; frontends Naiad does not have are refused when turned on.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
from naiad.cli import parse_settings
from naiad.tracing.config import parse_trace_config
from tritonclient.utils import InferenceServerException

from tests.support.modes import frontend_workers  # noqa: F401  (fixture: both server modes)
from tests.support.server import EXAMPLES, ServerProcess, free_port


def test_a_triton_command_line_reaches_the_settings(capsys: pytest.CaptureFixture[str]) -> None:
    settings = parse_settings(
        [
            "--model-repository=/models",
            "--id=edge-7",
            "--model-config-name=h100",
            "--model-load-retry-count=2",
            "--model-load-gpu-limit=0:0.8",
            "--model-load-gpu-limit=1:0.5",
            "--reuse-http-port=true",
            "--strict-model-config=true",
            "--response-cache-byte-size=4096",
            "--trace-file=/tmp/trace.json",
            "--trace-level=MIN",
            "--trace-level=tensors",
            "--trace-rate=5",
            "--trace-config=count=7",
            "--http-thread-count=16",
            "--pinned-memory-pool-byte-size=268435456",
            "--cuda-memory-pool-byte-size=0:67108864",
            "--host-policy=gpu_0,numa-node=0",
            "--buffer-manager-thread-count=4",
            "--allow-sagemaker=false",
            "--grpc-infer-thread-count=128",
        ]
    )
    assert settings.server_id == "edge-7"
    assert settings.model_config_name == "h100"
    assert settings.model_load_retry_count == 2
    assert settings.model_load_gpu_limit == {0: 0.8, 1: 0.5}
    assert settings.reuse_http_port is True
    assert settings.disable_auto_complete_config is True
    assert settings.cache_config == ["local,size=4096"]
    # the deprecated trace flags go first, so --trace-config overrides them, as in Triton
    assert settings.trace_config == [
        "level=MIN",
        "level=tensors",
        "triton,file=/tmp/trace.json",
        "rate=5",
        "count=7",
    ]
    # MIN (and MAX, ON, TRUE) is Triton's older name of TIMESTAMPS; levels add up
    assert parse_trace_config(settings.trace_config).level == ("TIMESTAMPS", "TENSORS")
    assert settings.inert_flags == [
        "--http-thread-count",
        "--buffer-manager-thread-count",
        "--pinned-memory-pool-byte-size",
        "--cuda-memory-pool-byte-size",
        "--host-policy",
        "--grpc-infer-thread-count",
    ]
    err = capsys.readouterr().err
    assert (
        "Warning: '--strict-model-config' has been deprecated! Please use '--disable-auto-complete-config'"
        in err
    )
    assert "Warning: '--response-cache-byte-size' has been deprecated!" in err
    assert "'--cache-config=local,size=4096'" in err
    assert "Warning: '--trace-rate' has been deprecated and will be removed in future releases." in err


def test_defaults_change_nothing() -> None:
    settings = parse_settings(["--model-repository=/models"])
    assert (settings.server_id, settings.model_config_name, settings.model_load_retry_count) == (
        "triton",
        "",
        0,
    )
    assert (settings.model_load_gpu_limit, settings.reuse_http_port, settings.inert_flags) == ({}, False, [])
    assert settings.disable_auto_complete_config is False
    assert settings.cache_config == [] and settings.trace_config == []
    # --strict-model-config=false leaves auto-complete on, and never turns off --disable-auto-complete-config
    assert (
        parse_settings(["--model-repository=/m", "--strict-model-config=false"]).disable_auto_complete_config
        is False
    )
    both = ["--model-repository=/m", "--disable-auto-complete-config", "--strict-model-config=false"]
    assert parse_settings(both).disable_auto_complete_config is True


@pytest.mark.parametrize(
    ("flag", "error"),
    [
        # Triton's sentences
        ("--model-config-name=", "\nError: empty argument for --model-config-name\n"),
        (
            "--response-cache-byte-size=1024 --cache-config=local,size=1024",
            "\nError: Incompatible flags --response-cache-byte-size and --cache-config both provided. "
            "Please provide one or the other.\n",
        ),
        ("--allow-sagemaker=true", "--allow-sagemaker=true: Naiad has no SageMaker frontend"),
        ("--allow-vertex-ai=true", "--allow-vertex-ai=true: Naiad has no Vertex AI frontend"),
        ("--cuda-memory-pool-byte-size=67108864", "expected <integer>:<int>, got '67108864'"),
        ("--sagemaker-safe-port-range=8000", "expected <integer>-<int>, got '8000'"),
        ("--model-load-gpu-limit=0:-0.5", "the fraction must not be negative, got -0.5"),
        ("--model-load-gpu-limit=0.5", "expected <integer>:<float>, got '0.5'"),
        ("--host-policy=gpu_0", "--host-policy option format is '<policy name>,<setting>=<value>'"),
        ("--http-thread-count=many", "expected an integer, got 'many'"),
        ("--min-supported-compute-capability=seven", "expected a number, got 'seven'"),
        ("--model-load-retry-count=-1", "--model-load-retry-count must be 0 or more"),
        ("--trace-level=LOUD", "invalid --trace-config level 'LOUD'"),
        # (a flag of Triton releases after 2.51: qa/L0_sequence_stress starts no server with these)
        ("--grpc-infer-thread-count=1", "invalid argument for --grpc_infer_thread_count. Must be in the range 2"),
        ("--grpc-infer-thread-count=129", "invalid argument for --grpc_infer_thread_count. Must be in the range"),
        ("--http-port=-47", "argument --http-port: port must be between 0 and 65535, got -47"),
        ("--grpc-port=65536 --allow-http=false", "argument --grpc-port: port must be between 0 and 65535, got 65536"),
        ("--metrics-port=http", "argument --metrics-port: expected a port number, got 'http'"),
    ],
)
def test_malformed_values_are_usage_errors(flag: str, error: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        parse_settings(["--model-repository=/models", *flag.split(" ")])
    assert caught.value.code == 2
    assert error in capsys.readouterr().err


def test_a_frontend_turned_off_takes_any_port_number_as_triton_does() -> None:
    """NVIDIA's ``L0_socket`` starts servers with ``--http-port -47 --allow-http 0`` (and the gRPC twin)."""
    settings = parse_settings(["--model-repository=/m", "--http-port=-47", "--allow-http=0", "--grpc-port=70000",
                               "--allow-grpc=false", "--metrics-port=-1", "--allow-metrics=false"])  # fmt: skip
    assert (settings.allow_http, settings.allow_grpc, settings.allow_metrics) == (False, False, False)


def test_the_server_is_named_and_traced_as_its_flags_say(frontend_workers: int, tmp_path: Path) -> None:  # noqa: F811
    """``--id`` names the server in its metadata over both protocols; the deprecated trace flags set
    the trace settings; the inert knobs are named in the log."""
    trace_file = tmp_path / "trace.json"
    args = [
        "--id=edge-7",
        "--trace-level=TIMESTAMPS",
        "--trace-rate=3",
        f"--trace-file={trace_file}",
        "--http-thread-count=8",
    ]
    with ServerProcess([EXAMPLES], args, frontend_workers=frontend_workers) as server:
        with urllib.request.urlopen(f"http://{server.http_url}/v2") as answer:
            assert json.loads(answer.read())["name"] == "edge-7"
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            assert client.get_server_metadata().name == "edge-7"
            settings = client.get_trace_settings(as_json=True)["settings"]
        assert settings["trace_level"]["value"] == ["TIMESTAMPS"]
        assert settings["trace_rate"]["value"] == ["3"]
        assert settings["trace_file"]["value"] == [str(trace_file)]
        assert "--http-thread-count has no effect in Naiad" in server.log()


def test_servers_share_an_http_port_with_reuse_http_port() -> None:
    """``--reuse-http-port=true`` on each: several servers listen on one HTTP port and the kernel spreads
    the connections between them, here one in one process and one with two frontend workers (which
    share their port anyway): new connections reach both servers, told apart by their ``--id``."""
    port = free_port()
    first = ServerProcess([EXAMPLES], ["--reuse-http-port=true", "--id=first"])
    second = ServerProcess([EXAMPLES], ["--reuse-http-port=true", "--id=second"], frontend_workers=2)
    first.http_port = second.http_port = port
    with first, second:
        with grpcclient.InferenceServerClient(second.grpc_url) as client:  # (its own gRPC port)
            deadline = time.monotonic() + 60
            while not (_answers(client.is_server_ready) and _listeners(port) >= 3):
                assert time.monotonic() < deadline, second.log()
                time.sleep(0.1)
        names = set()
        for _ in range(60):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2") as answer:
                names.add(json.loads(answer.read())["name"])
        assert names == {"first", "second"}


def _answers(call: Callable[[], bool]) -> bool:
    try:
        return call()
    except InferenceServerException:
        return False


def _listeners(port: int) -> int:
    """How many sockets listen on ``port`` (``/proc/net/tcp``: state 0A)."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port and fields[3] == "0A":
            count += 1
    return count


#: Every flag of ``tritonserver --help`` (Triton 2.51) but ``--help``, with a value it takes (``None``: a
#: switch; the certificate flags with their TLS switch off: they only name files).
TRITON_2_51_FLAGS = {
    "allow-cpu-metrics": "true", "allow-gpu-metrics": "false", "allow-grpc": "true", "allow-http": "true",
    "allow-metrics": "true", "allow-sagemaker": "false", "allow-vertex-ai": "false",
    "backend-config": "python,shm-default-byte-size=1048576", "backend-directory": "/opt/tritonserver/backends",
    "buffer-manager-thread-count": "2", "cache-config": "local,size=1048576",
    "cache-directory": "/opt/tritonserver/caches", "cuda-memory-pool-byte-size": "0:67108864",
    "cuda-virtual-address-size": "0:1073741824", "disable-auto-complete-config": None,
    "enable-peer-access": "true", "exit-on-error": "true", "exit-timeout-secs": "30",
    "grpc-address": "0.0.0.0", "grpc-header-forward-pattern": "^x-", "grpc-http2-max-ping-strikes": "2",
    "grpc-http2-max-pings-without-data": "2", "grpc-http2-min-recv-ping-interval-without-data": "300000",
    "grpc-infer-allocation-pool-size": "8", "grpc-infer-response-compression-level": "none",
    "grpc-keepalive-permit-without-calls": "false", "grpc-keepalive-time": "7200000",
    "grpc-keepalive-timeout": "20000", "grpc-max-connection-age": "60000", "grpc-max-connection-age-grace": "1000",
    "grpc-port": "8001", "grpc-restricted-protocol": "model-repository:k=v", "grpc-root-cert": "/tls/ca.pem",
    "grpc-server-cert": "/tls/cert.pem", "grpc-server-key": "/tls/key.pem", "grpc-use-ssl": "false",
    "grpc-use-ssl-mutual": "false", "host-policy": "gpu_0,cpu-cores=0-7", "http-address": "0.0.0.0",
    "http-header-forward-pattern": "^x-", "http-port": "8000", "http-restricted-api": "shared-memory:k=v",
    "http-thread-count": "8", "id": "triton", "load-model": "m", "log-error": "true", "log-file": "/tmp/t.log",
    "log-format": "default", "log-info": "true", "log-verbose": "0", "log-warning": "true",
    "metrics-address": "0.0.0.0", "metrics-config": "summary_latencies=true", "metrics-interval-ms": "2000",
    "metrics-port": "8002", "min-supported-compute-capability": "6.0", "model-config-name": "h100",
    "model-control-mode": "explicit", "model-load-gpu-limit": "0:0.9", "model-load-retry-count": "1",
    "model-load-thread-count": "4", "model-namespacing": "false", "model-repository": "/models",
    "model-store": "/models", "pinned-memory-pool-byte-size": "268435456", "rate-limit": "off",
    "rate-limit-resource": "R1:10:0", "repoagent-directory": "/opt/tritonserver/repoagents",
    "repository-poll-secs": "15", "response-cache-byte-size": "1024", "reuse-grpc-port": "false",
    "reuse-http-port": "false", "sagemaker-port": "8080", "sagemaker-safe-port-range": "8000-8002",
    "sagemaker-thread-count": "8", "strict-model-config": "false", "strict-readiness": "true",
    "trace-config": "rate=100", "trace-count": "-1", "trace-file": "/tmp/trace.json", "trace-level": "OFF",
    "trace-log-frequency": "0", "trace-rate": "1000", "vertex-ai-default-model": "m", "vertex-ai-port": "8080",
    "vertex-ai-thread-count": "8",
}  # fmt: skip


def test_every_flag_of_tritonserver_2_51_is_taken(capsys: pytest.CaptureFixture[str]) -> None:
    """A Triton 2.51 command line starts Naiad: each of its flags parses (``--response-cache-byte-size``
    and ``--cache-config``, which Triton refuses together, each on its own)."""
    assert len(TRITON_2_51_FLAGS) == 86
    argv = [
        f"--{flag}" if value is None else f"--{flag}={value}"
        for flag, value in TRITON_2_51_FLAGS.items()
        if flag != "response-cache-byte-size"
    ]
    settings = parse_settings(argv)
    assert settings.model_control_mode.value == "explicit" and settings.load_models == ["m"]
    assert settings.disable_auto_complete_config and settings.model_config_name == "h100"
    assert parse_settings(["--model-repository=/m", "--response-cache-byte-size=1024"]).cache_config == [
        "local,size=1024"
    ]
    assert "Error" not in capsys.readouterr().err
