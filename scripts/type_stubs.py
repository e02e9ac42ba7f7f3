"""Regenerate the type stubs of tritonclient's protobuf modules (``server/typings``).

tritonclient ships ``model_config_pb2`` and ``service_pb2`` without type information, so every model
configuration would be ``Any`` to ``mypy --strict``. These stubs are generated, not written: the
descriptors of the installed tritonclient's modules go to ``protoc`` (from grpcio-tools) with the
mypy-protobuf plugin, so the stubs describe exactly the messages the server runs with. Run it again
after moving tritonclient's bound in ``pyproject.toml``:

    pip install grpcio-tools mypy-protobuf   # only for this script, in any environment
    python scripts/type_stubs.py [--protoc-python PATH]

``--protoc-python`` names a Python that has grpcio-tools and mypy-protobuf when this one lacks them.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from google.protobuf import descriptor_pb2
from tritonclient.grpc import model_config_pb2, service_pb2

STUBS = Path(__file__).resolve().parents[1] / "server" / "typings" / "tritonclient"
# proto file -> the module tritonclient ships it as
MODULES = {"model_config.proto": "model_config_pb2", "grpc_service.proto": "service_pb2"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--protoc-python", default=sys.executable)
    args = parser.parse_args(argv)
    python = Path(args.protoc_python)
    plugin = shutil.which("protoc-gen-mypy", path=str(python.parent))
    if plugin is None:
        parser.error(f"protoc-gen-mypy not found beside {python}: pip install grpcio-tools mypy-protobuf")
    files = descriptor_pb2.FileDescriptorSet()
    for module in (model_config_pb2, service_pb2):
        module.DESCRIPTOR.CopyToProto(files.file.add())
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        (work / "set.pb").write_bytes(files.SerializeToString())
        subprocess.run(
            [
                str(python),
                "-m",
                "grpc_tools.protoc",
                f"--descriptor_set_in={work / 'set.pb'}",
                f"--plugin=protoc-gen-mypy={plugin}",
                f"--mypy_out={work}",
                *MODULES,
            ],
            check=True,
        )
        target = STUBS / "grpc"
        target.mkdir(parents=True, exist_ok=True)
        for package in (STUBS, target):
            (package / "__init__.pyi").write_text("")
        for proto, module in MODULES.items():
            text = (work / proto.replace(".proto", "_pb2.pyi")).read_text()
            # protoc names imported files by their proto path; tritonclient ships them in its package
            for other, name in MODULES.items():
                text = text.replace(
                    f"import {other.replace('.proto', '_pb2')} as", f"from tritonclient.grpc import {name} as"
                )
            (target / f"{module}.pyi").write_text(text)
            print(f"wrote {target / module}.pyi")
    return 0


if __name__ == "__main__":
    sys.exit(main())
