"""Triton's classification extension: an output replaced by its top-K classes as strings.

An output requested with ``classification: K`` comes back as BYTES of shape ``[batch, K]`` (``[K]``
for a model that does not batch), K capped at the elements of one batch item, each element
``"<value>:<index>"`` or ``"<value>:<index>:<label>"`` with the label from the output's
``label_filename`` (line ``index`` of that file).  Values print as Triton prints them, with C++
``std::to_string``: ``%f`` for floating point, plain digits for integers.  Equal values keep index
order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from naiad.core.errors import InternalError, InvalidArgumentError
from naiad.core.request import InferRequest, Parameters, Tensor
from naiad.core.signature import ModelSignature

PARAMETER = "classification"
_FLOATS = frozenset({"FP32", "FP64"})
_INTEGERS = frozenset({"INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"})


def class_count(output: str, parameters: Parameters) -> int | None:
    """The K an output's parameters ask for; ``None`` when they ask for none (absent or 0)."""
    value = parameters.get(PARAMETER)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(
            f"Unable to set '{PARAMETER}' of output '{output}': expected an unsigned integer"
        )
    return value or None


#: The most elements a batch item's output may have to be classified (current Triton's limit).
MAX_CLASSIFIED = 1_000_000


def top_classes(tensor: Tensor, count: int, batched: bool, labels: Sequence[str]) -> Tensor:
    """``tensor``'s top ``count`` classes per batch item, as Triton formats them."""
    datatype = tensor.datatype
    if datatype not in _FLOATS and datatype not in _INTEGERS:
        raise InvalidArgumentError(
            f"class result not available for output due to unsupported type '{datatype}'"
        )
    data = tensor.data
    items = int(data.shape[0]) if batched and data.ndim else 1
    rows = data.reshape(items, -1)
    if rows.shape[1] > MAX_CLASSIFIED:  # (as current Triton: sorting an unbounded output is a DoS)
        raise InvalidArgumentError("classification output tensor too large")
    k = min(count, rows.shape[1])
    form = "%f" if datatype in _FLOATS else "%d"
    out = np.empty((items, k), dtype=np.object_)
    for item, row in enumerate(rows):
        for rank, index in enumerate(_descending(row)[:k]):
            text = form % row[index] + f":{index}"
            if index < len(labels) and labels[index]:
                text += ":" + labels[index]
            out[item, rank] = text.encode()
    return Tensor(tensor.name, "BYTES", out if batched else out.reshape(k), tensor.parameters)


def classify_outputs(
    request: InferRequest,
    signature: ModelSignature,
    label_file: Callable[[str], Path | None],
    outputs: list[Tensor],
    label_files: LabelFiles,
) -> list[Tensor]:
    """``outputs`` with each one the request asks classification of replaced by its top classes;
    ``label_file``: where an output's labels are (``naiad.repository.model.label_file``), if anywhere."""
    counts = {o.name: class_count(o.name, o.parameters) for o in request.outputs or ()}
    if not any(counts.values()):
        return outputs
    classified: list[Tensor] = []
    for tensor in outputs:
        count = counts.get(tensor.name)
        if count is None or signature.output_spec(tensor.name) is None:
            classified.append(tensor)
            continue
        path = label_file(tensor.name)
        labels: Sequence[str] = label_files.labels(path) if path is not None else ()
        classified.append(top_classes(tensor, count, signature.max_batch_size > 0, labels))
    return classified


def _descending(row: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Indices by value, largest first, equal values in index order (no negation: unsigned-safe)."""
    last = row.shape[0] - 1
    order: np.ndarray[Any, Any] = last - np.argsort(row[::-1], kind="stable")[::-1]
    return order


class LabelFiles:
    """Label files read once and re-read when they change (a model reload may replace them)."""

    def __init__(self) -> None:
        self._read: dict[Path, tuple[tuple[int, int], list[str]]] = {}

    def labels(self, path: Path) -> list[str]:
        try:
            info = os.stat(path)
            stamp = (info.st_mtime_ns, info.st_size)
            cached = self._read.get(path)
            if cached is not None and cached[0] == stamp:
                return cached[1]
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as exc:
            raise InternalError(f"unable to read label file '{path.name}': {exc.strerror}") from None
        self._read[path] = (stamp, lines)
        return lines
