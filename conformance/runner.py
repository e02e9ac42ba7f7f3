"""The machinery of the conformance run: suites of NVIDIA scripts, a server per suite, one verdict per script.

Kept apart from the case list (``cases.py``) so that the selection and summary logic can be tested on a
tiny fake script folder, with no NVIDIA checkout and no server.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TextIO

#: The ports NVIDIA's scripts assume when they take no URL flag (and the ports Triton listens on).
DEFAULT_PORTS = (8000, 8001, 8002)
#: Seconds a test file's process may take to end once its report is written.
REPORTED_GRACE = 15.0


@dataclass(frozen=True)
class Checkouts:
    """Where the three NVIDIA repositories were extracted."""

    client: Path
    python_backend: Path
    server: Path

    @property
    def client_examples(self) -> Path:
        return self.client / "src" / "python" / "examples"

    @property
    def pb_examples(self) -> Path:
        return self.python_backend / "examples"

    @property
    def qa(self) -> Path:
        return self.server / "qa"


@dataclass(frozen=True)
class Ports:
    http: int
    grpc: int
    metrics: int

    @property
    def http_url(self) -> str:
        return f"localhost:{self.http}"

    @property
    def grpc_url(self) -> str:
        return f"localhost:{self.grpc}"

    @property
    def defaults(self) -> bool:
        """Whether a script that hard-codes ``localhost:8000/8001/8002`` reaches this server."""
        return (self.http, self.grpc, self.metrics) == DEFAULT_PORTS


@dataclass(frozen=True)
class Script:
    """One NVIDIA script run unchanged: ``argv`` (``{http}``/``{grpc}`` become the server's URLs) in ``cwd``.

    ``expect`` is a regular expression the output must contain, where the script's exit status alone
    says too little (an image classification, a "PASS" line).  ``pytest`` scripts are test files: each
    of their test cases gets its own verdict, and ``deselect`` names cases not run, with the reason.
    ``fixed_ports`` marks a script that hard-codes ``localhost:8000`` (or 8001/8002).
    """

    name: str
    argv: tuple[str, ...]
    cwd: Path
    expect: str | None = None
    pytest: bool = False
    deselect: dict[str, str] = field(default_factory=dict)
    fixed_ports: bool = False
    timeout: float = 600.0
    test_timeout: float = 60.0
    env: dict[str, str] = field(default_factory=dict)
    #: Run each test case in a pytest process of its own, killed after ``test_timeout`` (plus start-up):
    #: for files whose hanging cases block in C code, where pytest-timeout's signal never fires.
    per_case: bool = False


@dataclass(frozen=True)
class Suite:
    """Scripts that share one model repository and one ``naiad serve`` process."""

    name: str
    build: Callable[[Path], None]
    scripts: tuple[Script, ...]
    server_args: tuple[str, ...] = ()
    #: Where the repository goes under the suite's folder (some models check their own path), and the
    #: server's environment; ``{suite}`` in either, and in ``server_args``, is the suite's folder.
    repository: str = "models"
    server_env: dict[str, str] = field(default_factory=dict)
    #: Where the test reads the server's log (a test.sh's ``SERVER_LOG``): a link to it is made there.
    log_link: Path | None = None
    #: The server must fail to start (a test.sh's "unexpected success starting"): the scripts then read
    #: what it logged.
    fails_to_start: bool = False
    #: Run once the server stopped (a test.sh's checks of the log after ``kill_server``).
    after_stop: tuple[Script, ...] = ()
    #: What the scripts' environment adds (a test.sh's exports that name the suite's files);
    #: ``{suite}`` in a value is the suite's folder.
    script_env: dict[str, str] = field(default_factory=dict)
    #: Where the server runs (a test.sh's folder, for flags that name files relative to it).
    server_cwd: Path | None = None
    #: Where the test reads the server's standard error, kept apart from its output (a test.sh's
    #: ``SERVER_ERROR_LOG``): a link to it is made there.
    error_log_link: Path | None = None
    #: False: the scripts start their servers themselves (a whole test.sh whose ``$SERVER`` is Naiad's
    #: ``tritonserver``), so none is started for them.
    serves: bool = True
    #: How long the server may take to load its repository (a test.sh's ``SERVER_TIMEOUT``).
    start_timeout: float = 120.0


@dataclass(frozen=True)
class Skip:
    name: str
    reason: str


@dataclass(frozen=True)
class Verdict:
    name: str
    outcome: str  # "PASS", "FAIL" or "SKIP"
    detail: str = ""

    def line(self) -> str:
        return f"{self.outcome:4}  {self.name}" + (f"  -- {self.detail}" if self.detail else "")


def unclassified(folder: Path, pattern: str, known: Iterable[str], prefix: str) -> list[Skip]:
    """Scripts of ``folder`` that no suite runs and no skip explains: upstream added them since.

    They are reported as skipped so that a newer checkout shows what is left to classify, rather than
    silently running fewer scripts.
    """
    names = set(known)
    found = sorted(p for p in folder.glob(pattern) if p.is_file() or p.is_dir())
    return [
        Skip(f"{prefix}{p.relative_to(folder)}", "not classified by conformance/cases.py yet")
        for p in found
        if f"{prefix}{p.relative_to(folder)}" not in names
    ]


def summary(verdicts: Sequence[Verdict]) -> str:
    counts = {outcome: sum(v.outcome == outcome for v in verdicts) for outcome in ("PASS", "FAIL", "SKIP")}
    return f"{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped"


def free_ports() -> Ports:
    """Three distinct free ports: the defaults in a private network namespace or where they are free."""
    if in_private_network() or all(_port_free(p) for p in DEFAULT_PORTS):
        return Ports(*DEFAULT_PORTS)
    sockets = [socket.socket() for _ in range(3)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return Ports(*(int(s.getsockname()[1]) for s in sockets))
    finally:
        for s in sockets:
            s.close()


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: TIME_WAIT is no obstacle
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
        return True


class Server:
    """``naiad serve`` on ``ports`` over ``repository``, logging to ``log_path``; stopped with SIGTERM."""

    def __init__(
        self,
        repository: Path,
        ports: Ports,
        args: Sequence[str],
        log_path: Path,
        env: dict[str, str],
        *,
        cwd: Path | None = None,
        error_log_path: Path | None = None,
    ) -> None:
        self.command = [
            sys.executable,
            "-m",
            "naiad",
            "serve",
            f"--model-repository={repository}",
            f"--http-port={ports.http}",
            f"--grpc-port={ports.grpc}",
            f"--metrics-port={ports.metrics}",
            *args,
        ]
        self.ports = ports
        self.env = env
        self.log_path = log_path
        self.error_log_path = error_log_path
        self.cwd = cwd
        self.process: subprocess.Popen[bytes] | None = None

    def _spawn(self) -> subprocess.Popen[bytes]:
        with contextlib.ExitStack() as files:
            log = files.enter_context(self.log_path.open("ab"))
            errors = files.enter_context(self.error_log_path.open("ab")) if self.error_log_path else None
            self.process = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=errors if errors is not None else subprocess.STDOUT,
                start_new_session=True,
                cwd=self.cwd,
                env=dict(os.environ, PYTHONUNBUFFERED="1", **self.env),
            )
        return self.process

    def start(self, timeout: float = 120.0) -> None:
        self._spawn()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"naiad serve exited with {self.process.returncode}; log: {self.log_path}")
            if self._settled():
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"naiad serve did not settle within {timeout:.0f}s; log: {self.log_path}")

    def ended(self, timeout: float = 120.0) -> int | None:
        """Start it and wait for it to exit: its status, or None when it turned ready or still runs
        after ``timeout`` (then stopped)."""
        process = self._spawn()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                return process.returncode
            if self._ready():
                break
            time.sleep(0.1)
        self.stop()
        return None

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports.http}/v2/health/ready", timeout=2):
                return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def _settled(self) -> bool:
        """Ready, or every model of the repository either READY or UNAVAILABLE.

        Triton opens its endpoints once its startup loads are done; NVIDIA's scripts assume it.  Some
        suites hold models that fail to load on purpose, so readiness alone is not the test.
        """
        if self._ready():
            return True
        base = f"http://127.0.0.1:{self.ports.http}/v2"
        try:
            with urllib.request.urlopen(
                urllib.request.Request(f"{base}/repository/index", b"{}"), timeout=2
            ) as r:
                models = json.load(r)
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
            return False
        return bool(models) and all(m.get("state") in ("READY", "UNAVAILABLE") for m in models)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _tail(text: str, lines: int = 3) -> str:
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept)[:400]


def _script_env(script: Script, server: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **script.env, **(server or {})}  # the suite's last
    if script.pytest:  # NVIDIA's tests are unittest classes: no plugin of this environment should join in
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def run_script(
    script: Script, ports: Ports, log: TextIO, server: dict[str, str] | None = None
) -> list[Verdict]:
    """Run one script against the server on ``ports``; its verdicts (one per test case for test files).
    ``server`` is what the script learns of the server's process (``SERVER_PID``, as test.sh exports it)."""
    if script.fixed_ports and not ports.defaults:
        return [
            Verdict(script.name, "SKIP", "hard-codes localhost:8000-8002, which are taken (run isolated)")
        ]
    if script.per_case:
        return _per_case(script, ports, log)
    argv = [a.format(http=ports.http_url, grpc=ports.grpc_url, python=sys.executable) for a in script.argv]
    report = None
    if script.pytest:
        report = Path(tempfile.mkstemp(prefix="conformance-", suffix=".xml")[1])
        # rootdir: the test's folder, so that test IDs (and --deselect) do not depend on NVIDIA's pyproject
        # a test that hangs fails alone (pytest-timeout's signal method), and -v names it in the log
        argv = [
            sys.executable,
            "-m",
            "pytest",
            "-v",
            "-p",
            "no:cacheprovider",
            f"--junitxml={report}",
            f"--rootdir={script.cwd}",
            "-p",
            "pytest_timeout",
            f"--timeout={script.test_timeout:.0f}",
            "--timeout-method=signal",
            *(f"--deselect={argv[0]}::{case}" for case in script.deselect),
            *argv,
        ]
    started = time.monotonic()
    output, rc = _run(argv, script, report, server)
    elapsed = time.monotonic() - started
    log.write(f"===== {script.name}: {' '.join(argv)} (rc {rc}, {elapsed:.1f}s)\n{output}\n")
    log.flush()
    if report is not None:
        try:
            return _test_case_verdicts(script, report, rc, output)
        finally:
            report.unlink(missing_ok=True)
    if rc == -1:
        return [Verdict(script.name, "FAIL", f"timed out after {script.timeout:.0f}s")]
    if rc != 0:
        return [Verdict(script.name, "FAIL", f"exit {rc}: {_tail(output)}")]
    if script.expect is not None and not re.search(script.expect, output):
        return [Verdict(script.name, "FAIL", f"output lacks /{script.expect}/: {_tail(output)}")]
    return [Verdict(script.name, "PASS", f"{elapsed:.1f}s")]


def _per_case(script: Script, ports: Ports, log: TextIO) -> list[Verdict]:
    """Collect the file's test cases, then run each alone (see :attr:`Script.per_case`)."""
    collect = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
               f"--rootdir={script.cwd}", script.argv[0]]  # fmt: skip
    listed = subprocess.run(collect, cwd=script.cwd, env=_script_env(script), capture_output=True, text=True)
    cases = [line.split("::", 1)[1] for line in listed.stdout.splitlines() if "::" in line]
    if not cases:
        return [Verdict(script.name, "FAIL", f"no test collected: {_tail(listed.stdout + listed.stderr)}")]
    verdicts = [Verdict(f"{script.name}::{case}", "SKIP", why) for case, why in script.deselect.items()]
    for case in (c for c in cases if c not in script.deselect):
        alone = replace(script, argv=(f"{script.argv[0]}::{case}",), per_case=False, deselect={},
                        timeout=script.test_timeout + 30)  # fmt: skip
        found = run_script(alone, ports, log)
        if len(found) == 1 and found[0].detail.startswith("no test ran (exit -1)"):
            found = [Verdict(f"{script.name}::{case}", "FAIL", f"hung: killed after {alone.timeout:.0f}s")]
        verdicts += [replace(v, name=v.name.replace(alone.name, script.name)) for v in found]
    return verdicts


def _run(
    argv: list[str], script: Script, report: Path | None, server: dict[str, str] | None = None
) -> tuple[str, int]:
    """The command's output and exit status (-1: killed at the script's timeout).

    A test file whose report is written but whose process does not end (a test left a client's
    non-daemon threads waiting on a server stream) is stopped after a grace period: its verdicts
    are in the report.
    """
    with tempfile.TemporaryFile("w+", errors="replace") as sink:
        process = subprocess.Popen(
            argv,
            cwd=script.cwd,
            env=_script_env(script, server),
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + script.timeout
        reported: float | None = None
        while process.poll() is None and time.monotonic() < deadline:
            if reported is None and report is not None and report.stat().st_size:
                reported = time.monotonic()
            if reported is not None and time.monotonic() - reported > REPORTED_GRACE:
                break
            time.sleep(0.2)
        if process.poll() is None:
            process.kill()
            process.wait()
            rc = -1
        else:
            rc = process.returncode
        sink.seek(0)
        return sink.read(), rc


def _test_case_verdicts(script: Script, report: Path, rc: int, output: str) -> list[Verdict]:
    cases = list(_junit_cases(report)) if report.stat().st_size else []
    if not cases:
        return [Verdict(script.name, "FAIL", f"no test ran (exit {rc}): {_tail(output)}")]
    verdicts = [Verdict(f"{script.name}::{case}", outcome, detail) for case, outcome, detail in cases]
    verdicts += [Verdict(f"{script.name}::{case}", "SKIP", why) for case, why in script.deselect.items()]
    return verdicts


def _junit_cases(report: Path) -> Iterator[tuple[str, str, str]]:
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        classname = case.get("classname", "").rsplit(".", 1)[-1]
        name = f"{classname}::{case.get('name')}" if classname else str(case.get("name"))
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        skipped = case.find("skipped")
        if failure is not None:
            yield name, "FAIL", _tail(failure.get("message") or failure.text or "", 2)
        elif skipped is not None:
            yield name, "SKIP", (skipped.get("message") or "skipped by the test")[:200]
        else:
            yield name, "PASS", f"{float(case.get('time') or 0):.1f}s"


def run_suite(suite: Suite, work: Path, out: TextIO, log: TextIO) -> list[Verdict]:
    """Build the suite's repository, serve it, run its scripts; print each verdict as it comes."""
    folder = work / suite.name
    shutil.rmtree(folder, ignore_errors=True)
    repository = folder / suite.repository
    repository.mkdir(parents=True)
    verdicts: list[Verdict] = []

    def emit(new: Iterable[Verdict]) -> None:
        for verdict in new:
            verdicts.append(verdict)
            print(verdict.line(), file=out, flush=True)

    try:
        suite.build(repository)
    except Exception as error:  # a suite that cannot be built fails its scripts, not the run
        emit(Verdict(s.name, "FAIL", f"model repository not built: {error!r}") for s in suite.scripts)
        return verdicts
    if not suite.serves:
        known = {key: value.format(suite=folder) for key, value in suite.script_env.items()}
        for script in suite.scripts:
            emit(run_script(script, free_ports(), log, known))
        return verdicts
    env = {key: value.format(suite=folder) for key, value in suite.server_env.items()}
    args = tuple(arg.format(suite=folder) for arg in suite.server_args)
    error_log = folder / "server.error.log" if suite.error_log_link is not None else None
    ports, log_path = free_ports(), folder / "server.log"
    server = Server(repository, ports, args, log_path, env, cwd=suite.server_cwd, error_log_path=error_log)
    for link, target in ((suite.log_link, server.log_path), (suite.error_log_link, error_log)):
        if link is not None and target is not None:
            link.unlink(missing_ok=True)
            link.symlink_to(target)
    if suite.fails_to_start:
        status = server.ended()
        if status is None or status == 0:
            emit(
                Verdict(s.name, "FAIL", f"unexpected success starting naiad serve (exit {status})")
                for s in suite.scripts
            )
            return verdicts
        for script in suite.scripts:
            emit(run_script(script, server.ports, log))
        return verdicts
    try:
        server.start(suite.start_timeout)
    except RuntimeError as error:
        emit(Verdict(s.name, "FAIL", str(error)) for s in suite.scripts)
        return verdicts
    assert server.process is not None
    known = {"SERVER_PID": str(server.process.pid)}
    known.update({key: value.format(suite=folder) for key, value in suite.script_env.items()})
    try:
        for script in suite.scripts:
            emit(run_script(script, server.ports, log, known))
    finally:
        server.stop()
    for script in suite.after_stop:
        emit(run_script(script, server.ports, log))
    return verdicts


def in_private_network() -> bool:
    """Whether this process runs in its own network namespace (set by :func:`isolate`)."""
    return os.environ.get("NAIAD_CONFORMANCE_ISOLATED") == "1"


def isolate(argv: Sequence[str]) -> int | None:
    """Run ``argv`` again in a private network namespace, where 8000-8002 are free for NVIDIA's scripts.

    Many of NVIDIA's scripts hard-code ``localhost:8000``; a namespace of our own gives them those ports
    without clashing with anything else on the machine.  Returns the child's exit status, or None where
    no namespace can be made (then scripts that hard-code ports are skipped unless the ports are free).
    """
    unshare, ip = shutil.which("unshare"), shutil.which("ip")
    if unshare is None or ip is None:
        return None
    probe = subprocess.run(
        [unshare, "--net", "--map-root-user", ip, "link", "set", "lo", "up"], capture_output=True
    )
    if probe.returncode != 0:
        return None
    inner = f'"{ip}" link set lo up && exec "$@"'
    env = dict(os.environ, NAIAD_CONFORMANCE_ISOLATED="1")
    command = [unshare, "--net", "--map-root-user", "sh", "-c", inner, "sh", *argv]
    return subprocess.run(command, env=env).returncode
