"""``unload_dependents``: a model records the models it needs and loads along with it (an ensemble's
steps), and only an unload that asks for it takes them down too.

The ensemble itself may or may not serve (ensemble scheduling is another piece of work); what is
tested here is which models its load brought up and its unload takes down.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.utils import InferenceServerException

from tests.repository.clients import RepositoryClient
from tests.repository.conftest import ServerFactory, connect
from tests.repository.models import write_marked
from tests.support.models import write_model

ENSEMBLE = """
name: "pipeline"
platform: "ensemble"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
ensemble_scheduling {
  step [
    { model_name: "first" model_version: -1 input_map { key: "INPUT0" value: "IN" }
      output_map { key: "OUTPUT0" value: "MID" } },
    { model_name: "second" model_version: -1 input_map { key: "INPUT0" value: "MID" }
      output_map { key: "MARK" value: "OUT" } }
  ]
}
"""


@pytest.fixture(scope="module")
def protocol() -> str:
    """What is tested here does not depend on the protocol (the API is covered over both elsewhere)."""
    return "http"


def _load_pipeline(client: RepositoryClient) -> None:
    try:
        client.load("pipeline")
    except InferenceServerException as exc:  # until ensembles are scheduled
        assert "pipeline" in str(exc.message())


def test_unload_dependents_takes_down_what_the_load_brought_up(
    tmp_path: Path, serve: ServerFactory, protocol: str
) -> None:
    write_marked(tmp_path, "first", "f")
    write_marked(tmp_path, "second", "s")
    write_model(tmp_path, "pipeline", ENSEMBLE)
    with serve(tmp_path, "--model-control-mode=explicit") as server:
        client = connect(protocol, server)
        _load_pipeline(client)
        assert client.is_ready("first") and client.is_ready("second")
        client.unload("pipeline")
        assert client.is_ready("first") and client.is_ready("second")  # a plain unload leaves them

        _load_pipeline(client)
        client.unload("pipeline", unload_dependents=True)
        assert not client.is_ready("first") and not client.is_ready("second")

        client.close()
