"""The extension flags: parsed into settings, and every malformed one a usage error at start."""

from __future__ import annotations

from pathlib import Path

import pytest
from naiad.cli import parse_settings


def test_flags_reach_the_settings(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("ops a-long-enough-token-000 admin\n")
    settings = parse_settings([
        "--model-repository=/models",
        "--allow-client-shm=true",
        "--cache-config=local,size=1024",
        "--rate-limit=execution_count",
        "--rate-limit-resource=gpu:2:0",
        "--http-restricted-api=inference,health:k=v",
        "--grpc-restricted-protocol=model-repository:k=v",
        f"--auth-key-file={keys}",
        "--http-header-forward-pattern=^x-",
    ])
    assert settings.allow_client_shm
    assert settings.cache_config == ["local,size=1024"]
    assert (settings.rate_limit, settings.rate_limit_resources) == ("execution_count", ["gpu:2:0"])
    assert settings.http_restricted_apis == ["inference,health:k=v"]
    assert settings.auth_key_file == keys
    assert settings.http_header_forward_pattern == "^x-"
    assert parse_settings(["--model-repository=/models"]).allow_client_shm is False


@pytest.mark.parametrize(
    ("flag", "error"),
    [
        ("--cache-config=memcached,size=1", "unsupported cache 'memcached'"),
        ("--cache-config=redis,size=1", "Must at a minimum specify 'host' and 'port'"),
        ("--rate-limit=always", "invalid choice"),
        ("--rate-limit-resource=gpu", "expected <name>:<count>[:<device>]"),
        ("--http-restricted-api=inference", "expected <apis>:<header>=<value>"),
        ("--http-restricted-api=everything:k=v", "unknown restricted api 'everything'"),
        ("--grpc-restricted-protocol=everything:k=v", "unknown restricted protocol 'everything'"),
        (
            "--http-restricted-api=model-repository,health:k1=v1 --http-restricted-api=metadata,health:k2=v2",
            "restricted api 'health' can not be specified in multiple config groups",
        ),
        (
            "--grpc-restricted-protocol=model-repository,health:k1=v1 --grpc-restricted-protocol=metadata,health:k2=v2",
            "restricted protocol 'health' can not be specified in multiple config groups",
        ),
        ("--auth-key-file=/nonexistent/keys", "cannot read the key file"),
        ("--grpc-header-forward-pattern=(", "--grpc-header-forward-pattern"),
        ("--http-use-ssl=true", "--http-use-ssl needs --http-server-cert and --http-server-key"),
        ("--grpc-use-ssl-mutual=true", "--grpc-use-ssl needs"),
        # Triton's sentence, which qa's L0_http greps the log for (for 0 and -1024)
        ("--http-max-input-size=0", "\nError: --http-max-input-size must be greater than 0.\n"),
        ("--http-max-input-size=-1024", "\nError: --http-max-input-size must be greater than 0.\n"),
        ("--http-max-input-size=many", "expected an integer, got 'many'"),
        ("--model-namespacing=true --load-on-demand=m*", "--model-namespacing cannot be combined with"),
        ("--model-namespacing=true --model-memory-budget=1000000", "--model-namespacing cannot be combined with"),
    ],
)
def test_malformed_flags_are_usage_errors(flag: str, error: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        parse_settings(["--model-repository=/models", *flag.split(" ")])
    assert caught.value.code == 2
    assert error in capsys.readouterr().err
