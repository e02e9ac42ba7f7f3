"""Hosting one ``TritonPythonModel``: import, ``initialize``, ``execute``, ``finalize``, auto-complete.

This is the part that runs user code, and it speaks only ``pb_utils`` types and strings (the
``args`` dict, config JSON), never the server's request types: the same code can then run inside a
worker process, with the server-side translation on the other end of a pipe.

Any entry point may be ``async def``.  Coroutines run on an event loop owned by the host, created the
first time one is needed and run forever by a thread of its own, as Triton's stub runs it: tasks a
model starts in the background (``asyncio.create_task``) go on after ``execute`` returned, and a
decoupled model's ``async def execute`` is not waited for (Triton's "async execute", 24.04+): the next
execution starts while it awaits, and an exception it ends with is logged and fails the streams it
left open.  Sync models pay nothing.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import inspect
import json
import logging
import threading
import traceback
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from naiad.backends.python import pb_utils
from naiad.backends.python.loader import (
    forget_module,
    import_model_file,
    model_folder_importable,
    unique_module_name,
)
from naiad.core.errors import InternalError, InvalidArgumentError

# ``asyncio`` is imported only when a model needs it (``async def``): a model process imports this
# module, and asyncio is megabytes that every model process would hold (see naiad.backends.python.bls).
if TYPE_CHECKING:
    import asyncio

log = logging.getLogger(__name__)

MODEL_CLASS = "TritonPythonModel"


def describe(exc: BaseException) -> str:
    """``Type: message``, how Triton shows a Python exception to clients."""
    return f"{type(exc).__name__}: {exc}"


#: Frames of this package: not the model's, so never in the ``At:`` part of an error (see ``where``).
_OWN_FILES = str(Path(__file__).resolve().parents[2]) + "/"


def where(exc: BaseException) -> str:
    """The model's frames an exception passed through, as Triton's stub appends them to the message of
    a failed ``execute`` (pybind11's format: ``\n\nAt:\n``, then ``  file(line): function`` per frame,
    the innermost first); "" when none of them is the model's.  Frames of this package (the code
    calling the model, ``pb_utils``) are left out, as Triton's C++ has no Python frames."""
    frames = [
        (frame.f_code.co_filename, line, frame.f_code.co_name)
        for frame, line in traceback.walk_tb(exc.__traceback__)
        if not frame.f_code.co_filename.startswith(_OWN_FILES)
    ]
    if not frames:
        return ""
    return "\n\nAt:\n" + "".join(f"  {path}({line}): {name}\n" for path, line, name in reversed(frames))


def import_failure(exc: BaseException) -> str:
    """Why a model.py did not import, as Triton 2.51's stub reports it: the exception and the model's
    frames, none for a syntax error (its frames are the compiler's)."""
    return describe(exc) if isinstance(exc, SyntaxError) else f"{describe(exc)}{where(exc)}"


def _model_class(module: ModuleType, model_name: str, model_file: Path) -> type:
    cls = getattr(module, MODEL_CLASS, None)
    if not isinstance(cls, type):
        raise InvalidArgumentError(
            f"failed to load model '{model_name}': {model_file} defines no class {MODEL_CLASS}"
        )
    return cls


class ModelHost:
    """One model object, the private module it came from, and its event loop."""

    __slots__ = (
        "_background",
        "_decoupled",
        "_execute",
        "_loop",
        "_loop_thread",
        "_model",
        "_model_name",
        "_module_name",
        "_runs",
        "_runs_lock",
    )

    def __init__(
        self, model_file: Path, model_name: str, args: dict[str, str], decoupled: bool = False
    ) -> None:
        """Import ``model_file`` and call ``initialize(args)``; raise InferenceServerError on failure."""
        self._model_name = model_name
        self._module_name = unique_module_name(model_name)
        self._decoupled = decoupled
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        #: A decoupled model's ``async def execute`` calls still running.
        self._background: set[concurrent.futures.Future[Any]] = set()
        #: Coroutines ``run`` waits for on the loop (one, unless nested calls come meanwhile).
        self._runs = 0
        self._runs_lock = threading.Lock()
        try:
            with model_folder_importable(model_file.parent, keep=self._module_name):
                try:
                    module = import_model_file(model_file, self._module_name)
                except Exception as exc:
                    log.exception("importing %s failed", model_file)
                    # (checked side by side when a POLL reload met a broken model.py)
                    raise InternalError(f"Internal: {import_failure(exc)}") from exc
                cls = _model_class(module, model_name, model_file)
                execute = getattr(cls, "execute", None)
                if not callable(execute):
                    raise InvalidArgumentError(
                        f"failed to load model '{model_name}': {MODEL_CLASS} in {model_file} has no "
                        "execute() method"
                    )
                self._model = self._call(f"{MODEL_CLASS}()", cls)
                initialize = getattr(self._model, "initialize", None)
                if initialize is not None:
                    self._call("initialize()", initialize, args)
        except BaseException:
            self._close_loop()
            forget_module(self._module_name)
            raise
        self._execute = self._model.execute

    def _call(self, what: str, function: Any, *args: Any) -> Any:
        try:
            result = function(*args)
            if inspect.iscoroutine(result):
                result = self.run(result)
            return result
        except Exception as exc:
            log.exception("%s of model '%s' failed", what, self._model_name)
            # Triton 2.51's reason (checked side by side): its status, the exception, the model's frames
            raise InternalError(f"Internal: {describe(exc)}{where(exc)}") from exc

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        """The host's loop, started (on a daemon thread of its own) the first time it is needed."""
        loop = self._loop
        if loop is None:
            import asyncio

            loop = self._loop = asyncio.new_event_loop()
            self._loop_thread = threading.Thread(
                target=loop.run_forever, name=f"naiad-async-{self._model_name}", daemon=True
            )
            self._loop_thread.start()
        return loop

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coroutine`` to completion on this host's loop (in the calling thread's context), or
        on a loop of its own while another one runs there: an execution this one is nested in (a BLS
        call back into this model) may hold the loop, blocked until this one ends."""
        loop = self._event_loop()
        with self._runs_lock:
            nested = self._runs > 0 or threading.current_thread() is self._loop_thread
            if not nested:
                self._runs += 1
        if nested:
            return run_detached(coroutine)
        import asyncio

        try:
            return asyncio.run_coroutine_threadsafe(coroutine, loop).result()
        finally:
            with self._runs_lock:
                self._runs -= 1

    def execute(
        self,
        requests: Sequence[pb_utils.InferenceRequest],
        failed: Callable[[BaseException], None] | None = None,
    ) -> Any:
        """Whatever the model's ``execute`` returned (awaited if it is a coroutine, except a decoupled
        model's: started, and ``None`` returned); may raise.  ``failed`` is called with the exception
        a decoupled model's coroutine ends with (on the loop's thread, after logging it)."""
        result = self._execute(requests)
        if type(result) is not list and inspect.iscoroutine(result):
            if self._decoupled and threading.current_thread() is not self._loop_thread:
                self._start(result, failed)
                return None
            result = self.run(result)
        return result

    def _start(
        self, coroutine: Coroutine[Any, Any, Any], failed: Callable[[BaseException], None] | None
    ) -> None:
        import asyncio

        future = asyncio.run_coroutine_threadsafe(coroutine, self._event_loop())
        self._background.add(future)
        future.add_done_callback(lambda done: self._background_done(done, failed))

    def _background_done(
        self, future: concurrent.futures.Future[Any], failed: Callable[[BaseException], None] | None
    ) -> None:
        """A decoupled model's execution ended: log the exception it raised, as Triton does (its
        traceback), and tell ``failed``."""
        self._background.discard(future)
        if future.cancelled():
            return
        exc = future.exception()
        if exc is None:
            return
        log.error("%s", "".join(traceback.format_exception(exc)).rstrip())
        if failed is not None:
            failed(exc)

    @property
    def defines_is_ready(self) -> bool:
        """Whether the model says itself whether it is ready (``is_ready()``, Triton 25.12+)."""
        return hasattr(self._model, "is_ready")

    def is_ready(self) -> tuple[bool, str]:
        """The model's ``is_ready()`` (awaited on this host's loop if it is a coroutine): whether it
        is ready, or why it could not say (it raised, or answered something other than a bool, which
        Triton counts as not ready, with that error)."""
        try:
            answer = self._model.is_ready()
            if inspect.iscoroutine(answer):
                answer = self.run(answer)
        except Exception as exc:
            return False, f"{describe(exc)}{where(exc)}"
        if type(answer) is not bool:
            return False, "is_ready() must return a boolean value"
        return answer, ""

    @property
    def synchronous(self) -> bool:
        """Whether the model's ``execute`` is a plain function (not ``async def``)."""
        execute = getattr(self._model, "execute", None)
        return execute is not None and not inspect.iscoroutinefunction(execute)

    def call(self, requests: Sequence[pb_utils.InferenceRequest]) -> Any:
        """The model's ``execute`` called, not awaited: a coroutine for ``async def execute``, for a
        caller that awaits it on its own loop; may raise."""
        return self._execute(requests)

    def close(self) -> None:
        """Call ``finalize()`` (errors are logged, not raised), close the loop, forget the module.

        Closing twice does nothing the second time.
        """
        model, self._model = self._model, None
        finalize = getattr(model, "finalize", None)
        if finalize is not None:
            try:
                result = finalize()
                if inspect.iscoroutine(result):
                    self.run(result)
            except Exception:
                log.exception("finalize() of model '%s' failed", self._model_name)
        self._close_loop()
        forget_module(self._module_name)

    def _close_loop(self) -> None:
        """Cancel what still runs on the loop (a decoupled execution included), stop it, close it."""
        loop, thread = self._loop, self._loop_thread
        self._loop = self._loop_thread = None
        if loop is None:
            return
        import asyncio

        async def cancel_all() -> None:
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await loop.shutdown_asyncgens()

        try:
            if thread is not None and thread is not threading.current_thread():
                asyncio.run_coroutine_threadsafe(cancel_all(), loop).result()
                loop.call_soon_threadsafe(loop.stop)
                thread.join()
        finally:
            if not loop.is_running():
                loop.close()


def auto_complete_config(model_file: Path, model_name: str, config_json: str) -> str | None:
    """Run the model's ``auto_complete_config`` on ``config_json``; the completed JSON, or None.

    None means the model has no ``auto_complete_config``.  The module is imported under a throwaway
    name and forgotten afterwards, like Triton's throwaway stub process.
    """
    module_name = unique_module_name(model_name)
    try:
        with model_folder_importable(model_file.parent, keep=module_name):
            # (Triton 2.51's reasons, checked side by side: its stub's status, the exception and the
            # model's frames, whether the import or the model's function raised)
            try:
                module = import_model_file(model_file, module_name)
            except Exception as exc:
                raise InternalError(import_failure(exc)) from exc
            complete = getattr(_model_class(module, model_name, model_file), "auto_complete_config", None)
            if complete is None:
                return None
            try:
                completed = complete(pb_utils.ModelConfig(config_json))
            except Exception as exc:
                raise InternalError(f"{describe(exc)}{where(exc)}") from exc
            if not isinstance(completed, pb_utils.ModelConfig):
                raise InternalError(
                    f"auto_complete_config function in model '{model_name}' must return a valid "
                    "pb.ModelConfig object."
                )
            return json.dumps(completed.as_dict())
    finally:
        forget_module(module_name)


def run_detached(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run ``coroutine`` to completion on a fresh event loop, from any thread: on this thread if no
    loop runs here, else on a helper thread (a running loop cannot be re-entered) that sees this
    thread's context variables."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    context = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="naiad-inline") as helper:
        return helper.submit(context.run, asyncio.run, coroutine).result()
