"""A Python model instance in a worker process of its own, for real parallelism between instances.

Python models hold the GIL while they compute, so ``count: N`` threads in one interpreter would run
one at a time.  Like Triton's stub processes, each instance here is then a child interpreter
(:mod:`naiad.backends.python.stub`) that loads the model with the same
:class:`~naiad.backends.python.backend.PythonModelInstance` as an in-process instance, so both
behave the same way.  Per execution the server writes the input tensors into a shared-memory region
and sends their placement and the request fields through a socket; the child answers with its
outputs placed in a region of its own (see :mod:`naiad.backends.python.shm`).  ``is_cancelled()`` in
the child asks the server, which answers from the live request.  While an execution runs, the child
also sends a decoupled model's responses as they come, and forwards the model's BLS calls, which the
server makes on the instance's thread and answers (tensors of both travel pickled in the message).

``execute`` is called on the instance's thread and blocks in socket I/O, releasing the GIL, so N
instances compute in N processes at once.

A child that dies (a crash, ``os._exit``, an OOM kill) costs the execution it was running, whose
requests fail naming the instance and the exit status.  Like Triton restarting an unhealthy stub, the
next execution then starts a new child, which loads the model (``initialize``) again, so the instance
serves again instead of failing every later request.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from naiad.backends.base import ExecuteResult, InstanceContext
from naiad.backends.python import bls, shm
from naiad.core.errors import ErrorCode, InferenceServerError, InternalError
from naiad.core.request import InferRequest, InferResponse, RequestedOutput, Tensor

log = logging.getLogger(__name__)

#: The folder that holds the ``naiad`` package, so the child imports the same code as the server.
_SOURCE_ROOT = str(Path(__file__).resolve().parents[3])
_CLOSE_TIMEOUT = 30.0


def request_message(request: InferRequest, placements: list[shm.Placement]) -> tuple[Any, ...]:
    """The fields of ``request`` a Python model can read, with its inputs' placements."""
    outputs = None if request.outputs is None else [output.name for output in request.outputs]
    return (
        request.model_name,
        request.id,
        request.parameters,
        outputs,
        request.timeout_us,
        request.sequence_id,
        request.sequence_start,
        request.sequence_end,
        placements,
    )


#: An answer as it crosses the pipe: ``("ok", parameters, [(name, datatype, array)])``,
#: ``("error", code, message)``, or ``None`` (a decoupled model's final flag without a response).
PackedAnswer = tuple[Any, ...] | None


def pack_answer(answer: InferResponse | InferenceServerError | None) -> PackedAnswer:
    if answer is None:
        return None
    if isinstance(answer, InferenceServerError):
        return ("error", answer.code.value, answer.message)
    return ("ok", answer.parameters, [(t.name, t.datatype, t.data) for t in answer.outputs])


def unpack_answer(
    packed: PackedAnswer, model_name: str, model_version: str
) -> InferResponse | InferenceServerError | None:
    if packed is None:
        return None
    if packed[0] == "error":
        return InferenceServerError(packed[2], ErrorCode(packed[1]))
    outputs = [Tensor(name, datatype, array) for name, datatype, array in packed[2]]
    return InferResponse(model_name, model_version, "", outputs, packed[1])


def bls_message(request: InferRequest) -> tuple[Any, ...]:
    """A model's BLS request as its worker process forwards it (tensors travel pickled)."""
    outputs = None if request.outputs is None else [output.name for output in request.outputs]
    inputs = [(t.name, t.datatype, t.data) for t in request.inputs]
    return (
        request.model_name,
        request.model_version,
        request.id,
        request.parameters,
        outputs,
        request.timeout_us,
        request.sequence_id,
        request.sequence_start,
        request.sequence_end,
        inputs,
    )


def bls_request(message: tuple[Any, ...]) -> InferRequest:
    name, version, request_id, parameters, outputs, timeout_us, sequence_id, start, end, inputs = message
    return InferRequest(
        name,
        version,
        request_id,
        [Tensor(tensor_name, datatype, array) for tensor_name, datatype, array in inputs],
        None if outputs is None else [RequestedOutput(output) for output in outputs],
        parameters,
        timeout_us=timeout_us,
        sequence_id=sequence_id,
        sequence_start=start,
        sequence_end=end,
    )


def _remove_orphans() -> None:
    """Delete the region files of processes that are gone (servers or children killed mid-execution)."""
    for path in shm.remove_orphans():
        log.info("removed %s: the process that created it is gone", path)


#: When this server starts its first child: the files earlier servers left.
_remove_orphans_once = functools.cache(_remove_orphans)


class ProcessModelInstance:
    """A :class:`~naiad.backends.base.ModelInstance` whose model runs in a child process."""

    #: The current child and the server's end of its socket (replaced by a restart).
    _process: subprocess.Popen[bytes]
    _conn: Connection

    def __init__(self, context: InstanceContext) -> None:
        """Start the child and load the model there; raise the child's load error, if any."""
        _remove_orphans_once()
        self._context = context
        self._model_name = context.model_name
        self._model_version = str(context.model_version)
        self._instance_name = context.instance_name
        self._caller = bls.Caller(context.model_name, context.model_version, self)
        self._serial = itertools.count()
        #: The executions under way, by key: the outer one, and nested ones (see ``execute``).
        self._running: dict[int, Sequence[InferRequest]] = {}
        self._inputs: shm.Region | None = None
        self._outputs: shm.Region | None = None
        #: Why the child cannot serve ("" while it can): the next outer execution restarts it.
        self._failure = ""
        self._closed = False
        self._start()

    def _start(self) -> None:
        """Start a child and load the model there, for the constructor and for every restart alike;
        raise the child's load error, if any (that child is stopped then)."""
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_SOURCE_ROOT, env.get("PYTHONPATH")]))
        with ours, theirs:  # closes ``ours`` too if the child cannot even start
            self._process = subprocess.Popen(
                [sys.executable, "-m", "naiad.backends.python.stub", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env=env,
            )
            self._conn = Connection(ours.detach())
        # protobuf classes of tritonclient don't pickle: the config travels serialized
        bare = dataclasses.replace(self._context, config=None)
        level = logging.getLogger("naiad").getEffectiveLevel()
        try:
            self._conn.send(("load", bare, self._context.config.SerializeToString(), level))
            reply = self._conn.recv()
        except (EOFError, OSError):
            reply = ("failed", ErrorCode.INTERNAL.value, self._exit_reason("while loading"))
        if reply[0] != "loaded":
            self._stop()
            raise InferenceServerError(reply[2], ErrorCode(reply[1]))

    def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        """Run ``requests`` in the child.

        Also called while an execution of this instance waits for a BLS call whose answer needs
        this very instance (see :mod:`naiad.backends.python.bls`): that nested execution gets input
        memory of its own, since the waiting one still reads its inputs.  A child that stopped is
        replaced first (see :meth:`_restart`), but never under a waiting execution, which still
        talks to the old one: a nested execution then fails as the waiting one will.
        """
        if not self._running and not self._closed:  # not nested: nothing waits on the current child
            if not self._failure and self._process.poll() is not None:
                self._failure = self._exit_reason("between executions")
            if self._failure:
                try:
                    self._restart()
                except InferenceServerError as exc:
                    return [InferenceServerError(exc.message, exc.code) for _ in requests]
        if self._failure:
            return [InternalError(self._failure) for _ in requests]
        nested = bool(self._running)
        tensors = [(t.name, t.datatype, t.data) for request in requests for t in request.inputs]
        needed = shm.layout_size([array for _, _, array in tensors])
        fresh: shm.Region | None = None
        if needed and (nested or self._inputs is None or needed > self._inputs.size):
            fresh = shm.Region.create(needed)
            if not nested:
                self._inputs = fresh
        placements = shm.place(fresh if nested else self._inputs, tensors)
        messages = []
        start = 0
        for request in requests:
            end = start + len(request.inputs)
            messages.append(request_message(request, placements[start:end]))
            start = end
        key = next(self._serial)
        self._running[key] = requests
        try:
            self._conn.send(("execute", key, nested, fresh and fresh.path, fresh and fresh.size, messages))
            with bls.executing(self._caller, requests):
                reply = self._serve_child()
        except (EOFError, OSError):
            self._failure = self._exit_reason("while executing")
            return [InternalError(self._failure) for _ in requests]
        finally:
            del self._running[key]
            if fresh is not None:  # the child has mapped it by now, or never will
                fresh.unlink()
        _, path, size, results = reply
        if path is not None:
            self._outputs = shm.Region.attach(path, size)
            self._outputs.unlink()
        return [self._result(request, result) for request, result in zip(requests, results, strict=True)]

    def run_inline(self, requests: list[InferRequest]) -> list[ExecuteResult]:
        """A nested execution for a BLS call this instance waits for (``bls`` decides when)."""
        return self.execute(requests)

    async def run_inline_async(self, requests: list[InferRequest]) -> list[ExecuteResult]:
        return await asyncio.to_thread(self.execute, requests)

    def _serve_child(self) -> tuple[Any, ...]:
        """Answer what the child asks while it executes; its ``results`` message.

        The child asks whether a request was cancelled, sends a decoupled model's responses
        (``respond``), and forwards the model's BLS calls, which are made here, on this thread,
        while the child waits for their answers.  Both name the execution (a nested one may run).
        """
        conn = self._conn
        while True:
            message = conn.recv()
            kind = message[0]
            if kind == "is_cancelled":
                conn.send(self._running[message[1]][message[2]].cancelled)
            elif kind == "respond":
                _, key, index, packed, final = message
                sink = self._running[key][index].responses
                if sink is not None:
                    sink(unpack_answer(packed, self._model_name, self._model_version), final)
            elif kind == "bls":
                for answer, final in bls.forwarded(bls_request(message[1]), message[2]):
                    conn.send(("answer", pack_answer(answer), final))
            else:
                return tuple(message)

    def _result(self, request: InferRequest, result: tuple[Any, ...]) -> ExecuteResult:
        if result[0] == "error":
            return InferenceServerError(result[2], ErrorCode(result[1]))
        _, parameters, placements = result
        outputs = [
            Tensor(placement[0], placement[1], shm.view(self._outputs, placement).copy())
            for placement in placements
        ]
        return InferResponse(self._model_name, self._model_version, request.id, outputs, parameters)

    def _exit_reason(self, when: str) -> str:
        try:
            code = self._process.wait(5.0)
        except subprocess.TimeoutExpired:
            code = None
        return (
            f"Failed to process the request(s) for model instance '{self._instance_name}', message: "
            f"the model's worker process stopped {when} (exit status {code})"
        )

    def _restart(self) -> None:
        """Replace the stopped child with a new one that loads the model again, as Triton restarts an
        unhealthy stub; raise the load error if that fails (``_failure`` stays set, so the next
        execution tries again: one attempt per execution, never a loop)."""
        self._stop()  # reaps the old child and drops the mappings it shared
        _remove_orphans()  # a region it made but had not handed over yet
        log.warning(
            "the worker process of model '%s' instance '%s' stopped (exit status %s): restarting it",
            self._model_name,
            self._instance_name,
            self._process.returncode,
        )
        try:
            self._start()
        except InferenceServerError as exc:
            log.warning(
                "restarting the worker process of model '%s' instance '%s' failed: %s",
                self._model_name,
                self._instance_name,
                exc.message,
            )
            raise
        self._failure = ""

    def close(self) -> None:
        """``finalize()`` in the child, then stop it (killed if it does not exit in time).  A child
        that already stopped is only reaped: closing never starts a new one."""
        if not self._failure:
            try:
                self._conn.send(("close",))
                if self._conn.poll(_CLOSE_TIMEOUT):
                    self._conn.recv()
            except (EOFError, OSError):
                pass
        self._failure = f"model instance '{self._instance_name}' is closed"
        self._closed = True
        self._stop()

    def _stop(self) -> None:
        """Close the socket and reap the child; drop the shared-memory mappings, which only that
        child used: their files are unlinked already, so dropping them frees the memory, and a new
        child gets regions of its own (it maps no input region until it is sent one)."""
        self._conn.close()
        try:
            self._process.wait(_CLOSE_TIMEOUT)
        except subprocess.TimeoutExpired:
            log.warning("worker process of '%s' did not exit: killing it", self._instance_name)
            self._process.kill()
            self._process.wait()
        self._inputs = None
        self._outputs = None
