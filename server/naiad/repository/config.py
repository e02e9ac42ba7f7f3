"""``config.pbtxt``: parsing into Triton's ``ModelConfig`` message, normalization, JSON.

The schema is Triton's own protobuf (``tritonclient.grpc.model_config_pb2``), so every field a Triton
user writes parses exactly as Triton parses it.  Normalization fills the defaults Triton fills (platform
from backend, version policy, instance groups, optimization), so ``/config`` shows what Triton shows.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format
from google.protobuf.message import Message
from tritonclient.grpc import model_config_pb2 as mc

from naiad.codecs.model_config_json import config_to_dict
from naiad.core import datatypes
from naiad.core.errors import InvalidArgumentError
from naiad.core.signature import ModelSignature, TensorSpec
from naiad.repository.layout import CONFIG_FILE, CONFIGS_FOLDER
from naiad.repository.validation import validate_io, validate_model_config
from naiad.scheduling.cache import refuse_uncacheable
from naiad.scheduling.sequence_settings import DEFAULT_IDLE_US

ModelConfig = mc.ModelConfig

log = logging.getLogger("naiad")

#: platform -> backend, for configs that name only a platform.
PLATFORM_BACKEND = {
    "tensorflow_graphdef": "tensorflow",
    "tensorflow_savedmodel": "tensorflow",
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "torch_aoti": "pytorch",
    "tensorrt_plan": "tensorrt",
}
#: backend -> the platform Triton reports for it.
BACKEND_PLATFORM = {
    "onnxruntime": "onnxruntime_onnx",
    "pytorch": "pytorch_libtorch",
    "tensorrt": "tensorrt_plan",
}
#: backend -> default model file name (``default_model_filename``).
DEFAULT_FILENAME = {
    "onnxruntime": "model.onnx",
    "pytorch": "model.pt",
    "tensorrt": "model.plan",
    "python": "model.py",
}
#: Backends whose CPU instance groups count two instances when the config gives no count (Triton's
#: ``SetDefaultInstanceCount``: the others run one, multiple instances costing them too much).
TWO_CPU_INSTANCES = frozenset({"onnxruntime", "tensorflow"})
#: platform -> default model file name, where it differs from the backend's.
PLATFORM_FILENAME = {"torch_aoti": "model.pt2"}
#: Discovery order when the config names neither backend nor platform (Triton's order, plus
#: ``model.pt2`` for torch.export / AOTInductor programs); the platform is set when it says more.
_DISCOVERY = [
    ("model.plan", "tensorrt", ""),
    ("model.onnx", "onnxruntime", ""),
    ("model.pt", "pytorch", ""),
    ("model.pt2", "pytorch", "torch_aoti"),
    ("model.py", "python", ""),
]


#: Triton's order of the backends a config names by platform or model file name (without a
#: ``backend``): backend, its platforms, its file name.
_NAMED_BY = [
    ("tensorflow", ("tensorflow_graphdef", "tensorflow_savedmodel"), ""),
    ("tensorrt", ("tensorrt_plan",), "model.plan"),
    ("onnxruntime", ("onnxruntime_onnx",), "model.onnx"),
    ("pytorch", ("pytorch_libtorch", "torch_aoti"), "model.pt"),
    ("python", (), "model.py"),
]

#: The CUDA compute capability Triton's messages name (its ``--min-supported-compute-capability``).
MIN_COMPUTE_CAPABILITY = 6.0


def parse_text(text: str, source: str = CONFIG_FILE) -> mc.ModelConfig:
    """Parse protobuf text format; errors name the file, the position and the fault as Triton's (C++)
    parser words them, so that what a Triton user greps for in the log is there."""
    try:
        return text_format.Parse(text, ModelConfig())
    except text_format.ParseError as exc:
        raise TextProtoError(source, _in_cpp_words(str(exc))) from exc


class TextProtoError(InvalidArgumentError):
    """A ``config.pbtxt`` that does not parse; ``fault`` is the line Triton's parser writes."""

    def __init__(self, source: str, where_and_what: str) -> None:
        self.fault = f"Error parsing text-format inference.ModelConfig: {where_and_what}"
        super().__init__(f"failed to read text proto from {source}: {self.fault}")


#: Python's ``text_format`` error: ``line:column : ['the line': ]what is wrong``.
_PYTHON_ERROR = re.compile(r"(\d+):(\d+) : (?:'.*': )?(.*)", re.DOTALL)
_UNPARSED_INTEGER = "Couldn't parse integer: "
_OUT_OF_RANGE = "Value out of range: "


def _in_cpp_words(error: str) -> str:
    """``line:column: fault`` as C++ protobuf says it.  The integer faults differ in wording: a word
    where an integer belongs is "Expected integer, got: <word>"; a negative number is that, for the
    minus sign, when the field is unsigned (the only way one within 32 bits is out of range), and a
    number too large is "Integer out of range (<digits>)"."""
    match = _PYTHON_ERROR.fullmatch(error)
    if match is None:
        return error
    line, column, fault = match.groups()
    if fault.startswith(_UNPARSED_INTEGER):
        fault = "Expected integer, got: " + fault.removeprefix(_UNPARSED_INTEGER)
    elif fault.startswith(_OUT_OF_RANGE):
        number = fault.removeprefix(_OUT_OF_RANGE)
        if number.startswith("-") and number[1:].isdigit() and int(number[1:]) <= 2**31:
            fault = "Expected integer, got: -"
        else:
            fault = f"Integer out of range ({number.removeprefix('-')})"
    return f"{line}:{column}: {fault}"


#: A JSON string, or a bare word used as an object key (``direct: {...}``).
_STRING_OR_BARE_KEY = re.compile(r'"(?:[^"\\]|\\.)*"|[A-Za-z_][A-Za-z0-9_]*(?=\s*:)')


def _quoted_keys(text: str) -> str:
    """``text`` with its bare-word object keys quoted: Triton parses a config override with
    protobuf's JSON parser, which takes ``{direct: {}}`` as ``{"direct": {}}`` (NVIDIA's own tests
    send such keys), where Python's parsers refuse it."""
    return _STRING_OR_BARE_KEY.sub(lambda m: m[0] if m[0].startswith('"') else f'"{m[0]}"', text)


def parse_json(text: str | bytes) -> mc.ModelConfig:
    """Parse a ModelConfig JSON override (proto JSON: int64 as numbers or strings)."""
    try:
        if isinstance(text, bytes):
            text = text.decode()
        return json_format.Parse(_quoted_keys(text), ModelConfig())
    except (json_format.ParseError, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(f"Invalid config override: {exc}") from exc


def merge_json(config: mc.ModelConfig, text: str) -> mc.ModelConfig:
    """``config`` with a JSON override merged in: objects merge key by key, everything else (lists,
    values, and ``version_policy``, whose members exclude each other) replaces what was there."""
    try:
        override = json.loads(_quoted_keys(text))
    except ValueError as exc:
        raise InvalidArgumentError(f"Invalid config override: {exc}") from exc
    if not isinstance(override, dict):
        raise InvalidArgumentError("Invalid config override: expected a JSON object")
    base = json_format.MessageToDict(config, preserving_proto_field_name=True)
    return parse_json(json.dumps(_merged(base, override)))


def _merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    result = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict) and key != "version_policy":
            result[key] = _merged(result[key], value)
        else:
            result[key] = value
    return result


def config_path(model_dir: Path, config_name: str = "") -> Path:
    """Where the model's configuration is: ``configs/<config_name>.pbtxt`` where ``--model-config-name``
    names one the folder has, else ``config.pbtxt`` (Triton's rule)."""
    if config_name:
        custom = model_dir / CONFIGS_FOLDER / f"{config_name}.pbtxt"
        if custom.is_file():
            return custom
    return model_dir / CONFIG_FILE


def read_config(model_dir: Path, config_name: str = "") -> mc.ModelConfig:
    """The model's configuration (:func:`config_path`) if present, else an empty config (auto-complete
    may fill it)."""
    path = config_path(model_dir, config_name)
    if not path.exists():
        return ModelConfig()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(f"failed to read {path}: {exc}") from exc
    try:
        return parse_text(text, str(path))
    except TextProtoError as exc:
        # Triton's parser (libprotobuf) writes its own line, as it is: not quoted and escaped as
        # Triton's log lines are.  Users and NVIDIA's test scripts grep the log for it.
        log.error("%s", exc.fault, extra={"verbatim": True})
        raise


def resolve_backend(config: mc.ModelConfig, model_dir: Path, versions: list[int]) -> None:
    """Fill ``backend`` (and ``platform``) as Triton's server-side autofill does, whatever
    ``--disable-auto-complete-config`` says: from the platform or the model file's name, else (no
    platform given) from the files of a version, else from a ``model.<backend>`` model name; then
    Triton's checks that a backend was found and agrees with the platform, in its words."""
    if config.platform == "ensemble":
        return
    if not config.backend:
        for backend, platforms, filename in _NAMED_BY:
            if config.platform in platforms or (filename and config.default_model_filename == filename):
                config.backend = backend
                break
    if not config.backend and not config.platform and not config.default_model_filename:
        for version in reversed(versions):
            for filename, backend, platform in _DISCOVERY:
                if (model_dir / str(version) / filename).exists():
                    config.backend = backend
                    config.platform = platform
                    break
            if config.backend:
                break
    if not config.backend and not config.platform and not config.default_model_filename:
        # Triton's last resort: a custom backend named by the model's name, "model.<backend>"
        name = config.name
        if "." not in name:
            raise InvalidArgumentError(
                f"Invalid model name: Could not determine backend for model '{name}' with no backend in "
                "model configuration. Expected model name of the form 'model.<backend_name>'."
            )
        config.backend = name[name.index(".") + 1 :]
        config.default_model_filename = f"model.{config.backend}"
    if not config.backend:
        raise InvalidArgumentError(f"unexpected platform type '{config.platform}' for {config.name}")
    if not config.platform and config.backend in BACKEND_PLATFORM:
        config.platform = BACKEND_PLATFORM[config.backend]
    known = {backend for backend, _, _ in _NAMED_BY if backend != "python"}
    if config.backend in known and PLATFORM_BACKEND.get(config.platform) != config.backend:
        raise InvalidArgumentError(
            f"unexpected 'platform' and 'backend' pair, got:{config.platform}, {config.backend}"
        )


def autofilled(config: mc.ModelConfig) -> mc.ModelConfig:
    """``config`` as Triton's server-side autofill leaves it (its backend resolved, the model file's
    default name filled), before the backend's own auto-complete; for the verbose log."""
    filled = mc.ModelConfig()
    filled.CopyFrom(config)
    _fill_model_filename(filled)
    return filled


def _fill_model_filename(config: mc.ModelConfig) -> None:
    """The model file's name, where the config names none: its platform's or backend's default."""
    if not config.default_model_filename:
        filename = PLATFORM_FILENAME.get(config.platform) or DEFAULT_FILENAME.get(config.backend)
        if filename:
            config.default_model_filename = filename


def normalize(config: mc.ModelConfig, name: str, gpu_count: int = 0, *, check_io: bool = True) -> None:
    """Fill Triton's defaults in place and check what Triton checks when it polls a model (in its
    order: the config's own rules, naming it as it names itself, before its name is matched to its
    folder's).  ``check_io``: the inputs and outputs too, as Triton checks them at poll only when
    auto-complete is off (otherwise when a version loads: :func:`version_problem`)."""
    config.name = config.name or name
    if config.max_batch_size < 0:
        raise InvalidArgumentError(f"'max_batch_size' must be non-negative value for {config.name}")
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    elif config.version_policy.HasField("latest") and config.version_policy.latest.num_versions < 1:
        raise InvalidArgumentError(f"version_policy latest num_versions must be >= 1 for '{name}'")
    validate_model_config(config)
    if check_io:
        _check_io(config)
    if config.name != name:
        raise InvalidArgumentError(
            f"unexpected directory name '{name}' for model '{config.name}', directory name must equal "
            "model name"
        )
    _fill_model_filename(config)
    _fill_scheduling_defaults(config)
    if not config.HasField("optimization") and config.platform != "ensemble":
        config.optimization.input_pinned_memory.enable = True
        config.optimization.output_pinned_memory.enable = True
    _normalize_io(config)
    refuse_uncacheable(config)
    if config.platform != "ensemble":
        _fill_instance_groups(config, gpu_count)


def version_problem(config: mc.ModelConfig, gpu_count: int, *, check_io: bool) -> str:
    """Why every version of a polled model fails before an instance is made, with Triton's status
    prefix, or "": what Triton checks as it creates the model (its instance groups, then, with
    auto-complete on, its inputs and outputs).  A version failure, not the poll's: the load API's
    answer, the index and the log carry the reason."""
    try:
        if config.platform != "ensemble":
            _check_instance_groups(config, gpu_count)
        if check_io:
            _check_io(config)
    except InvalidArgumentError as exc:
        return f"Invalid argument: {exc.message}"
    return ""


def _check_io(config: mc.ModelConfig) -> None:
    """Triton's ``ValidateModelIOConfig``: each tensor, then the batch inputs and outputs."""
    validate_io(config)
    _validate_batch_io(config)


def _fill_scheduling_defaults(config: mc.ModelConfig) -> None:
    """What Triton writes into a scheduler section left partial, so ``/config`` shows it: a batching
    model's preferred batch size (its ``max_batch_size``: the batchers then behave as with none, see
    :func:`naiad.scheduling.batcher.next_batch`) and a sequence's idle timeout."""
    batched = config.max_batch_size > 0
    if config.HasField("dynamic_batching") and batched and not config.dynamic_batching.preferred_batch_size:
        config.dynamic_batching.preferred_batch_size.append(config.max_batch_size)
    if config.HasField("sequence_batching"):
        sequence = config.sequence_batching
        if sequence.max_sequence_idle_microseconds == 0:
            sequence.max_sequence_idle_microseconds = DEFAULT_IDLE_US
        if sequence.HasField("oldest") and batched and not sequence.oldest.preferred_batch_size:
            sequence.oldest.preferred_batch_size.append(config.max_batch_size)


def _normalize_io(config: mc.ModelConfig) -> None:
    for kind, tensors in (("input", config.input), ("output", config.output)):
        names: set[str] = set()
        for tensor in tensors:
            if not tensor.name:
                raise InvalidArgumentError(f"model '{config.name}' has an {kind} with no name")
            if tensor.name in names:
                raise InvalidArgumentError(
                    f"model '{config.name}' declares {kind} '{tensor.name}' more than once"
                )
            names.add(tensor.name)


def _validate_batch_io(config: mc.ModelConfig) -> None:
    """Triton's checks of ``batch_input`` and ``batch_output`` (what the backends compute from them:
    :mod:`naiad.backends.batch_io`), in its words."""
    inputs = {io.name for io in config.input}
    outputs = {io.name for io in config.output}
    problems: list[str] = []
    for batch_input in config.batch_input:
        kind = mc.BatchInput.Kind.Name(batch_input.kind)
        count = len(batch_input.source_input)
        if count != 1:
            problems.append(f"batch input kind '{kind}' expects 1 source input, got {count}")
        if batch_input.data_type not in (mc.TYPE_INT32, mc.TYPE_FP32):
            problems.append("batch input data type must be TYPE_INT32 or TYPE_FP32")
        problems += [f"unknown source input name '{s}'" for s in batch_input.source_input if s not in inputs]
    for batch_output in config.batch_output:
        kind = mc.BatchOutput.Kind.Name(batch_output.kind)
        count = len(batch_output.source_input)
        if count != 1:
            problems.append(f"batch output kind '{kind}' expects 1 source input, got {count}")
        problems += [f"unknown source input name '{s}'" for s in batch_output.source_input if s not in inputs]
        seen: set[str] = set()
        for target in batch_output.target_name:
            if target not in outputs:
                problems.append(f"unknown target output name '{target}'")
            elif target in seen:
                problems.append(f"target output name '{target}' can only be specified once")
            seen.add(target)
    if problems:  # Triton stops at the first
        raise InvalidArgumentError(f"{problems[0]} for {config.name}")


def _fill_instance_groups(config: mc.ModelConfig, gpu_count: int) -> None:
    """Triton's instance group defaults: one group named after the model, names, kinds, counts, and
    every GPU for a GPU group that lists none."""
    if not config.instance_group:
        group = config.instance_group.add()
        group.name = config.name
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.kind == mc.ModelInstanceGroup.KIND_AUTO:
            if gpu_count > 0 and all(g < gpu_count for g in group.gpus):
                group.kind = mc.ModelInstanceGroup.KIND_GPU
            else:
                group.kind = mc.ModelInstanceGroup.KIND_CPU
                del group.gpus[:]
        if group.count < 1:  # Triton gives two CPU instances to the backends that opted in
            several = group.kind == mc.ModelInstanceGroup.KIND_CPU and config.backend in TWO_CPU_INSTANCES
            group.count = 2 if several else 1
        if group.kind == mc.ModelInstanceGroup.KIND_GPU and not group.gpus:
            group.gpus.extend(range(gpu_count))


def _check_instance_groups(config: mc.ModelConfig, gpu_count: int) -> None:
    """Triton's ``ValidateInstanceGroup``, in its words."""
    for group in config.instance_group:
        for kind in (mc.ModelInstanceGroup.KIND_CPU, mc.ModelInstanceGroup.KIND_MODEL):
            if group.kind == kind and group.gpus:
                raise InvalidArgumentError(
                    f"instance group {group.name} of model {config.name} has kind "
                    f"{mc.ModelInstanceGroup.Kind.Name(kind)} but specifies one or more GPUs"
                )
        if group.kind == mc.ModelInstanceGroup.KIND_GPU:
            if not group.gpus:
                raise InvalidArgumentError(
                    f"instance group {group.name} of model {config.name} has kind KIND_GPU but no "
                    "GPUs are available"
                )
            for gpu in group.gpus:  # (Triton's words, whatever GPUs there are)
                if gpu < 0 or gpu >= gpu_count:
                    raise InvalidArgumentError(
                        f"instance group {group.name} of model {config.name} specifies invalid or "
                        f"unsupported gpu id {gpu}. GPUs with at least the minimum required CUDA "
                        f"compute compatibility of {MIN_COMPUTE_CAPABILITY:.6f} are: "
                        + ", ".join(str(i) for i in range(gpu_count))
                    )
        _check_profiles(group, config)


def _check_profiles(group: mc.ModelInstanceGroup, config: mc.ModelConfig) -> None:
    """A group's ``profile`` list (TensorRT optimization profiles) in Triton core's words: TensorRT
    models only (its sentence lacks a space before "specifies"), each an integer of 0 or more, read
    as C++'s ``stoi`` reads it (leading digits)."""
    if not group.profile:
        return
    where = f"instance group {group.name} of model {config.name} and platform {config.platform}"
    if config.platform != "tensorrt_plan":
        only = "specifies profile field which is only supported for TensorRT models"
        raise InvalidArgumentError(f"{where}{only}")
    for profile in group.profile:
        if not profile:
            raise InvalidArgumentError("profile name must not be empty")
        digits = re.match(r"\s*[+-]?\d+", profile)
        if digits is None:
            raise InvalidArgumentError(f"unable to parse '{profile}': stoi")
        if int(digits.group()) < 0:
            raise InvalidArgumentError(
                f"{where} specifies invalid profile {profile}. The field should contain the string "
                "representation of a non-negative integer."
            )


def selected_versions(config: mc.ModelConfig, available: list[int]) -> list[int]:
    """The versions the version policy selects among those on disk, ascending."""
    policy = config.version_policy
    if policy.HasField("all"):
        return list(available)
    if policy.HasField("specific"):
        wanted = set(policy.specific.versions)
        return [v for v in available if v in wanted]
    count = policy.latest.num_versions or 1
    return available[-count:]


def signature_of(config: mc.ModelConfig) -> ModelSignature:
    """The tensor signature the data plane checks requests against."""

    def spec(tensor: mc.ModelInput | mc.ModelOutput) -> TensorSpec:
        reshape = tuple(tensor.reshape.shape) if tensor.HasField("reshape") else None
        if isinstance(tensor, mc.ModelInput):
            optional, ragged, labels = bool(tensor.optional), bool(tensor.allow_ragged_batch), ""
        else:
            optional, ragged, labels = False, False, tensor.label_filename
        return TensorSpec(
            name=tensor.name,
            datatype=datatypes.config_to_protocol(mc.DataType.Name(tensor.data_type)),
            dims=tuple(tensor.dims),
            reshape=reshape,
            optional=optional,
            is_shape_tensor=tensor.is_shape_tensor,
            allow_ragged_batch=ragged,
            label_filename=labels,
        )

    return ModelSignature(
        name=config.name,
        max_batch_size=config.max_batch_size,
        inputs=tuple(spec(t) for t in config.input),
        outputs=tuple(spec(t) for t in config.output),
    )


def to_json(config: Message) -> dict[str, Any]:
    """Triton's JSON rendering: proto field names, every field printed, int64 as numbers."""
    return config_to_dict(config)


def dependencies(config: mc.ModelConfig) -> tuple[str, ...]:
    """The models this one needs loaded first: an ensemble's step models, once each, in step order."""
    if config.platform != "ensemble":
        return ()
    return tuple(dict.fromkeys(step.model_name for step in config.ensemble_scheduling.step))


def fingerprint_text(config: mc.ModelConfig, instances: bool = True) -> str:
    """The configuration as it matters to a loaded version: everything but the version policy, which
    decides *which* versions load and so must not force a reload of the ones that stay.  Without
    ``instances``, the instance groups are left out too: what a version loaded again with only its
    instances changed keeps (an instance update, see ``ModelLoader.build_version``)."""
    document = config_to_dict(config)
    document.pop("version_policy", None)
    if not instances:
        document.pop("instance_group", None)
    return json.dumps(document, sort_keys=True)
