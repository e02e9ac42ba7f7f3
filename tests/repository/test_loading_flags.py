"""How versions load under tritonserver's loading flags: ``--model-config-name`` (a configuration per
kind of machine in one repository), ``--model-load-retry-count`` (a failed load tried again) and
``--model-load-gpu-limit`` (a GPU instance refused past a share of the device's memory)."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from naiad.backends.runtime import Runtime
from naiad.core.errors import UnavailableError
from naiad.repository.footprint import GpuMemory
from naiad.repository.loader import ModelLoader

from tests.repository.models import marked_config, write_marked
from tests.support.models import write_model
from tests.support.server import ServerProcess

#: The first load of this model fails (it leaves a file behind), every later one succeeds: NVIDIA's
#: qa ``retry_model`` does the same.
FLAKY_PY = """
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        marker = os.path.join(args["model_repository"], args["model_version"], "tried")
        if not os.path.exists(marker):
            open(marker, "x").close()
            raise RuntimeError("failing the first load")

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()),
                pb_utils.Tensor("MARK", np.array([b"ok"], dtype=object)),
            ])
            for request in requests
        ]
"""


def _policy(versions: list[int]) -> str:
    listed = ", ".join(str(v) for v in versions)
    return f"version_policy: {{ specific: {{ versions: [ {listed} ] }} }}"


def _config_json(server: ServerProcess, model: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{server.http_url}/v2/models/{model}/config") as answer:
        return dict(json.loads(answer.read()))


@pytest.fixture
def configured(tmp_path: Path) -> Path:
    """NVIDIA's ``L0_custom_model_config`` layout: ``config.pbtxt`` serves versions 1 and 3,
    ``configs/h100.pbtxt`` version 1, ``configs/v100.pbtxt`` version 2, ``configs/config.pbtxt`` 3."""
    repo = tmp_path / "models"
    model = write_marked(repo, "m", versions=(1, 2, 3), config_extra=_policy([1, 3]))
    (model / "configs").mkdir()
    for name, versions in (("h100", [1]), ("v100", [2]), ("config", [3])):
        (model / "configs" / f"{name}.pbtxt").write_text(marked_config("m", extra=_policy(versions)))
    return repo


@pytest.mark.parametrize(
    ("flag", "versions"),
    [
        ([], [1, 3]),
        (["--model-config-name=h100"], [1]),
        (["--model-config-name=v100"], [2]),
        (["--model-config-name=config"], [3]),
        (["--model-config-name=h200"], [1, 3]),
    ],
    ids=["none", "h100", "v100", "configs-config", "absent-falls-back"],
)
def test_model_config_name_picks_the_configuration(
    configured: Path, flag: list[str], versions: list[int]
) -> None:
    with ServerProcess([configured], flag) as server:
        config = _config_json(server, "m")
        assert config["version_policy"] == {"specific": {"versions": versions}}
        client = httpclient.InferenceServerClient(server.http_url)
        for version in (1, 2, 3):
            assert client.is_model_ready("m", str(version)) == (version in versions)
        # the served version is the configuration's: its mark names it
        request = httpclient.InferInput("INPUT0", [1], "INT32")
        request.set_data_from_numpy(np.array([5], dtype=np.int32))
        mark = client.infer("m", [request]).as_numpy("MARK")
        assert mark is not None and mark[0] == f"a:{max(versions)}".encode()


def test_a_poll_follows_the_named_configuration(configured: Path) -> None:
    """In POLL mode an edit of ``configs/h100.pbtxt`` reloads the model with it; ``config.pbtxt`` is
    not what it serves from."""
    args = ["--model-config-name=h100", "--model-control-mode=poll", "--repository-poll-secs=1"]
    with ServerProcess([configured], args) as server:
        (configured / "m" / "configs" / "h100.pbtxt").write_text(marked_config("m", extra=_policy([2])))
        client = httpclient.InferenceServerClient(server.http_url)
        for _ in range(100):
            if client.is_model_ready("m", "2") and not client.is_model_ready("m", "1"):
                break
            time.sleep(0.1)
        assert _config_json(server, "m")["version_policy"] == {"specific": {"versions": [2]}}


def _flaky(repo: Path) -> None:
    write_model(repo, "flaky", marked_config("flaky"), FLAKY_PY)


def test_a_failed_load_is_tried_again(tmp_path: Path) -> None:
    """NVIDIA's ``L0_lifecycle`` ``test_load_retry``: without retries the server cannot start (the
    model's first load fails); with ``--model-load-retry-count=1`` the second try loads it."""
    _flaky(tmp_path / "once")
    with pytest.raises(RuntimeError, match="server exited with 1"):
        ServerProcess([tmp_path / "once"]).start()
    _flaky(tmp_path / "twice")
    with ServerProcess([tmp_path / "twice"], ["--model-load-retry-count=1"]) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.is_model_ready("flaky")
        # each failed try in Triton's words, then the load that worked
        assert "failed to load 'flaky' version 1: " in server.log()
        assert "failing the first load" in server.log()
        assert "successfully loaded 'flaky'" in server.log()


class _Nvml:
    """NVML's answers for one device, ``used`` of ``total`` bytes (no GPU on this machine)."""

    def __init__(self, used: int, total: int) -> None:
        self.info = SimpleNamespace(used=used, total=total)

    def nvmlDeviceGetMemoryInfo(self, handle: object) -> SimpleNamespace:
        return self.info


@pytest.mark.parametrize(("used", "refused"), [(900, True), (500, False)])
def test_a_gpu_instance_is_refused_past_the_limit(used: int, refused: bool) -> None:
    loader = ModelLoader(Runtime(), gpu_limits={0: 0.8})
    loader.gpu_memory = GpuMemory(_Nvml(used, 1000), ["device 0"])
    if refused:
        with pytest.raises(UnavailableError) as caught:
            loader._check_gpu_limit("resnet", 0)
        # Triton's sentence
        assert caught.value.message == (
            "can not create model 'resnet': memory limit set for GPU 0 has exceeded, model loading is rejected."
        )
    else:
        loader._check_gpu_limit("resnet", 0)
