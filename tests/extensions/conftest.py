"""Servers for the extension tests: real ``naiad serve`` processes over small Python-backend models.

``ext_server`` serves shared memory, classification, the response cache and header forwarding at
once; the rate limiter, restricted APIs, bearer keys and TLS each get a server of their own, because
their flags change how every call is answered.  Every server runs in both modes (one per mode) except
the rate limiter's: it is the engine's alone, the same behind workers.
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support import modes
from tests.support.models import write_identity, write_model
from tests.support.server import EXAMPLES, ServerProcess

# Every test through a server taking frontend_workers runs in both server modes (tests.support.modes).
frontend_workers = modes.frontend_workers


CLASSIFIER_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", x.astype(np.float32)),
                pb_utils.Tensor("OUTPUT1", (x * 10).astype(np.int32)),
                pb_utils.Tensor("OUTPUT2", x.astype(np.bytes_).astype(np.object_)),
            ]))
        return responses
"""

STRINGS_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if data.size and data.reshape(-1)[0] == b"params":
                data = np.array([request.parameters().encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses
"""

DECOUPLED_ECHO_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            echo = pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy())
            sender.send(pb_utils.InferenceResponse([echo]), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

#: Doubles its input and says who answered: the model's name and a token unique to the execution.
COUNTING_PY = """
import time
import uuid
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_name"]

    def execute(self, requests):
        time.sleep(0.02)
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            who = np.array([f"{self.name}:{uuid.uuid4().hex}".encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", (data * 2).astype(np.int32)),
                pb_utils.Tensor("WHO", who),
            ]))
        return responses
"""

COUNTING_CONFIG = """
backend: "python"
input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] }]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "WHO" data_type: TYPE_STRING dims: [ 1 ] }
]
instance_group [{ kind: KIND_CPU count: 2 }]
response_cache { enable: true }
"""


#: add_sub that answers once the file its request's ``gate`` parameter names exists, having written
#: ``<gate>.started`` (so a test knows the request is in flight and decides when it ends).
GATED_PY = """
import json, os, time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            gate = json.loads(request.parameters())["gate"]
            open(gate + ".started", "w").close()
            deadline = time.monotonic() + 30
            while not os.path.exists(gate) and time.monotonic() < deadline:
                time.sleep(0.01)
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return responses
"""


@pytest.fixture(scope="session")
def ext_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("extension_models")
    shutil.copytree(EXAMPLES / "add_sub", root / "add_sub")
    write_model(
        root,
        "classifier",
        """
        backend: "python"
        max_batch_size: 8
        input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]
        output [
          { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" },
          { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 4 ] },
          { name: "OUTPUT2" data_type: TYPE_STRING dims: [ 4 ] }
        ]
        """,
        CLASSIFIER_PY,
    )
    (root / "classifier" / "labels.txt").write_text("zero\none\ntwo\nthree\n")
    # its outputs through an ensemble that names no label file: the step's labels serve
    chain = """ensemble_scheduling { step [{ model_name: "classifier" model_version: -1
          input_map { key: "INPUT0" value: "INPUT0" }
          output_map [{ key: "OUTPUT0" value: "SCORES" }, { key: "OUTPUT1" value: "COUNTS" }] }] }"""
    write_model(
        root,
        "classifier_chain",
        f"""platform: "ensemble"
        max_batch_size: 8
        input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }}]
        output [{{ name: "SCORES" data_type: TYPE_FP32 dims: [ 4 ] }},
                {{ name: "COUNTS" data_type: TYPE_INT32 dims: [ 4 ] }}]
        {chain}""",
    )
    write_model(
        root,
        "strings",
        """
        backend: "python"
        input [{ name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] }]
        output [{ name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] }]
        """,
        STRINGS_PY,
    )
    add_sub = (root / "add_sub" / "config.pbtxt").read_text()
    write_model(
        root, "gated", add_sub.replace("add_sub", "gated").replace("KIND_CPU", "KIND_CPU count: 2"), GATED_PY
    )
    write_identity(root, "wide", "TYPE_FP32")  # (dims [-1]: outputs of any size to classify)
    write_model(root, "counting", COUNTING_CONFIG, COUNTING_PY)
    write_model(root, "counting_twin", COUNTING_CONFIG, COUNTING_PY)
    # models the cache is refused for, at load, as Triton refuses it: a decoupled one, a sequence one,
    # and an ensemble, decoupled once a step is
    one_int = """
        input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] }]
        output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] }]
        """
    decoupled, cached = "model_transaction_policy { decoupled: true }", "response_cache { enable: true }"
    python = 'backend: "python"'
    write_model(root, "decoupled_cached", f"{python}\n{decoupled}\n{cached}\n{one_int}", STRINGS_PY)
    sequence = "max_batch_size: 4\nsequence_batching {}"
    write_model(root, "sequence_cached", f"{python}\n{sequence}\n{cached}\n{one_int}", STRINGS_PY)
    write_model(root, "decoupled_step", f"{python}\n{decoupled}\n{one_int}", DECOUPLED_ECHO_PY)
    steps = """ensemble_scheduling { step [{ model_name: "decoupled_step" model_version: -1
          input_map { key: "INPUT0" value: "INPUT0" } output_map { key: "OUTPUT0" value: "OUTPUT0" } }] }"""
    write_model(root, "ensemble_cached", f'platform: "ensemble"\n{cached}\n{one_int}\n{steps}')
    return root


@pytest.fixture(scope="session")
def ext_server(ext_repository: Path, frontend_workers: int) -> Iterator[ServerProcess]:
    """Shared memory on, a 1 MiB response cache, ``x-fwd-*`` headers forwarded."""
    args = [
        "--allow-client-shm=true",
        "--cache-config=local,size=1048576",
        "--http-header-forward-pattern=^x-fwd-",
        "--grpc-header-forward-pattern=^x-fwd-",
        "--strict-readiness=false",
        "--exit-on-error=false",  # (the ``*_cached`` models fail to load on purpose)
    ]
    with ServerProcess([ext_repository], args, frontend_workers=frontend_workers) as server:
        yield server


@pytest.fixture(scope="session")
def add_sub_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("add_sub_only")
    shutil.copytree(EXAMPLES / "add_sub", root / "add_sub")
    return root


@pytest.fixture(scope="session")
def plain_server(add_sub_repository: Path, frontend_workers: int) -> Iterator[ServerProcess]:
    """Triton's defaults: no client shared memory, no restrictions, no keys."""
    with ServerProcess([add_sub_repository], frontend_workers=frontend_workers) as server:
        yield server


@pytest.fixture(params=["http", "grpc"])
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


#: Records an overlap when another execution holds the lock file; with ``barrier``, first waits (up
#: to 5 s) until every other model of the group has arrived, so that unlimited models do overlap.
LOCKING_PY = """
import json
import os
import time
import uuid
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        parameters = {k: v["string_value"] for k, v in config["parameters"].items()}
        self.folder = parameters["lock_dir"]
        self.barrier = int(parameters.get("barrier", "0"))
        self.name = args["model_name"]

    def execute(self, requests):
        if self.barrier:
            open(os.path.join(self.folder, "arrived-" + self.name), "w").close()
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                if len([f for f in os.listdir(self.folder) if f.startswith("arrived-")]) >= self.barrier:
                    break
                time.sleep(0.005)
        lock = os.path.join(self.folder, "busy")
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            fd = None
            open(os.path.join(self.folder, f"overlap-{self.name}-{uuid.uuid4().hex}"), "w").close()
        time.sleep(0.05)
        if fd is not None:
            os.close(fd)
            os.unlink(lock)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.ones(1, np.int32))])
                for _ in requests]
"""


def _locking_config(folder: Path, count: int, resources: str = "", barrier: int = 0) -> str:
    limiter = f"rate_limiter {{ resources [ {resources} ] }}" if resources else ""
    return f"""
        backend: "python"
        input [{{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] }}]
        output [{{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] }}]
        instance_group [{{ kind: KIND_CPU count: {count} {limiter} }}]
        parameters {{ key: "lock_dir" value {{ string_value: "{folder}" }} }}
        parameters {{ key: "barrier" value {{ string_value: "{barrier}" }} }}
        """


@pytest.fixture(scope="session")
def lock_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Where each group of models keeps its lock file and overlap records."""
    return {group: tmp_path_factory.mktemp(f"locks_{group}") for group in ("limited", "free")}


@pytest.fixture(scope="session")
def limiter_server(
    tmp_path_factory: pytest.TempPathFactory, lock_folders: dict[str, Path]
) -> Iterator[ServerProcess]:
    """``--rate-limit=execution_count``: ``limited_a`` (2 instances) and ``limited_b`` need the one
    ``gpu_slot``; ``free_c`` and ``free_d`` need nothing; ``greedy`` needs more ``big`` than exists."""
    root = tmp_path_factory.mktemp("limited_models")
    slot = '{ name: "gpu_slot" count: 1 }'
    limited, free = lock_folders["limited"], lock_folders["free"]
    write_model(root, "limited_a", _locking_config(limited, 2, slot), LOCKING_PY)
    write_model(root, "limited_b", _locking_config(limited, 1, slot), LOCKING_PY)
    write_model(root, "free_c", _locking_config(free, 1, barrier=2), LOCKING_PY)
    write_model(root, "free_d", _locking_config(free, 1, barrier=2), LOCKING_PY)
    write_model(root, "greedy", _locking_config(limited, 1, '{ name: "big" count: 3 }'), LOCKING_PY)
    args = ["--rate-limit=execution_count", "--rate-limit-resource=big:2", "--rate-limit-resource=gpu_slot:1"]
    args.append("--strict-readiness=false")
    args.append("--exit-on-error=false")  # (``greedy`` is refused at load on purpose)
    with ServerProcess([root], args) as server:
        yield server


RESTRICTIONS = {"admin-key": "secret", "infer-key": "abc"}


@pytest.fixture(scope="session")
def restricted_server(add_sub_repository: Path, frontend_workers: int) -> Iterator[ServerProcess]:
    """Model repository and shared memory need ``admin-key: secret``; inference ``infer-key: abc``."""
    args = ["--allow-client-shm=true"]
    for flag in ("--http-restricted-api", "--grpc-restricted-protocol"):
        args += [f"{flag}=model-repository,shared-memory:admin-key=secret", f"{flag}=inference:infer-key=abc"]
    with ServerProcess([add_sub_repository], args, frontend_workers=frontend_workers) as server:
        yield server


#: name -> (token, scopes) of the bearer keys the auth server starts with.
KEYS = {
    "runner": ("runner-token-0123456789", "infer"),
    "viewer": ("viewer-token-0123456789", "read"),
    "ops": ("ops-token-0123456789abcd", "admin"),
    "doomed": ("doomed-token-0123456789", "infer,read"),
}


def key_file_text(keys: dict[str, tuple[str, str]]) -> str:
    lines = ["# test keys: <name> <token> <scopes>"]
    lines += [f"{name}  {token}  {scopes}" for name, (token, scopes) in keys.items()]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="session")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "keys.txt"
    path.write_text(key_file_text(KEYS))
    return path


@pytest.fixture(scope="session")
def auth_server(add_sub_repository: Path, key_file: Path, frontend_workers: int) -> Iterator[ServerProcess]:
    args = [f"--auth-key-file={key_file}", "--allow-client-shm=true"]  # (shm unregister: an admin call)
    with ServerProcess([add_sub_repository], args, frontend_workers=frontend_workers) as server:
        yield server


def _certificate(subject: str, key: Any, issuer: Any, issuer_key: Any, ca: bool = False) -> Any:
    """A certificate for ``subject`` signed by ``issuer_key``, valid for 127.0.0.1 and localhost."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA, and a server and a client certificate it signed (PEM files: ``ca``, ``server_cert``,
    ``server_key``, ``client_cert``, ``client_key``)."""
    folder = tmp_path_factory.mktemp("tls")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("naiad test CA", ca_key, None, ca_key, ca=True)
    files = {"ca": folder / "ca.pem"}
    files["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for role in ("server", "client"):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(f"naiad test {role}", key, ca.subject, ca_key)
        files[f"{role}_cert"] = folder / f"{role}.pem"
        files[f"{role}_key"] = folder / f"{role}.key"
        files[f"{role}_cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        files[f"{role}_key"].write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    return files


class TlsServerProcess(ServerProcess):
    """A server whose HTTP frontend wants mutual TLS: readiness is polled with a client certificate."""

    def __init__(
        self, repositories: list[Path], args: list[str], certificates: dict[str, Path], frontend_workers: int
    ) -> None:
        super().__init__(repositories, args, frontend_workers=frontend_workers)
        self.context = ssl.create_default_context(cafile=str(certificates["ca"]))
        self.context.load_cert_chain(str(certificates["client_cert"]), str(certificates["client_key"]))

    def _wait(self, path: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"https://{self.http_url}{path}", context=self.context) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"server did not answer {path} within {timeout}s:\n{self.log()}")


@pytest.fixture(scope="session")
def tls_server(
    add_sub_repository: Path, certificates: dict[str, Path], frontend_workers: int
) -> Iterator[ServerProcess]:
    """HTTPS with client certificates required (mutual TLS), and gRPC over TLS (server certificate
    only), so each protocol's other mode is the same code with one switch flipped."""
    args = [
        "--http-use-ssl-mutual=true",
        f"--http-server-cert={certificates['server_cert']}",
        f"--http-server-key={certificates['server_key']}",
        f"--http-root-cert={certificates['ca']}",
        "--grpc-use-ssl=true",
        f"--grpc-server-cert={certificates['server_cert']}",
        f"--grpc-server-key={certificates['server_key']}",
    ]
    with TlsServerProcess([add_sub_repository], args, certificates, frontend_workers) as server:
        yield server
