"""Model processes started and loaded: the engine's one entry point for running model code.

:class:`Launcher` starts a model process (see :mod:`naiad.backends.python.zygote`), has it load an
instance (import ``model.py``, ``initialize``) or auto-complete a configuration, and raises the
model's own error when that fails.  Auto-completion imports ``model.py`` too, so it also runs in a
throwaway model process, as Triton runs it in a throwaway stub.
"""

from __future__ import annotations

import logging
from multiprocessing.connection import wait
from pathlib import Path

from naiad.backends.python.environment import Environments
from naiad.backends.python.host import auto_complete_config
from naiad.backends.python.instance import mentions
from naiad.backends.python.spec import ModelSpec, ProcessOptions
from naiad.backends.python.zygote import ModelProcess, Zygote, describe_status
from naiad.core.errors import ErrorCode, InferenceServerError, InvalidArgumentError

log = logging.getLogger(__name__)


class Launcher:
    """Starts model processes for the Python backend (one per server, shared by every model)."""

    def __init__(self) -> None:
        self._zygote = Zygote()
        self._environments = Environments()

    def close(self) -> None:
        """Stop the template model processes are forked from (see ``Zygote.close``)."""
        self._zygote.close()

    def _start(self, options: ProcessOptions) -> ModelProcess:
        if options.environment is None:
            return self._zygote.start()
        argv, env = self._environments.command(options.environment)
        return self._zygote.start(argv, env)

    def start(self, spec: ModelSpec, options: ProcessOptions) -> ModelProcess:
        """A model process with ``spec`` loaded; raise the load error (that process is gone then)."""
        process = self._start(options)
        reply = _exchange(process, ("load", spec), "while loading")
        if reply[0] != "loaded":
            _discard(process)
            raise InferenceServerError(str(reply[2]), ErrorCode(reply[1]))
        process.checks_readiness = bool(reply[1])
        return process

    def auto_complete(
        self, model_file: Path, model_name: str, config_json: str, options: ProcessOptions
    ) -> str | None:
        """The configuration the model's ``auto_complete_config`` returns (None if it has none).

        A model whose sources never mention it has none: no process is started for it."""
        if not mentions(model_file.parent, "auto_complete_config"):
            return None
        if options.in_process:
            return auto_complete_config(model_file, model_name, config_json)
        process = self._start(options)
        try:
            reply = _exchange(process, ("auto_complete", model_file, model_name, config_json), "")
        finally:
            _discard(process)
        if reply[0] == "completed":
            return None if reply[1] is None else str(reply[1])
        message = str(reply[2])
        if reply[0] == "stopped":
            message = f"failed to auto-complete the configuration of model '{model_name}': {message}"
            raise InvalidArgumentError(message)
        raise InferenceServerError(message, ErrorCode(reply[1]))  # (the code the model process gave)


def _exchange(process: ModelProcess, message: tuple[object, ...], when: str) -> tuple[object, ...]:
    """Send ``message`` and return the reply, or a ``stopped`` reply naming how the process ended;
    the model's log records are relayed meanwhile (``initialize`` may log more than a pipe holds)."""
    try:
        process.conn.send(message)
        while not process.conn.has_message():
            readable = wait([process.conn.fileno(), process.log], None)
            if process.log in readable:
                process.relay_logs()
            if process.conn.fileno() in readable:
                break
        reply: tuple[object, ...] = process.conn.receive()
        return reply
    except (EOFError, OSError):
        status = describe_status(process.wait(5.0))
        text = f"the model process stopped{' ' + when if when else ''} ({status})"
        return ("stopped", ErrorCode.INTERNAL.value, text)


def _discard(process: ModelProcess) -> None:
    """Stop a model process that has nothing more to do, and release what the engine holds of it."""
    process.conn.close()  # an idle stub leaves on EOF
    if process.wait(5.0) is None:
        process.kill()
        process.wait(None)
    process.relay_last_logs()
    process.close()
