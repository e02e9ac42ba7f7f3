"""Custom metrics (``pb_utils.MetricFamily``) on the server's ``/metrics``, as Triton exports them.

``metered`` re-creates the logic of Triton's ``custom_metrics`` example (a counter family with model
and version labels, incremented per execution, and its value read back in the model) and adds a
gauge and a histogram.  It answers ``OUTPUT0 = [counter value, gauge value, whether a counter refused
``set`` and a negative increment]``.  The same model runs in a model process and in the server
process; a family it deletes, and its families when it is unloaded, leave ``/metrics``.  The expected lines are those real
Triton 2.51 printed for the same families (family order aside).
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.support.models import write_model
from tests.support.server import ServerProcess

METERED_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        name = args["model_name"]
        self.family = pb_utils.MetricFamily(
            name=f"{name}_latency", description="Cumulative time spent processing requests",
            kind=pb_utils.MetricFamily.COUNTER,
        )
        self.metric = self.family.Metric(labels={"model": name, "version": args["model_version"]})
        self.gauges = pb_utils.MetricFamily(name=f"{name}_last", description="Last input", kind=pb_utils.MetricFamily.GAUGE)
        self.gauge = self.gauges.Metric(labels={"b": "2", "a": "1"})
        self.histograms = pb_utils.MetricFamily(
            name=f"{name}_inputs", description="Inputs seen", kind=pb_utils.MetricFamily.HISTOGRAM
        )
        self.histogram = self.histograms.Metric(labels={"m": name}, buckets=[1.0, 2.5, 10.0])
        self.dropped = pb_utils.MetricFamily(name=f"{name}_dropped", description="Gone", kind=pb_utils.MetricFamily.GAUGE)
        self.dropped_metric = self.dropped.Metric()

    def execute(self, requests):
        if hasattr(self, "dropped"):  # deleting a family takes it off /metrics
            del self.dropped_metric
            del self.dropped
        responses = []
        for request in requests:
            x = float(pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()[0])
            self.metric.increment(x)
            self.gauge.set(x - 0.5)
            self.gauge.increment(0.5)
            self.histogram.observe(x)
            refused = 0
            for wrong in (lambda: self.metric.set(1), lambda: self.metric.increment(-1)):
                try:
                    wrong()
                except pb_utils.TritonModelException:
                    refused += 1
            out = np.array([self.metric.value(), self.gauge.value(), refused == 2], np.float64)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses
"""

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [{{ name: "INPUT0" data_type: TYPE_FP64 dims: [ 1 ] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_FP64 dims: [ 3 ] }}]
{extra}
"""

IN_THE_SERVER = 'parameters { key: "NAIAD_INSTANCE_PROCESSES" value: { string_value: "false" } }'
MODELS = {"metered": "", "metered_in_server": IN_THE_SERVER}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("metered")
    for name, extra in MODELS.items():
        write_model(repo, name, CONFIG.format(name=name, extra=extra), METERED_PY)
    with ServerProcess([repo], ["--model-control-mode=explicit", "--load-model=*"]) as served:
        yield served


def _infer(client: httpclient.InferenceServerClient, model: str, value: float) -> list[float]:
    tensor = httpclient.InferInput("INPUT0", [1], "FP64")
    tensor.set_data_from_numpy(np.array([value], dtype=np.float64))
    output = client.infer(model, [tensor]).as_numpy("OUTPUT0")
    assert output is not None
    return [float(v) for v in output]


def _metrics(server: ServerProcess) -> str:
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=10) as answer:
        return str(answer.read().decode())


def _until(server: ServerProcess, wanted: object, present: bool = True) -> str:
    """``/metrics`` once ``wanted`` is (or is no longer) in it: a model process sends its metrics
    a moment after they change."""
    deadline = time.monotonic() + 10
    while True:
        text = _metrics(server)
        if (str(wanted) in text) == present:
            return text
        # (the server's log in the message: a model process's stderr and the engine's warnings)
        assert time.monotonic() < deadline, f"{text}\n--- server log ---\n{server.log()[-4000:]}"
        time.sleep(0.05)


@pytest.mark.parametrize("model", list(MODELS))
def test_custom_metrics_reach_metrics_with_values_the_model_reads_and_leave_with_it(
    server: ServerProcess, model: str
) -> None:
    _until(server, f"# TYPE {model}_dropped gauge\n{model}_dropped 0\n")
    with httpclient.InferenceServerClient(server.http_url) as client:
        assert _infer(client, model, 2.0) == [2.0, 2.0, 1.0]
        assert _infer(client, model, 3.0) == [5.0, 3.0, 1.0]
        text = _metrics(server)  # at once: a scrape asks model processes for what changed
        expected = f"""# HELP {model}_latency Cumulative time spent processing requests
# TYPE {model}_latency counter
{model}_latency{{model="{model}",version="1"}} 5
# HELP {model}_last Last input
# TYPE {model}_last gauge
{model}_last{{a="1",b="2"}} 3
# HELP {model}_inputs Inputs seen
# TYPE {model}_inputs histogram
{model}_inputs_count{{m="{model}"}} 2
{model}_inputs_sum{{m="{model}"}} 5
{model}_inputs_bucket{{m="{model}",le="1"}} 0
{model}_inputs_bucket{{m="{model}",le="2.5"}} 1
{model}_inputs_bucket{{m="{model}",le="10"}} 2
{model}_inputs_bucket{{m="{model}",le="+Inf"}} 2
"""
        assert expected in text
        assert f"{model}_dropped" not in text
        client.unload_model(model)
    text = _until(server, f"# TYPE {model}_latency ", present=False)
    for family in ("latency", "last", "inputs"):
        assert f"# TYPE {model}_{family} " not in text


#: Reads the server's ``/metrics`` from ``execute`` right after changing a metric, as NVIDIA's qa
#: ``custom_metrics`` model does: ``OUTPUT0`` is whether the scrape showed the new value.
READER_PY = """
import urllib.request

import numpy as np
import triton_python_backend_utils as pb_utils

URL = {url!r}


class TritonPythonModel:
    def initialize(self, args):
        family = pb_utils.MetricFamily(name="reader_total", description="d", kind=pb_utils.MetricFamily.COUNTER)
        self.metric = family.Metric(labels={{}})
        self.family = family

    def execute(self, requests):
        responses = []
        for request in requests:
            self.metric.increment(float(pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()[0]))
            with urllib.request.urlopen(URL, timeout=10) as answer:
                text = answer.read().decode()
            seen = f"reader_total {{self.metric.value():g}}\\n" in text
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.array([seen, 0, 0], np.float64))]))
        return responses
"""


def test_a_scrape_from_inside_execute_shows_the_change_just_made(tmp_path: Path) -> None:
    """The model process answers the engine's question while ``execute`` waits for the scrape."""
    repo = tmp_path / "repo"
    server = ServerProcess([repo])
    url = f"http://{server.metrics_url}/metrics"
    write_model(repo, "reader", CONFIG.format(name="reader", extra=""), READER_PY.format(url=url))
    with server, httpclient.InferenceServerClient(server.http_url) as client:
        assert [_infer(client, "reader", value)[0] for value in (1.0, 2.0, 4.0)] == [1.0, 1.0, 1.0]
        assert "reader_total 7\n" in _metrics(server)
