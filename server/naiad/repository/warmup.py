"""``model_warmup``: run sample requests through every instance before its version turns READY.

Triton's rules: each sample is ``batch_size`` requests of batch 1 (or of the plain ``dims`` when the
model does not batch) executed together, ``count`` times (0 means once); input data is zeros,
random values (zeros for strings, as Triton) or the content of ``<model>/warmup/<file>`` (raw
little-endian elements, or length-prefixed elements for strings); a sample of ``batch_size`` 0 is
skipped.  A sample that fails fails the version, which stays UNAVAILABLE with the reason, in Triton's
words (``backend_model_instance.cc``), its status prefix (``Invalid argument: ``) included, as Triton's
repository index and load errors show them: clients and operators match on them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from naiad.backends.base import ModelInstance
from naiad.codecs import bytes_tensor
from naiad.core import datatypes
from naiad.core.errors import InferenceServerError, InternalError, InvalidArgumentError
from naiad.core.request import InferRequest, Tensor

WARMUP_DIR = "warmup"


log = logging.getLogger("naiad.repository")

@dataclass(frozen=True, slots=True)
class WarmupSample:
    """One ``model_warmup`` entry, with its requests built once for every instance."""

    name: str
    requests: list[InferRequest]
    count: int


def warmup_samples(config: mc.ModelConfig, model_dir: Path) -> list[WarmupSample]:
    """The samples of a normalized config; INVALID_ARG for a setting Triton would refuse."""
    samples: list[WarmupSample] = []
    for setting in config.model_warmup:
        if setting.batch_size == 0:
            continue  # Triton: "Skipping batch 0 warmup sample"
        batch = setting.batch_size
        for name, spec in setting.inputs.items():  # Triton's first pass: every input's dims first
            if any(d < 0 for d in spec.dims):
                raise InvalidArgumentError(
                    f"{_INVALID}warmup setting expects all variable-size dimensions are specified for "
                    f"input '{name}'"
                )
        rng = np.random.default_rng()
        inputs = [
            _tensor(name, spec, config.max_batch_size > 0, model_dir, rng)
            for name, spec in sorted(setting.inputs.items())
        ]
        requests = [
            InferRequest(config.name, inputs=list(inputs)) for _ in range(batch)
        ]
        if batch > max(config.max_batch_size, 1):
            # batch_size requests of batch 1 run as one execution, which the backend refuses (Triton's
            # words, once per request) on the first instance it warms up, after the data is made
            group = config.instance_group[0].name if config.instance_group else config.name
            refusal = f"batch size {batch} for '{group}_0', max allowed is {config.max_batch_size}"
            raise _failed(setting.name, [refusal] * batch)
        samples.append(WarmupSample(setting.name, requests, max(1, setting.count)))
    return samples


def _tensor(
    name: str, spec: mc.ModelWarmup.Input, batching: bool, model_dir: Path, rng: np.random.Generator
) -> Tensor:
    datatype = datatypes.config_to_protocol(mc.DataType.Name(spec.data_type))
    dims = [int(d) for d in spec.dims]
    shape = ([1] if batching else []) + dims
    count = int(np.prod(shape, dtype=np.int64))
    kind = spec.WhichOneof("input_data_type")
    if kind is None:
        raise InvalidArgumentError(
            f"{_INVALID}{_NO_ID}warmup setting expects input '{name}' to have input_data_type set"
        )
    if kind == "input_data_file":
        data = _from_file(name, datatype, count, model_dir / WARMUP_DIR, spec.input_data_file)
    elif datatype == "BYTES":
        data = np.array([b""] * count, dtype=np.object_)
    elif kind == "random_data":
        data = _random(datatype, count, rng)
    else:
        data = np.zeros(count, dtype=datatypes.NUMPY_DTYPE[datatype])
    return Tensor(name, datatype, data.reshape(shape))


def _random(datatype: str, count: int, rng: np.random.Generator) -> np.ndarray[Any, Any]:
    dtype = datatypes.NUMPY_DTYPE[datatype]
    if dtype.kind == "f" or datatype == "BF16":
        return rng.random(count, dtype=np.float32).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, count).astype(dtype)
    return rng.integers(0, 128, count).astype(dtype)


def _from_file(name: str, datatype: str, count: int, folder: Path, file: str) -> np.ndarray[Any, Any]:
    path = folder / file
    try:
        content = path.read_bytes()
    except OSError as exc:
        raise InternalError(f"Internal: failed to open text file for read {path}: {exc.strerror}") from exc
    if datatype == "BYTES":
        return bytes_tensor.deserialize(content, count, name)
    needed = count * datatypes.ELEMENT_SIZE[datatype]
    if len(content) < needed:  # Triton's words, its missing space included
        raise InvalidArgumentError(
            f"{_INVALID}{_NO_ID}warmup setting expects {needed} bytes, but the data provided from "
            f"{file}only has {len(content)} bytes"
        )
    return np.frombuffer(content[:needed], dtype=datatypes.WIRE_DTYPE[datatype]).copy()


def run_warmup(instance: ModelInstance, samples: list[WarmupSample], model: str, name: str) -> None:
    """Execute every sample on ``instance`` (``name`` of model ``model``), each iteration logged at
    ``--log-verbose`` 1 in Triton's words; the first failing sample fails the load, with Triton's
    INVALID_ARG ``failed to run warmup sample '<name>': <error>; <error>; ``."""
    for sample in samples:
        for iteration in range(1, sample.count + 1):
            log.debug(
                "model '%s' instance %s is running warmup sample '%s' for iteration %d",
                model,
                name,
                sample.name,
                iteration,
            )
            try:
                results = instance.execute(sample.requests)
            except InferenceServerError as exc:
                raise _failed(sample.name, [exc.message]) from exc
            except Exception as exc:
                raise _failed(sample.name, [f"{type(exc).__name__}: {exc}"]) from exc
            errors = [r.message for r in results if isinstance(r, InferenceServerError)]
            if errors:
                raise _failed(sample.name, errors)


#: What Triton's warmup requests (which have no ID) put before a message.
_NO_ID = "[request id: <id_unknown>] "
#: Triton's load reasons start with the status code's words (``Status::AsString``).
_INVALID = "Invalid argument: "


def _failed(sample: str, errors: list[str]) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"{_INVALID}failed to run warmup sample '{sample}': " + "".join(f"{error}; " for error in errors)
    )
