"""Regenerate ``constraints/images.txt``: the exact version of every package the images install.

``pyproject.toml`` keeps library-style ranges (``numpy>=1.26``) and the few exact pins we need
(``torch==2.13.0``, ``kopf==1.45.2``); the images need one exact version for everything, resolved once
for the images' platform (CPython 3.12 on x86-64 Linux) and shared by all three images, so the CPU
image, the GPU image and the operator image never disagree on a version. The Dockerfiles name packages
and extras only, never versions: every ``pip install`` there takes ``-c constraints/images.txt``.
``tests/packaging/test_dockerfiles.py`` checks that every requirement of the installed extras is pinned
here within its ``pyproject.toml`` range (so a dependency added or bumped in ``pyproject.toml`` fails
the tests until this is run again).

Run it with a Python 3.12 (pip evaluates environment markers against the interpreter that runs it, not
against ``--python-version``), from the repository root, with PyPI reachable::

    python3.12 constraints/lock.py            # or: make constraints

TensorRT's libraries are ``wheel-stub`` source distributions on PyPI whose wheels live on NVIDIA's index,
so the resolver cannot read their metadata offline from PyPI; the ``tensorrt`` extra is pinned exactly in
``pyproject.toml`` and its three packages are appended here with that version.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "constraints" / "images.txt"
#: Every extra any image installs (the GPU server image is the superset of the CPU one).
EXTRAS = ("gpu", "torch", "tracing", "operator")
#: Build backends pip needs for our own wheel and for tensorrt-cu13's metapackage (built offline in the
#: builder stages with ``--no-build-isolation``, so their versions are pinned like everything else).
BUILD_TOOLS = ("setuptools", "wheel")
#: pip does not widen an explicit ``--platform`` to older glibc tags: name each one, up to glibc 2.35
#: (Debian bookworm has 2.36, Ubuntu 24.04 2.39), plus the legacy aliases.
GLIBC_TAGS = [f"manylinux_2_{minor}_x86_64" for minor in range(35, 4, -1)]
PLATFORM = (
    *(
        arg
        for tag in [*GLIBC_TAGS, "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
        for arg in ("--platform", tag)
    ),
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
)


def canonicalize_name(name: str) -> str:
    """PEP 503 names (the standard library has no ``packaging``; this runs in a bare Python 3.12)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _tensorrt_pins() -> list[str]:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins: list[str] = []
    for line in extras["tensorrt"]:
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([0-9][0-9A-Za-z.]*)", line.strip())
        if match is None:
            raise SystemExit(f"the tensorrt extra must pin exactly (name==version): {line}")
        name, version = match.groups()
        for part in (name, f"{name}-libs", f"{name}-bindings"):
            pins.append(f"{canonicalize_name(part)}=={version}")
    return pins


def resolve() -> list[str]:
    if sys.version_info[:2] != (3, 12):
        raise SystemExit("run this with Python 3.12, the images' Python (markers are evaluated locally)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k == "PIP_CERT"}
    env["PIP_CONFIG_FILE"] = os.devnull  # PyPI only: no local wheel folders or mirrors in the lock
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        # a current pip in a throwaway venv: older ones neither expand manylinux tags nor write reports
        subprocess.run([sys.executable, "-m", "venv", f"{tmp}/venv"], check=True)
        pip = [f"{tmp}/venv/bin/python", "-m", "pip"]
        subprocess.run([*pip, "install", "--quiet", "--upgrade", "pip"], env=env, check=True)
        subprocess.run(
            [
                *pip,
                "install",
                "--dry-run",
                "--quiet",
                "--ignore-installed",
                "--index-url",
                "https://pypi.org/simple",
                "--only-binary=:all:",
                *PLATFORM,
                "--report",
                str(report),
                f".[{','.join(EXTRAS)}]",
                *BUILD_TOOLS,
            ],
            cwd=ROOT,
            env=env,
            check=True,
        )
        installed = json.loads(report.read_text())["install"]
    pins = {
        canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
        for item in installed
        if canonicalize_name(item["metadata"]["name"]) != "naiad"
    }
    return [f"{name}=={version}" for name, version in sorted(pins.items())]


def main() -> None:
    lines = [
        "# The exact version of every package the images install (Dockerfile.server, Dockerfile.operator).",
        "# Generated by constraints/lock.py for CPython 3.12 on x86-64 Linux; do not edit by hand.",
        *resolve(),
        "# the tensorrt extra (pinned in pyproject.toml); its libraries come from NVIDIA's index",
        *_tensorrt_pins(),
    ]
    OUTPUT.write_text("\n".join(lines) + "\n")
    print(f"{OUTPUT.relative_to(ROOT)}: {sum(not x.startswith('#') for x in lines)} pins")


if __name__ == "__main__":
    main()
