"""The ``python`` backend: Triton Python-backend ``model.py`` files, run unchanged.

Triton gives every instance its own stub process; here a model's single instance is a
:class:`ModelHost` (the model's private module and object) driven by the instance's own thread, in
the server process, which is the fastest path; models with several instances get one worker process
per instance (:mod:`naiad.backends.python.process`), since only processes compute in parallel.  This
module is the server side of the host: it turns server requests into ``pb_utils`` requests and the
model's responses back into server results (in the worker process, too).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from naiad.backends.base import ExecuteResult, InstanceContext
from naiad.backends.python import bls
from naiad.backends.python.host import ModelHost, auto_complete_config, describe
from naiad.backends.python.process import ProcessModelInstance
from naiad.backends.python.request import ReceivedRequest
from naiad.backends.python.response import to_results
from naiad.codecs.model_config_json import config_to_dict
from naiad.core.errors import InternalError, InvalidArgumentError
from naiad.core.request import InferRequest, InferResponse

DEFAULT_MODEL_FILE = "model.py"
#: Config parameter that forces instances into worker processes ("true") or into the server ("false").
PROCESSES_PARAMETER = "NAIAD_INSTANCE_PROCESSES"


def initialize_args(context: InstanceContext) -> dict[str, str]:
    """The seven string arguments Triton passes to ``initialize`` (``model_repository`` is the
    model's own folder, as in Triton)."""
    return {
        "model_config": json.dumps(config_to_dict(context.config)),
        "model_instance_kind": context.kind,
        "model_instance_name": context.instance_name,
        "model_instance_device_id": str(context.device_id),
        "model_repository": str(context.model_dir),
        "model_version": str(context.model_version),
        "model_name": context.model_name,
    }


def uses_processes(config: Any) -> bool:
    """Whether the instances of a model run in worker processes (see ``create_instance``)."""
    parameter = config.parameters.get(PROCESSES_PARAMETER)
    choice = parameter.string_value.strip().lower() if parameter is not None else ""
    if choice in ("true", "false"):
        return choice == "true"
    instances = 0
    for group in config.instance_group:
        instances += group.count * max(1, len(group.gpus))
    return instances > 1


class PythonModelInstance:
    """One loaded instance; ``execute`` is called only from the instance's own thread.

    ``run_inline`` and ``run_inline_async`` run a BLS request on the calling thread instead, for a
    caller this instance is waiting for (see :mod:`naiad.backends.python.bls`).
    """

    __slots__ = (
        "_caller",
        "_decoupled",
        "_host",
        "_instance_name",
        "_issues_requests",
        "_model_name",
        "_model_version",
        "_outputs",
    )

    def __init__(self, context: InstanceContext) -> None:
        self._model_name = context.model_name
        self._model_version = str(context.model_version)
        self._instance_name = context.instance_name
        self._outputs = tuple(spec.name for spec in context.signature.outputs)
        self._decoupled = bool(context.config.model_transaction_policy.decoupled)
        self._caller = bls.Caller(context.model_name, context.model_version, self)
        self._host = ModelHost(context.model_file, context.model_name, initialize_args(context))
        # A model that builds BLS requests blocks its thread until they are answered on the event
        # loop, so it must never run on that loop (see ``inline_safe``).  Reading the source is
        # conservative: any mention disqualifies the model from inline execution, nothing else.
        self._issues_requests = _mentions_requests(context.model_file.parent)

    @property
    def inline_safe(self) -> bool:
        """Whether the scheduler may run this instance's ``execute`` on the event loop thread.

        True for a synchronous, non-decoupled model that issues no BLS requests: such an execution
        never waits for the loop, so when it is short, running it in place saves the two thread
        hand-offs that otherwise cost more than the model itself (add_sub takes a few µs).
        """
        return not self._decoupled and not self._issues_requests and self._host.synchronous

    def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        received = self._received(requests)
        try:
            if self._issues_requests:
                with bls.executing(self._caller, requests):
                    returned = self._host.execute(received)
            else:  # no BLS call can be made on these requests' behalf: nothing to mark
                returned = self._host.execute(received)
        except Exception as exc:
            return self._failed(exc, requests)
        return self._results(returned, received, requests)

    def run_inline(self, requests: list[InferRequest]) -> list[ExecuteResult]:
        """``execute``, on the calling thread (an async ``execute`` gets a loop of its own when
        the host's is busy with the execution that waits for this one)."""
        return self.execute(requests)

    async def run_inline_async(self, requests: list[InferRequest]) -> list[ExecuteResult]:
        received = self._received(requests)
        try:
            with bls.executing(self._caller, requests):
                returned = self._host.call(received)
                if inspect.iscoroutine(returned):
                    returned = await returned
        except Exception as exc:
            return self._failed(exc, requests)
        return self._results(returned, received, requests)

    def _received(self, requests: Sequence[InferRequest]) -> list[ReceivedRequest]:
        outputs = self._outputs
        decoupled = self._decoupled
        return [ReceivedRequest(request, outputs, decoupled) for request in requests]

    def _failed(self, exc: Exception, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        message = (
            f"Failed to process the request(s) for model instance '{self._instance_name}', "
            f"message: {describe(exc)}"
        )
        return [InternalError(message) for _ in requests]

    def _results(
        self, returned: Any, received: list[ReceivedRequest], requests: Sequence[InferRequest]
    ) -> list[ExecuteResult]:
        """What ``execute`` returned, as one result per request (see :mod:`.sender` for ``None``)."""
        name, version = self._model_name, self._model_version
        if self._decoupled:
            if returned is not None:
                error = InternalError(
                    f"Python model '{self._instance_name}' is using the decoupled mode and the execute "
                    "function must return None."
                )
                return [error for _ in requests]
            return [InferResponse(name, version, request.id) for request in requests]
        if returned is None:
            return [self._sent(request) for request in received]
        return to_results(returned, requests, name, version)

    def _sent(self, request: ReceivedRequest) -> ExecuteResult:
        """The one response a non-decoupled model sent through the request's sender."""
        sender = request.sender
        if sender is None or sender.result is None:
            return InternalError(
                f"Expected a list in the execute return, got NoneType, and model '{self._model_name}' "
                f"sent no response for request '{request.request_id()}' through its response sender"
            )
        return sender.result

    def close(self) -> None:
        self._host.close()


def _mentions_requests(folder: Path) -> bool:
    """Whether the model's sources (``model.py`` and the modules beside it) mention BLS requests."""
    try:
        return any("InferenceRequest" in path.read_text(errors="replace") for path in folder.rglob("*.py"))
    except OSError:
        return True


class PythonBackend:
    """Completes configs with ``auto_complete_config`` and creates in-process instances."""

    name = "python"

    def auto_complete(self, config: Any, model_dir: Path, version_dir: Path | None) -> None:
        """Let ``TritonPythonModel.auto_complete_config`` fill the config, as Triton does.

        The model sees the config as Triton renders it, with its name filled in (the repository may
        not have normalized it yet), and what it returns replaces the config.
        """
        if version_dir is None:
            return
        model_file = version_dir / (config.default_model_filename or DEFAULT_MODEL_FILE)
        if not model_file.is_file():
            return
        model_name = config.name or model_dir.name
        current = config_to_dict(config)
        current["name"] = model_name
        completed = auto_complete_config(model_file, model_name, json.dumps(current))
        if completed is None:
            return
        replacement = type(config)()
        try:
            json_format.Parse(completed, replacement)
        except json_format.ParseError as exc:
            raise InvalidArgumentError(
                f"auto_complete_config of model '{model_name}' produced an invalid configuration: {exc}"
            ) from exc
        config.CopyFrom(replacement)

    def create_instance(self, context: InstanceContext) -> PythonModelInstance | ProcessModelInstance:
        """In process for a model with one instance (the fastest path), else in a worker process.

        Python code holds the GIL, so only processes let several instances compute at once.  The
        config parameter ``NAIAD_INSTANCE_PROCESSES`` (``"true"``/``"false"``) overrides the choice,
        e.g. for a model that computes in numpy with the GIL released, where threads suffice.
        """
        if uses_processes(context.config):
            return ProcessModelInstance(context)
        return PythonModelInstance(context)
