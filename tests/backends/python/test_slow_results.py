"""A slow model's results leave its model process as each execution ends.

The engine sends a model process several executions ahead, and the process gathers their results
into one write while they come fast; a slow model's must not wait for the executions queued behind
them (as Triton answers each request when its execution ends: qa/L0_metrics's queue-size checks count
the pending requests going down one execution at a time).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.scheduling.models import infer
from tests.support.models import write_model
from tests.support.server import ServerProcess

DELAY_S = 0.5

SLOW_PY = f"""
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep({DELAY_S})
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]
"""

CONFIG = """
backend: "python"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


def test_results_of_executions_sent_ahead_come_one_by_one(tmp_path: Path) -> None:
    write_model(tmp_path, "slow", CONFIG, SLOW_PY)
    ended: list[float] = []
    statuses: list[int] = []
    with ServerProcess([tmp_path]) as server:
        assert infer(server.http_url, "slow", "warm").status == 200
        started = time.monotonic()

        def one(index: int) -> None:
            statuses.append(infer(server.http_url, "slow", f"r{index}").status)
            ended.append(time.monotonic() - started)

        threads = [threading.Thread(target=one, args=(index,)) for index in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert statuses == [200] * 4
    ended.sort()
    # one execution at a time (no dynamic batching): answers about DELAY_S apart, the second after
    # about two executions, not with the last one after four
    assert ended[1] < 3.2 * DELAY_S, ended
    assert ended[3] >= 3.8 * DELAY_S, ended
