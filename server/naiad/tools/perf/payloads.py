"""Requests on the wire: a whole HTTP/1.1 request, or a serialized ``ModelInferRequest``.

Requests are encoded once, before the load starts, so the load generator only writes bytes; only
sequence models (whose requests carry a correlation ID and start/end flags) encode per request.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field

import orjson
from tritonclient.grpc import service_pb2 as pb

from naiad.tools.perf.inputs import Step

#: Asked of decoupled models so that the end of each request's responses is visible (perf_analyzer too).
EMPTY_FINAL = "triton_enable_empty_final_response"


@dataclass(frozen=True)
class SharedMemoryLayout:
    """Where each step's inputs and each output live in the registered system shared-memory regions."""

    input_region: str
    inputs: dict[tuple[int, str], tuple[int, int]]  # (step, input) -> (offset, byte size)
    output_region: str
    outputs: dict[str, tuple[int, int]]  # output -> (offset, byte size)


@dataclass(frozen=True)
class WireFormat:
    protocol: str  # "http" or "grpc"
    host: str
    model: str
    version: str
    outputs: tuple[str, ...]
    binary_inputs: bool = True
    binary_outputs: bool = True
    streaming: bool = False
    shared_memory: SharedMemoryLayout | None = None
    path: str = field(init=False, default="")

    def __post_init__(self) -> None:
        path = f"/v2/models/{urllib.parse.quote(self.model, safe='')}"
        if self.version:
            path += f"/versions/{urllib.parse.quote(self.version, safe='')}"
        object.__setattr__(self, "path", path + "/infer")


Sequence = tuple[int, bool, bool]  # correlation ID, start, end


class PayloadBuilder:
    """Encodes step ``index`` (optionally as part of a sequence) for the chosen protocol."""

    def __init__(self, wire: WireFormat, steps: list[Step]) -> None:
        self.wire = wire
        self.steps = steps

    def build(self, index: int, sequence: Sequence | None = None) -> bytes:
        if self.wire.protocol == "grpc":
            return self._grpc(index, sequence)
        return self._http(index, sequence)

    def _http(self, index: int, sequence: Sequence | None) -> bytes:
        wire, shm = self.wire, self.wire.shared_memory
        inputs, binary = [], []
        for tensor in self.steps[index]:
            entry: dict[str, object] = {
                "name": tensor.name,
                "shape": list(tensor.shape),
                "datatype": tensor.datatype,
            }
            if shm is not None:
                offset, size = shm.inputs[(index, tensor.name)]
                entry["parameters"] = {
                    "shared_memory_region": shm.input_region,
                    "shared_memory_offset": offset,
                    "shared_memory_byte_size": size,
                }
            elif wire.binary_inputs:
                entry["parameters"] = {"binary_data_size": len(tensor.raw)}
                binary.append(tensor.raw)
            else:
                entry["data"] = tensor.json_data()
            inputs.append(entry)
        header: dict[str, object] = {"inputs": inputs}
        if shm is not None:
            header["outputs"] = [
                {
                    "name": name,
                    "parameters": {
                        "shared_memory_region": shm.output_region,
                        "shared_memory_offset": shm.outputs[name][0],
                        "shared_memory_byte_size": shm.outputs[name][1],
                    },
                }
                for name in wire.outputs
            ]
        elif wire.binary_outputs:
            header["outputs"] = [{"name": name, "parameters": {"binary_data": True}} for name in wire.outputs]
        if sequence is not None:
            header["parameters"] = {
                "sequence_id": sequence[0],
                "sequence_start": sequence[1],
                "sequence_end": sequence[2],
            }
        body_json = orjson.dumps(header)
        lines = [f"POST {wire.path} HTTP/1.1", f"Host: {wire.host}"]
        if binary:
            lines += [
                "Content-Type: application/octet-stream",
                f"Inference-Header-Content-Length: {len(body_json)}",
            ]
            body = body_json + b"".join(binary)
        else:
            lines.append("Content-Type: application/json")
            body = body_json
        lines.append(f"Content-Length: {len(body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body

    def _grpc(self, index: int, sequence: Sequence | None) -> bytes:
        wire, shm = self.wire, self.wire.shared_memory
        request = pb.ModelInferRequest(model_name=wire.model, model_version=wire.version)
        for tensor in self.steps[index]:
            entry = request.inputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
            if shm is not None:
                offset, size = shm.inputs[(index, tensor.name)]
                entry.parameters["shared_memory_region"].string_param = shm.input_region
                entry.parameters["shared_memory_offset"].int64_param = offset
                entry.parameters["shared_memory_byte_size"].int64_param = size
            else:
                request.raw_input_contents.append(tensor.raw)
        if shm is not None:
            for name in wire.outputs:
                output = request.outputs.add(name=name)
                output.parameters["shared_memory_region"].string_param = shm.output_region
                output.parameters["shared_memory_offset"].int64_param = shm.outputs[name][0]
                output.parameters["shared_memory_byte_size"].int64_param = shm.outputs[name][1]
        if sequence is not None:
            request.parameters["sequence_id"].int64_param = sequence[0]
            request.parameters["sequence_start"].bool_param = sequence[1]
            request.parameters["sequence_end"].bool_param = sequence[2]
        if wire.streaming:
            request.parameters[EMPTY_FINAL].bool_param = True
        encoded: bytes = request.SerializeToString()
        return encoded
