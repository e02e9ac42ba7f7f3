"""A bad model beside healthy ones, strict readiness, and SIGTERM draining in-flight work."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.support.http import RawClient
from tests.support.models import IDENTITY_PY, write_model
from tests.support.server import EXAMPLES, ServerProcess, exit_lines, in_order

SLOW_PY = """
import pathlib, time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.dir = pathlib.Path(args["model_repository"])

    def execute(self, requests):
        (self.dir / "started").write_text("1")
        time.sleep(1.5)
        return [pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]) for r in requests]

    def finalize(self):
        (self.dir / "finalized").write_text("1")
"""

IO = """
    backend: "python"
    input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


@contextlib.contextmanager
def _raw(server: ServerProcess) -> Iterator[RawClient]:
    client = RawClient(server.http_url)
    try:
        yield client
    finally:
        client.close()


def _broken_repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    shutil.copytree(EXAMPLES / "add_sub", repo / "add_sub")
    write_model(
        repo,
        "bad_config",
        "backend: \"python\"\ninput [ { name: 'X' data_type: TYPE_NOPE dims: [1] } ]\n",
        "",
    )
    write_model(repo, "bad_python", IO, "this is not python (\n")
    write_model(repo, "no_versions", IO)
    shutil.rmtree(repo / "no_versions" / "1")
    write_model(repo, "name_mismatch", 'name: "other"\n' + IO, IDENTITY_PY)
    return repo


def _wait_index(raw: RawClient, names: set[str], timeout: float = 30) -> dict[str, dict[str, str]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        entries = {e["name"]: e for e in raw.request("POST", "/v2/repository/index").json()}
        if names <= set(entries) and all(entries[n].get("state") in ("READY", "UNAVAILABLE") for n in names):
            return entries
        time.sleep(0.05)
    raise AssertionError("models did not settle")


def test_bad_models_are_unavailable_with_reasons_and_others_serve(tmp_path: Path) -> None:
    repo = _broken_repo(tmp_path)
    names = {"add_sub", "bad_config", "bad_python", "no_versions", "name_mismatch"}
    with ServerProcess([repo], ["--exit-on-error=false"], wait_ready=False) as server, _raw(server) as raw:
        entries = _wait_index(raw, names)
        assert entries["add_sub"]["state"] == "READY", entries["add_sub"]
        assert entries["bad_config"]["state"] == "UNAVAILABLE"
        assert "TYPE_NOPE" in entries["bad_config"]["reason"]
        assert entries["bad_python"]["state"] == "UNAVAILABLE"
        assert "SyntaxError" in entries["bad_python"]["reason"]
        assert "at least one version must be available" in entries["no_versions"]["reason"]
        assert "directory name must equal model name" in entries["name_mismatch"]["reason"]
        # strict readiness: not ready while a model that should be loaded is not
        assert raw.request("GET", "/v2/health/ready").status == 400
        assert raw.request("GET", "/v2/health/live").status == 200
        body = {
            "inputs": [
                {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]},
                {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [1, 1, 1, 1]},
            ]
        }
        assert raw.post_json("/v2/models/add_sub/infer", body).status == 200
        response = raw.post_json("/v2/models/bad_python/infer", body)
        assert response.status == 404
        assert response.error == "Request for unknown model: 'bad_python' has no available versions"


@pytest.mark.parametrize(
    "args",
    [
        [],
        [
            "--model-control-mode=explicit",
            "--load-model=add_sub",
            "--load-model=bad_integer",
            "--load-model=bad_word",
        ],
        ["--frontend-workers=2"],
    ],
    ids=["none", "explicit", "workers"],
)
def test_a_model_that_fails_to_load_at_start_ends_the_server(tmp_path: Path, args: list[str]) -> None:
    """``--exit-on-error`` is true by default, as Triton's: the server exits 1 with Triton's words, the
    config's fault said as Triton's parser says it, and leaves no process of its session behind."""
    repo = _broken_repo(tmp_path)
    write_model(
        repo, "bad_integer", IO + "dynamic_batching { max_queue_delay_microseconds: -5 }\n", IDENTITY_PY
    )
    write_model(
        repo, "bad_word", IO + 'dynamic_batching { max_queue_delay_microseconds: "soon" }\n', IDENTITY_PY
    )
    server = ServerProcess([repo], args)
    process = subprocess.Popen(
        server.command(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    output, _ = process.communicate(timeout=90)
    assert process.returncode == 1, output
    assert "creating server: Internal - failed to load all models" in output
    assert (
        f"failed to read text proto from {repo / 'bad_integer' / 'config.pbtxt'}: Error parsing text-format "
        "inference.ModelConfig: 5:50: Expected integer, got: -"
    ) in output
    # and the parser's own line, as Triton's parser writes it: not quoted, its quotes not escaped
    assert re.search(
        r"^E.* config\.py:\d+\] Error parsing text-format inference\.ModelConfig: 5:50: "
        r'Expected integer, got: "soon"$',
        output,
        re.MULTILINE,
    ), output
    with pytest.raises(ProcessLookupError):
        os.killpg(process.pid, 0)  # no model process of the server's session left
    # Triton's load lines: each version's start, each failed version's reason, then the model's failure
    assert "loading: add_sub:1" in output
    if "--model-control-mode=explicit" not in args:
        assert "failed to load 'bad_python' version 1: " in output and "failed to load 'bad_python'\"" in output
    # and Triton's model table: the versions the loads tried (a config that does not parse has none)
    rows = [line for line in output.splitlines() if line.startswith("| ")]
    assert re.fullmatch(r"\| Model +\| Version +\| Status +\|", rows[0]), rows
    assert any(re.fullmatch(r"\| add_sub +\| 1 +\| READY +\|", row) for row in rows), rows
    assert not any(row.startswith("| bad_integer ") for row in rows)


def test_readiness_not_strict(tmp_path: Path) -> None:
    repo = _broken_repo(tmp_path)
    with ServerProcess([repo], ["--strict-readiness=false", "--exit-on-error=false"]) as server, _raw(server) as raw:
        assert raw.request("GET", "/v2/health/ready").status == 200


def test_sigterm_drains_in_flight_requests_and_exits_zero(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    model_dir = write_model(repo, "slow", IO, SLOW_PY)
    with ServerProcess([repo]) as server:
        _drain_one_request(server, model_dir)


def _drain_one_request(server: ServerProcess, model_dir: Path) -> None:
    result: dict[str, object] = {}

    def infer() -> None:
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=30)
        inp = httpclient.InferInput("INPUT0", [1], "INT32")
        inp.set_data_from_numpy(np.array([42], dtype=np.int32))
        try:
            result["value"] = client.infer("slow", [inp]).as_numpy("OUTPUT0").tolist()
        except Exception as exc:
            result["error"] = exc
        finally:
            client.close()

    thread = threading.Thread(target=infer)
    thread.start()
    deadline = time.monotonic() + 20
    while not (model_dir / "started").exists():
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.02)
    assert server.process is not None
    server.process.send_signal(signal.SIGTERM)
    thread.join(30)
    code = server.stop()
    assert result == {"value": [42]}, server.log()
    assert code == 0
    assert (model_dir / "finalized").exists()
    assert in_order(server.log(), exit_lines("slow")), server.log()  # tritonserver's words, in its order


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["--http-port=abc"], "argument --http-port: expected a port number, got 'abc'"),
        (["--strict-readiness=maybe"], "argument --strict-readiness: expected true or false, got 'maybe'"),
        (["--model-control-mode=sometimes"], "argument --model-control-mode: invalid choice: 'sometimes'"),
    ],
)
def test_cli_usage_errors_name_the_flag(args: list[str], message: str) -> None:
    import subprocess
    import sys

    completed = subprocess.run(
        [sys.executable, "-m", "naiad", "serve", f"--model-repository={EXAMPLES}", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert completed.returncode == 2
    assert message in completed.stderr


VERSIONED_INIT_PY = """
import time


class TritonPythonModel:
    def initialize(self, args):
        version = int(args["model_version"])
        time.sleep(1.5 if version == 2 else 0)
        if version == 3:
            raise RuntimeError("weights are corrupt")

    def execute(self, requests):
        return []
"""


def test_strict_readiness_holds_while_a_serving_model_loads_or_fails_in_place(tmp_path: Path) -> None:
    """As Triton's: a model that serves a READY version keeps the server ready while other versions
    load, or fail to load, next to it (an operator's in-place rollout must not empty a Service)."""
    repo = tmp_path / "repo"
    config = 'name: "m"\nversion_policy: { specific: { versions: [1] } }\n' + IO
    for version in (1, 2, 3):
        write_model(repo, "m", config, VERSIONED_INIT_PY, version=version)
    args = ["--model-control-mode=explicit", "--load-model=m", "--strict-readiness=true"]
    with ServerProcess([repo], args) as server, _raw(server) as raw, _raw(server) as probe:
        base = raw.request("GET", "/v2/models/m/config").json()
        samples: list[int] = []
        for versions in ([1, 2], [1, 3]):
            document = {**base, "version_policy": {"specific": {"versions": versions}}}
            load = {"parameters": {"config": json.dumps(document)}}
            loader = threading.Thread(
                target=lambda d=load: raw_post(server, "/v2/repository/models/m/load", d)
            )
            loader.start()
            while loader.is_alive():
                samples.append(probe.request("GET", "/v2/health/ready").status)
                time.sleep(0.05)
            loader.join()
        index = raw.post_json("/v2/repository/index", {}).json()
        assert {e["version"]: e["state"] for e in index if e.get("version")}["1"] == "READY"
        assert set(samples) == {200}, samples
        assert raw.request("GET", "/v2/health/ready").status == 200


def raw_post(server: ServerProcess, path: str, document: Any) -> None:
    client = RawClient(server.http_url)
    try:
        client.post_json(path, document)
    finally:
        client.close()


def test_a_model_py_that_fails_to_import_is_reported_as_triton_reports_it(tmp_path: Path) -> None:
    """The load API's answer, as Triton 2.51 gives it (compared side by side): the status its stub
    reports (Internal), the exception, and for a model's own frames where it was raised; a syntax
    error without frames; a model whose config never polled is unknown, not versionless."""
    write_model(tmp_path, "syntax", IO, "def oops(:\n")
    write_model(tmp_path, "raising", IO, 'raise RuntimeError("module level")\n')
    write_model(tmp_path, "misnamed", IO.replace('backend: "python"', 'name: "other"\n    backend: "python"'),
                IDENTITY_PY)
    with ServerProcess([tmp_path], ["--model-control-mode=explicit"]) as server, _raw(server) as raw:
        refused = raw.request("POST", "/v2/repository/models/syntax/load")
        assert (refused.status, refused.error) == (
            400,
            "load failed for model 'syntax': version 1 is at UNAVAILABLE state: Internal: SyntaxError: "
            "invalid syntax (model.py, line 1);\n",
        )
        refused = raw.request("POST", "/v2/repository/models/raising/load")
        assert refused.status == 400
        assert refused.error.startswith(
            "load failed for model 'raising': version 1 is at UNAVAILABLE state: Internal: RuntimeError: "
            f"module level\n\nAt:\n  {tmp_path}/raising/1/model.py(1): <module>\n"
        )
        refused = raw.request("POST", "/v2/repository/models/misnamed/load")
        # (500, as Triton: the repository's file is at fault, not the request)
        assert (refused.status, refused.error) == (500, "failed to load 'misnamed', failed to poll from model repository")
        assert raw.request("GET", "/v2/models/misnamed/config").error == (
            "Request for unknown model: 'misnamed' is not found"
        )
        assert raw.request("GET", "/v2/models/syntax/config").error == (
            "Request for unknown model: 'syntax' has no available versions"
        )
        log = server.log()
    assert (
        "Poll failed for model directory 'misnamed': unexpected directory name 'misnamed' for model "
        "'other', directory name must equal model name"
    ) in log
