"""BLS from Python models: exec and async_exec, decoupled iterators, errors as responses, calls back into
the calling model (directly and through another model) and many callers at once, all without deadlock;
in process and from worker processes (``count: 2``)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.server import ServerProcess

X = np.array([1, 2, 3, 4], dtype=np.float32)
MODELS = ["bls", "bls_processes"]


def call(client: httpclient.InferenceServerClient, model: str, mode: str, x: np.ndarray = X) -> np.ndarray:
    inputs = [httpclient.InferInput("MODE", [1], "BYTES"), httpclient.InferInput("X", [4], "FP32")]
    inputs[0].set_data_from_numpy(np.array([mode.encode()], dtype=np.object_))
    inputs[1].set_data_from_numpy(np.asarray(x, dtype=np.float32))
    return client.infer(model, inputs).as_numpy("Y")


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    http = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    yield http
    http.close()


@pytest.mark.parametrize("model", MODELS)
def test_exec_and_async_exec(client: httpclient.InferenceServerClient, model: str) -> None:
    np.testing.assert_array_equal(call(client, model, "sync"), 2 * X)
    np.testing.assert_array_equal(call(client, model, "async"), sum(2 * X * i for i in range(10)))


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize(("n", "values"), [(0, []), (1, [1]), (3, [3, 3, 3])])
def test_decoupled_exec_yields_every_response_and_the_final_one(
    client: httpclient.InferenceServerClient, model: str, n: int, values: list[int]
) -> None:
    """square_int32 sends its last response with the final flag; for n = 0 only the flag, which the
    iterator yields as an empty response."""
    count, *got = call(client, model, "decoupled", np.array([n, 0, 0, 0]))
    assert got == values
    assert count == max(n, 1)
    assert list(call(client, model, "async_decoupled", np.array([n, 0, 0, 0]))) == values


@pytest.mark.parametrize("model", MODELS)
def test_errors_come_back_as_responses(client: httpclient.InferenceServerClient, model: str) -> None:
    with pytest.raises(InferenceServerException) as info:
        call(client, model, "missing")
    assert info.value.message() == "2: Request for unknown model: 'no_such_model' is not found"
    with pytest.raises(InferenceServerException) as info:
        call(client, model, "bad_input")
    assert "expected 2 inputs but got 1 inputs for model 'add_sub'" in info.value.message()


@pytest.mark.parametrize("model", MODELS)
def test_a_model_calling_itself_does_not_deadlock(
    client: httpclient.InferenceServerClient, model: str
) -> None:
    """Deeper than the model has instances: each nested call runs on the instance waiting for it."""
    assert call(client, model, "factorial", np.array([6, 0, 0, 0]))[0] == 720
    assert call(client, model, "async_factorial", np.array([5, 0, 0, 0]))[0] == 120


@pytest.mark.parametrize("model", MODELS)
def test_a_call_back_through_another_model_does_not_deadlock(
    client: httpclient.InferenceServerClient, model: str
) -> None:
    """model -> bls_partner -> model, the partner with one instance."""
    np.testing.assert_array_equal(call(client, model, "ping"), 2 * X)


def test_many_concurrent_callers(server: ServerProcess) -> None:
    """64 requests fanning out ten BLS calls each, and recursive ones, at the same time."""

    def one(i: int) -> bool:
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
        try:
            model = MODELS[i % 2]
            if i % 3 == 0:
                return bool(call(client, model, "factorial", np.array([4, 0, 0, 0]))[0] == 24)
            x = X + i
            return bool((call(client, model, "async", x) == sum(2 * x * k for k in range(10))).all())
        finally:
            client.close()

    with ThreadPoolExecutor(32) as pool:
        assert all(pool.map(one, range(64)))


def test_a_model_whose_helper_module_calls_out_never_runs_on_the_event_loop(
    client: httpclient.InferenceServerClient,
) -> None:
    """model.py never names InferenceRequest, its helper module does.  After 150 fast requests (tiny
    models then run inline on the event loop) a request that makes the helper call add_sub must work:
    run on the loop, its exec() would be refused."""
    for x in [X] * 150 + [-X]:
        tensor = httpclient.InferInput("X", [4], "FP32")
        tensor.set_data_from_numpy(x)
        np.testing.assert_array_equal(client.infer("bls_helper", [tensor]).as_numpy("Y"), x + x)
