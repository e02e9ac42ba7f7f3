"""The model process's side of the socket (``naiad.backends.python.stub``): a decoupled model's
``is_cancelled()`` reads a flag the engine sets by a message, over a real socket pair."""

from __future__ import annotations

import socket
import time

from naiad.backends.python.messages import Wire
from naiad.backends.python.stub import _Channel


def _until(condition: object, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


def test_a_decoupled_models_requests_learn_they_were_cancelled_from_the_engine() -> None:
    engine_end, model_end = socket.socketpair()
    engine = Wire(engine_end)
    channel = _Channel(Wire(model_end), routed=True)
    try:
        engine.send(("cancel", 7, 0))  # before its execution: nobody to cancel, ignored
        engine.send(("execute", 7, False, 0, None, None, [(), ()]))
        assert channel.next_message(wait=True)[0] == "execute"
        assert not channel.is_cancelled(7, 0) and not channel.is_cancelled(7, 1)
        engine.send(("cancel", 7, 1))
        assert _until(lambda: channel.is_cancelled(7, 1))
        assert not channel.is_cancelled(7, 0)
        channel.respond(7, 1, None, True)  # its final response: forgotten
        assert engine.receive() == ("respond", 7, 1, None, True)
        assert not channel.is_cancelled(7, 1)
        engine.send(("cancel", 7, 1))  # a cancel that crossed the final response is ignored
        engine.send(("cancel", 7, 0))
        assert _until(lambda: channel.is_cancelled(7, 0))
        assert not channel.is_cancelled(7, 1)
    finally:
        engine.close()
        model_end.close()
