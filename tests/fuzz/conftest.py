"""One server for every fuzz test, the run's :class:`Tally`, and what must hold once the run is over.

Both server modes, one server each. Two profiles: the small one runs inside ``make test`` (about 1,500 generated requests), the full one
(``NAIAD_FUZZ=full``, ``make fuzz``) sends more than 10,000.  After the last test the server must still
answer good HTTP and gRPC requests, and its resident memory may not have grown past
:data:`RSS_GROWTH_LIMIT`; the tally goes to ``NAIAD_FUZZ_REPORT`` when set (``make fuzz`` prints it).
"""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.fuzz.tally import Tally, rss_bytes
from tests.support import modes
from tests.support.http import RawClient
from tests.support.models import IDENTITY_PY, write_identity, write_model
from tests.support.server import EXAMPLES, ServerProcess

FULL = os.environ.get("NAIAD_FUZZ") == "full"

# Both server modes (tests.support.modes): a frontend worker reads what the single process reads.
frontend_workers = modes.frontend_workers

#: Resident memory the server may gain over a whole run (every answer is small; the rest is caches
#: warming up and allocator slack, not a leak per request).
RSS_GROWTH_LIMIT = 96 * 1024 * 1024

#: The models infer fuzzing targets; repository fuzzing never unloads them (only ``scratch``).
SERVING = ("add_sub", "simple_identity", "batched_identity", "sequence", "pipeline")

#: A good request per model, the seeds the infer fuzzers mutate.
GOOD_ADD_SUB = {
    "id": "a",
    "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [1, 1, 1, 1]},
    ],
    "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
}


def examples(small: int, full: int) -> int:
    """How many examples a fuzz test generates in the current profile."""
    return full if FULL else small


def _repository(repo: Path) -> Path:
    shutil.copytree(EXAMPLES / "add_sub", repo / "add_sub")
    shutil.copytree(EXAMPLES / "simple_identity", repo / "simple_identity")
    write_identity(repo, "batched_identity", "TYPE_INT32", max_batch_size=4)
    write_identity(repo, "scratch", "TYPE_INT32")
    write_model(
        repo,
        "sequence",
        """
        name: "sequence"
        backend: "python"
        max_batch_size: 2
        input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
        sequence_batching {
          max_sequence_idle_microseconds: 2000000
          control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
        }
        """,
        IDENTITY_PY,
    )
    (repo / "pipeline" / "1").mkdir(parents=True)
    (repo / "pipeline" / "config.pbtxt").write_text(
        textwrap.dedent(
            """
            name: "pipeline"
            platform: "ensemble"
            max_batch_size: 4
            input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
            output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
            ensemble_scheduling { step [ { model_name: "batched_identity" model_version: -1
              input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } } ] }
            """
        )
    )
    return repo


def good_requests(server: ServerProcess) -> None:
    """A good HTTP and a good gRPC request, each answered correctly."""
    client = RawClient(server.http_url)
    try:
        response = client.request("POST", "/v2/models/add_sub/infer", json.dumps(GOOD_ADD_SUB))
    finally:
        client.close()
    assert response.status == 200, response.body
    header = json.loads(response.body[: int(response.headers["inference-header-content-length"])])
    assert header["id"] == "a" and header["outputs"][0]["name"] == "OUTPUT0"
    assert np.frombuffer(response.body[-16:], dtype=np.float32).tolist() == [2, 3, 4, 5]
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
        tensor = grpcclient.InferInput("INPUT0", [2, 3], "INT32")
        data = np.arange(6, dtype=np.int32).reshape(2, 3)
        tensor.set_data_from_numpy(data)
        assert grpc.infer("batched_identity", [tensor]).as_numpy("OUTPUT0").tolist() == data.tolist()


@pytest.fixture(scope="package")
def tally() -> Tally:
    return Tally()


@pytest.fixture(scope="package")
def server(
    tmp_path_factory: pytest.TempPathFactory, tally: Tally, frontend_workers: int
) -> Iterator[ServerProcess]:
    repo = _repository(tmp_path_factory.mktemp("fuzz-repo"))
    args = ["--model-control-mode=explicit", "--load-model=*", "--allow-client-shm=true"]
    with ServerProcess([repo], args, frontend_workers=frontend_workers) as process:
        assert process.process is not None
        for _ in range(20):  # warm every path up before the first memory reading
            good_requests(process)
        tally.rss_start = rss_bytes(process.process.pid)
        yield process
        alive = process.process.poll() is None
        if not alive:
            tally.crashes += 1
        else:
            good_requests(process)
            tally.rss_end = rss_bytes(process.process.pid)
        report = os.environ.get("NAIAD_FUZZ_REPORT")
        if report:
            tally.save(Path(report))
        assert alive, f"the server exited during fuzzing:\n{process.log()[-4000:]}"
        # a frontend worker that died was started again: the server lived, but the worker's
        # requests in flight failed, so that is a crash too
        assert "starting it again" not in process.log(), process.log()[-4000:]
        growth = tally.rss_end - tally.rss_start
        assert growth < RSS_GROWTH_LIMIT, f"RSS grew by {growth} bytes over {tally.requests} requests"
        assert tally.faults == 0 and tally.crashes == 0, tally.examples
