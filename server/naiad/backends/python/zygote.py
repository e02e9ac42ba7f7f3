"""Starting model processes: forked from one template process that has already imported the stub.

Starting a Python interpreter and importing numpy and the stub costs about a second and 40 MiB per
process; Triton pays that for every instance (27 s and 674 MiB for 17 Python models).  Here the
engine starts one template process (``python -m naiad.backends.python.zygote FD``) that imports the
stub once and freezes its objects (``gc.freeze``: the collector then never writes to them, so their
pages stay shared); every model process is then a ``fork`` of it, which takes milliseconds and shares
those pages copy-on-write.  Model processes start in parallel (the repository loads models on a
pool), the template serving one fork at a time.

A model with its own execution environment (``EXECUTION_ENV_PATH``) needs that environment's Python:
the template forks a child that ``exec``s it, so every model process is the template's child either
way.  The template reaps its children and writes each one's exit status (negative: the signal that
ended it) to a pipe the engine holds for that process, which is also how the engine learns at once
that a model process ended, even an idle one.  Every model process dies with the template
(``PR_SET_PDEATHSIG``), and the template leaves when the engine goes away (its socket closes): so
killing the server, even with SIGKILL, leaves no model process behind.
"""

from __future__ import annotations

import ctypes
import gc
import itertools
import logging
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

from naiad.backends.python import logrelay
from naiad.backends.python.custom_metrics import Snapshot
from naiad.backends.python.messages import Wire

log = logging.getLogger(__name__)

#: The folder that holds the ``naiad`` package, so a model process imports the engine's code.
SOURCE_ROOT = str(Path(__file__).resolve().parents[3])
_PR_SET_PDEATHSIG = 1
_STATUS = struct.Struct("i")
#: What the engine sends, with no descriptors, to have the template leave now (``Zygote.close``).
_CLOSE = b"\0\0\0\0"
#: The exit status recorded when the template went away before reporting the process's own (no
#: real status is this low: signals are -1..-64).
UNKNOWN_STATUS = -1000


class ModelProcess:
    """A model process as the engine sees it: its socket, its pid, and its exit status once it ended.

    ``sentinel`` is a file descriptor that becomes readable when the process has ended.
    """

    def __init__(self, pid: int, conn: Wire, status: int, log: int) -> None:
        self.pid = pid
        self.conn = conn
        self.sentinel = status
        #: Its side channel (see :mod:`naiad.backends.python.logrelay`): its log records come
        #: through it, and its answers to :meth:`ask`.
        self.log = log
        self._log_buffer = bytearray()
        #: The last snapshot of its custom metrics (see :mod:`naiad.backends.python.custom_metrics`).
        self.metrics: Snapshot | None = None
        #: Whether its model defines ``is_ready()`` (told once it loaded).
        self.checks_readiness = False
        self.returncode: int | None = None
        self._reading = threading.Lock()  # the executing thread and the watcher both ask
        #: Questions sent on the side channel whose answer has not come, by number.
        self._asked: dict[int, Future[Any]] = {}
        self._numbers = itertools.count(1)
        self._asking = threading.Lock()
        self._silent = False

    def poll(self) -> int | None:
        """The exit status if the process ended, else None (never blocks)."""
        return self.wait(0)

    def wait(self, timeout: float | None) -> int | None:
        """The exit status, waiting up to ``timeout`` seconds; None if it still runs."""
        if self.returncode is None and wait([self.sentinel], timeout):
            with self._reading:
                if self.returncode is None:
                    self._read_status()
        return self.returncode

    def _read_status(self) -> None:
        data = b""
        try:
            data = os.read(self.sentinel, _STATUS.size)
        except OSError:
            pass
        self.returncode = _STATUS.unpack(data)[0] if len(data) == _STATUS.size else UNKNOWN_STATUS

    def relay_logs(self) -> bool:
        """Hand the log records that arrived to the engine's logging, keep the latest custom metrics
        and deliver the answers to :meth:`ask`; False once the side channel closed (the process is
        ending: the questions it did not answer get ``None``)."""
        if logrelay.relay(self.log, self._log_buffer, self._received):
            return True
        self._no_more_answers()
        return False

    def relay_last_logs(self) -> None:
        """Once the process ended: the records it wrote last (``finalize()``'s, a crash's), all of
        them, up to the side channel's end (or to what is there, should a process it forked hold
        the channel open)."""
        while wait([self.log], 0) and self.relay_logs():
            pass

    def _received(self, message: Any) -> None:
        if type(message) is not tuple:
            return
        if message[0] == "metrics":
            self.metrics = message[1]
        elif message[0] == "answer":
            with self._asking:
                future = self._asked.pop(message[1], None)
            if future is not None:
                future.set_result(message[2])

    def ask(self, question: tuple[Any, ...]) -> Future[Any]:
        """Send ``question`` on the side channel; its answer, once a thread of the model process gave
        it (relayed by whoever reads the side channel: the instance's watcher), or ``None`` if the
        process ended first."""
        future: Future[Any] = Future()
        with self._asking:
            if self._silent:
                future.set_result(None)
                return future
            number = next(self._numbers)
            self._asked[number] = future
            if not self._write(logrelay.frame((question[0], number, *question[1:]))):
                del self._asked[number]
                future.set_result(None)
        return future

    def _write(self, frame: bytes) -> bool:
        """Write ``frame`` whole on the non-blocking side channel (a part would garble every later
        question): False, with nothing written, if the process ended or is so stuck that questions
        filled the socket; once a part went, the rest follows as the process's reader takes it."""
        data = memoryview(frame)
        while data:
            try:
                data = data[os.write(self.log, data) :]
            except BlockingIOError:
                if len(data) == len(frame):
                    return False
                select.select([], [self.log], [], 1.0)
            except OSError:
                return False
        return True

    def _no_more_answers(self) -> None:
        with self._asking:
            self._silent = True
            asked, self._asked = self._asked, {}
        for future in asked.values():
            future.set_result(None)

    def kill(self) -> None:
        """SIGKILL, unless the process already ended (its pid may belong to another one by then)."""
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        """Close the socket, the side channel and the status pipe (after the process ended, or to
        abandon it)."""
        self._no_more_answers()
        self.conn.close()
        for fd in (self.sentinel, self.log):
            try:
                os.close(fd)
            except OSError:
                pass


def describe_status(code: int | None) -> str:
    """``exit status 3``, ``killed by signal 11 (SIGSEGV)``, or that it did not end."""
    if code is None:
        return "did not exit"
    if code == UNKNOWN_STATUS:
        return "ended with the model process template (status unknown)"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown"
        return f"killed by signal {-code} ({name})"
    return f"exit status {code}"


class Zygote:
    """The engine's end of the template process; started on first use, shared by every model, and
    gone with the engine (its socket closes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None

    def start(self, argv: Sequence[str] | None = None, env: dict[str, str] | None = None) -> ModelProcess:
        """A new model process: a fork of the template running the stub, or with ``argv``, a fork
        that ``exec``s ``argv`` (with ``env``), which must run the stub on file descriptor 3 and send
        its log records to descriptor 4."""
        ours, theirs = socket.socketpair()
        status_r, status_w = os.pipe()
        log_ours, log_theirs = socket.socketpair()
        log_r, log_w = log_ours.detach(), log_theirs.detach()
        os.set_blocking(log_r, False)
        try:
            payload = pickle.dumps((list(argv) if argv is not None else None, env))
            with self._lock:
                control = self._running()
                request = struct.pack("I", len(payload)) + payload
                socket.send_fds(control, [request], [theirs.fileno(), status_w, log_w])
                reply = _read_exactly(control, _STATUS.size)
            pid = _STATUS.unpack(reply)[0]
        except BaseException:
            ours.close()
            os.close(status_r)
            os.close(log_r)
            raise
        finally:
            theirs.close()
            os.close(status_w)
            os.close(log_w)
        return ModelProcess(pid, Wire(ours), status_r, log_r)

    def close(self) -> None:
        """Stop the template (it leaves when its control socket closes), once the engine closed
        every model process: an engine that outlives its models (a test, an embedding process)
        leaves no process behind; a later ``start`` starts a new one."""
        with self._lock:
            process, control = self._process, self._control
            self._process = self._control = None
        if control is not None:
            try:
                control.sendall(_CLOSE)
            except OSError:  # it ended already
                pass
            control.close()
        if process is not None:
            try:
                process.wait(5.0)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def _running(self) -> socket.socket:
        """The control socket of a live template, started (again) if needed; with the lock held."""
        if self._process is not None and self._process.poll() is None and self._control is not None:
            return self._control
        if self._control is not None:
            self._control.close()
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [SOURCE_ROOT, env.get("PYTHONPATH")]))
        with theirs:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "naiad.backends.python.zygote", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        self._control = ours
        return ours


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise OSError("the model process template stopped")
        data += chunk
    return data


# ---- the template process ------------------------------------------------------------------------


def _die_with_parent() -> None:
    """SIGKILL this process when its parent (the template) ends, whatever it is doing then."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the socket's EOF still ends an idle model process
        pass


def _child(
    control: socket.socket,
    fds: list[int],
    inherited: list[int],
    argv: list[str] | None,
    env: dict[str, str] | None,
) -> None:
    """In a fresh fork: become the model process (never returns).  ``inherited`` are the template's
    own descriptors (its wake-up pipe, its other children's status pipes): closed here, so that a
    status pipe reaches EOF when the template ends."""
    code = 1
    try:
        control.close()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in inherited:
            os.close(fd)
        _die_with_parent()
        conn_fd, status_w, log_w = fds
        os.close(status_w)
        if argv is not None:
            os.dup2(conn_fd, 3)
            os.dup2(log_w, 4)
            os.execve(argv[0], argv, env if env is not None else dict(os.environ))
        from naiad.backends.python import stub

        code = stub.run(Wire(socket.socket(fileno=conn_fd)), log_w)
    except BaseException:
        logging.getLogger(__name__).exception("model process failed to start")
    finally:
        os._exit(code)


def _reap(statuses: dict[int, int], unreported: set[int]) -> None:
    """Write the exit status of each ended child to its pipe, and close it.

    A pipe no one reads any more is passed over, its process kept in ``unreported``: the engine went
    away (killed), and a model process that saw it go and left may be reaped here before the control
    socket's end is read.  Raising there would end this process without :func:`_leave`, leaving the
    engine's files in ``/dev/shm``; and :func:`_leave` removes that process's files too, whatever
    runs under its ID by then.
    """
    while statuses:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        status_w = statuses.pop(pid, None)
        if status_w is not None:
            try:
                os.write(status_w, _STATUS.pack(os.waitstatus_to_exitcode(status)))
            except BrokenPipeError:
                unreported.add(pid)
            finally:
                os.close(status_w)


def serve(control_fd: int) -> int:
    """The template: fork a model process per request on the control socket, until it closes."""
    control = socket.socket(fileno=control_fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the group: the engine decides
    statuses: dict[int, int] = {}
    #: Model processes reaped after the engine stopped reading their status (see ``_reap``).
    unreported: set[int] = set()
    engine = os.getppid()
    _settle()
    watched: list[socket.socket | int] = [control, wake_r]
    while True:
        readable, _, _ = select.select(watched, [], [])
        if wake_r in readable:
            os.read(wake_r, 512)
            _reap(statuses, unreported)
        if control not in readable:
            continue
        try:
            header, fds, _, _ = socket.recv_fds(control, 4, 3)
        except OSError:
            header, fds = b"", []
        if header == _CLOSE and not fds:  # the engine closed every model and asks us to go
            _stop(statuses)
            return 0
        if len(header) < 4 or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            _leave(statuses, engine, unreported)
            return 0
        (size,) = struct.unpack("I", header)
        argv, env = pickle.loads(_read_exactly(control, size))
        pid = os.fork()
        if pid == 0:
            _child(control, fds, [wake_r, wake_w, *statuses.values()], argv, env)
        os.close(fds[0])
        os.close(fds[2])
        statuses[pid] = fds[1]
        control.sendall(_STATUS.pack(pid))


def _leave(statuses: dict[int, int], engine: int, unreported: set[int]) -> None:
    """The engine went away (killed, even with SIGKILL, or exiting): stop every model process left
    and, once the engine has exited, remove the shared-memory files that it and they no longer can
    (an execution that was running holds its input region's file until its answer, which will never
    be read now)."""
    _stop(statuses)
    from naiad.backends.python import shm

    # until the engine has exited: this process is handed to another parent once the engine's exit
    # runs no code of its own any more (the engine makes no file after that).  Its files, and those
    # of the model processes stopped here, are removed whatever runs under those IDs by then: the
    # engine may have been reaped and its ID reused already.
    deadline = time.monotonic() + 10.0
    while os.getppid() == engine and time.monotonic() < deadline:
        time.sleep(0.01)
    exited = os.getppid() != engine  # (not after 10 s: the engine then lives, its files are its own)
    ended = {*statuses, *unreported}
    shm.remove_orphans(ended={engine, *ended} if exited else ended)


def _stop(statuses: dict[int, int]) -> None:
    """Kill and reap every model process still running."""
    for pid in statuses:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pid in statuses:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def _preload() -> None:
    """Import what every model process needs, once, before any fork."""
    from naiad.backends.python import stub  # noqa: F401


def _settle() -> None:
    """Make the template's heap as small, and as shareable, as it gets before the first fork.

    A fork's resident set (RSS) counts every anonymous page of the template it inherits, shared or
    not: what the template holds here is held again, in RSS, by every model process (about 18 MiB
    of the 27 each holds with ``add_sub``; a bare interpreter's is 5, numpy's 8.5 more).  So: the
    import garbage is collected, the C heap's free pages go back to the kernel (``malloc_trim``,
    glibc: about 0.7 MiB), and what is left is frozen (``gc.freeze``: the collector never writes to
    those objects, so their pages stay shared rather than copied into each process).
    """
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass
    gc.freeze()


def main(argv: list[str]) -> int:
    _preload()
    return serve(int(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
