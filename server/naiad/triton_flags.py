"""The rest of ``tritonserver``'s command line, so that a Triton deployment's flags start Naiad unchanged.

``naiad serve`` takes Triton's flags by their names (:mod:`naiad.cli`).  This module holds the ones that
are not features of their own:

- **deprecated** flags, which Triton 2.51 still takes and turns into their replacements with a warning
  on stderr (``--strict-model-config``, ``--response-cache-byte-size``, ``--trace-file`` and the other
  ``--trace-*``): the same here, with Triton's words, so a command line keeps its meaning;
- **knobs of Triton's C++ internals** that have nothing to act on in Naiad (thread pools of its HTTP
  and SageMaker servers, its pinned and CUDA memory pools, NUMA host policies, peer access, repository
  agent and cache library folders): checked as Triton parses them (a malformed value is still a usage
  error), then named once in the log as having no effect here; ``--frontend-workers`` is Naiad's knob
  for the frontends' parallelism;
- **frontends Naiad does not have** (SageMaker, Vertex AI): their flags are taken, and turning one on
  is refused at start rather than leaving its port silently closed.

Why accept rather than refuse the knobs: a rollout from Triton to Naiad keeps its manifests; a flag that
tunes a pool Naiad does not have changes nothing a client sees, while refusing it stops the pod.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

log = logging.getLogger("naiad.server")

#: Flags whose value is checked and then has no effect here: flag -> what Naiad has instead.
NO_EFFECT = {
    "--http-thread-count": "the HTTP frontend is asynchronous; --frontend-workers sets its processes",
    "--sagemaker-thread-count": "no SageMaker frontend",
    "--vertex-ai-thread-count": "no Vertex AI frontend",
    "--buffer-manager-thread-count": "tensors are copied on the thread that needs them",
    "--pinned-memory-pool-byte-size": "no pinned memory pool (nv_pinned_memory_pool_* report 0)",
    "--cuda-memory-pool-byte-size": "no CUDA memory pool of the server's own (backends allocate)",
    "--cuda-virtual-address-size": "no growable implicit state memory",
    "--enable-peer-access": "no copies between GPUs by the server",
    "--host-policy": "no NUMA or CPU binding of model instances (see --cpu-policy)",
    "--repoagent-directory": "no repository agents",
    "--cache-directory": "the response cache is built in (--cache-config local,size=...)",
    "--sagemaker-port": "no SageMaker frontend",
    "--sagemaker-safe-port-range": "no SageMaker frontend",
    "--vertex-ai-port": "no Vertex AI frontend",
    "--vertex-ai-default-model": "no Vertex AI frontend",
    "--grpc-infer-allocation-pool-size": "no pool of gRPC request states to keep",
    "--grpc-infer-thread-count": "gRPC is served on event loops; --frontend-workers sets their processes",
    "--min-supported-compute-capability": "every GPU CUDA_VISIBLE_DEVICES shows is used",
}


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got '{text}'") from None


def _pair(separator: str, second: type[int] | type[float]) -> Any:
    """``<int><separator><second>``, as Triton's ``ParsePairOption`` reads it."""

    def parse(text: str) -> tuple[int, int | float]:
        first, found, rest = text.partition(separator)
        if not found:
            raise argparse.ArgumentTypeError(
                f"expected <integer>{separator}<{second.__name__}>, got '{text}'"
            )
        try:
            return int(first), second(rest)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected <integer>{separator}<{second.__name__}>, got '{text}'"
            ) from None

    return parse


def _host_policy(text: str) -> str:
    """``<policy_name>,<setting>=<value>``: the form Triton's parser checks (its settings are read later)."""
    name, comma, rest = text.partition(",")
    setting, equals, value = rest.partition("=")
    if not comma or not equals or not name or not setting or not value:
        raise argparse.ArgumentTypeError(
            f"--host-policy option format is '<policy name>,<setting>=<value>'. Got {text}"
        )
    return text


def _infer_threads(integer: Any) -> Any:
    """``--grpc-infer-thread-count``: Triton takes 2 to 128 and refuses anything else at start."""

    def parse(text: str) -> int:
        value = int(integer(text))
        if not 2 <= value <= 128:
            raise argparse.ArgumentTypeError(
                "invalid argument for --grpc_infer_thread_count. Must be in the range 2 to 128."
            )
        return value

    return parse


def _gpu_limit(text: str) -> tuple[int, float]:
    """``<device>:<fraction>``; Triton takes any number (past 1 it never refuses), not a negative one here."""
    device, fraction = _pair(":", float)(text)
    if fraction < 0:
        raise argparse.ArgumentTypeError(f"the fraction must not be negative, got {fraction} in '{text}'")
    return int(device), float(fraction)


def add_flags(p: argparse.ArgumentParser, boolean: Any, integer: Any) -> None:
    """Add the flags (``boolean``, ``integer``: the CLI's parsers of Triton's boolean spellings and of
    integers, so that a value is refused in the same words whatever flag it is given to)."""
    p.add_argument(
        "--id",
        dest="server_id",
        default="triton",
        metavar="STRING",
        help="the server's name in its metadata (GET /v2)",
    )
    p.add_argument(
        "--model-config-name",
        metavar="NAME",
        help="use configs/<NAME>.pbtxt in each model folder where it exists",
    )
    p.add_argument(
        "--model-load-retry-count",
        type=integer,
        default=0,
        metavar="N",
        help="tries after a version's failed load",
    )
    p.add_argument(
        "--model-load-gpu-limit",
        type=_gpu_limit,
        action="append",
        default=[],
        metavar="<device>:<fraction>",
        help="refuse a GPU instance's load past this memory share",
    )
    p.add_argument("--reuse-http-port", type=boolean, default=False, metavar="BOOL")
    # deprecated in Triton, turned into their replacements
    p.add_argument("--strict-model-config", type=boolean, metavar="BOOL")
    p.add_argument("--response-cache-byte-size", type=integer, metavar="BYTES")
    p.add_argument("--trace-file", metavar="PATH")
    p.add_argument("--trace-level", action="append", default=[], metavar="OFF|TIMESTAMPS|TENSORS")
    p.add_argument("--trace-rate", type=integer, metavar="N")
    p.add_argument("--trace-count", type=integer, metavar="N")
    p.add_argument("--trace-log-frequency", type=integer, metavar="N")
    # Triton's internals and frontends Naiad has not
    for flag in (
        "--http-thread-count",
        "--sagemaker-thread-count",
        "--vertex-ai-thread-count",
        "--buffer-manager-thread-count",
        "--sagemaker-port",
        "--vertex-ai-port",
    ):
        p.add_argument(flag, type=integer, metavar="N")
    p.add_argument("--grpc-infer-allocation-pool-size", type=integer, metavar="N")
    p.add_argument("--grpc-infer-thread-count", type=_infer_threads(integer), metavar="N")
    p.add_argument("--min-supported-compute-capability", type=_float, metavar="FLOAT")
    p.add_argument("--pinned-memory-pool-byte-size", type=integer, metavar="BYTES")
    p.add_argument(
        "--cuda-memory-pool-byte-size", type=_pair(":", int), action="append", metavar="<device>:<bytes>"
    )
    p.add_argument(
        "--cuda-virtual-address-size", type=_pair(":", int), action="append", metavar="<device>:<bytes>"
    )
    p.add_argument("--sagemaker-safe-port-range", type=_pair("-", int), metavar="<low>-<high>")
    p.add_argument("--enable-peer-access", type=boolean, metavar="BOOL")
    p.add_argument("--host-policy", type=_host_policy, action="append", metavar="<name>,<setting>=<value>")
    p.add_argument("--repoagent-directory", metavar="PATH")
    p.add_argument("--cache-directory", metavar="PATH")
    p.add_argument("--vertex-ai-default-model", metavar="NAME")
    p.add_argument("--allow-sagemaker", type=boolean, default=False, metavar="BOOL")
    p.add_argument("--allow-vertex-ai", type=boolean, default=False, metavar="BOOL")


def _warn(text: str) -> None:
    print(text, file=sys.stderr)


def settings(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, Any]:
    """What the flags set: Triton's warnings for deprecated ones on stderr, the usage errors Triton
    makes, and the settings (``disable_auto_complete_config`` and ``cache_config`` with the deprecated
    flags folded in, as Triton folds them; the trace flags fold in :func:`trace_items`)."""
    if args.allow_sagemaker:
        parser.error("--allow-sagemaker=true: Naiad has no SageMaker frontend")
    if args.allow_vertex_ai:
        parser.error("--allow-vertex-ai=true: Naiad has no Vertex AI frontend")
    if args.model_config_name is not None and not args.model_config_name:
        parser.print_usage(sys.stderr)
        parser.exit(2, "Error: empty argument for --model-config-name\n")
    if args.model_config_name and any(char.isspace() for char in args.model_config_name):
        parser.error("--model-config-name must not contain a space")
    if args.model_load_retry_count < 0:
        parser.error("--model-load-retry-count must be 0 or more")
    disable_auto_complete = args.disable_auto_complete_config
    if args.strict_model_config is not None:
        _warn(
            "Warning: '--strict-model-config' has been deprecated! Please use "
            "'--disable-auto-complete-config' instead."
        )
        if disable_auto_complete and not args.strict_model_config:
            _warn(
                "Warning: Overriding deprecated '--strict-model-config' from False to True in favor of "
                "'--disable-auto-complete-config'!"
            )
        disable_auto_complete = disable_auto_complete or args.strict_model_config
    cache_config = list(args.cache_config)
    if args.response_cache_byte_size is not None:
        if cache_config:
            parser.print_usage(sys.stderr)
            parser.exit(
                2,
                "Error: Incompatible flags --response-cache-byte-size and --cache-config both "
                "provided. Please provide one or the other.\n",
            )
        size = args.response_cache_byte_size
        if size < 0:
            parser.error("--response-cache-byte-size must be 0 or more")
        _warn(
            "Warning: '--response-cache-byte-size' has been deprecated! This will default to the "
            "'local' cache implementation with the provided byte size for its config. Please use "
            f"'--cache-config' instead. The equivalent --cache-config CLI args would be: "
            f"'--cache-config=local,size={size}'"
        )
        cache_config = [f"local,size={size}"]
    return {
        "server_id": args.server_id,
        "model_config_name": args.model_config_name or "",
        "model_load_retry_count": args.model_load_retry_count,
        "model_load_gpu_limit": dict(args.model_load_gpu_limit),
        "reuse_http_port": args.reuse_http_port,
        "disable_auto_complete_config": disable_auto_complete,
        "cache_config": cache_config,
        "inert_flags": [flag for flag in NO_EFFECT if getattr(args, flag[2:].replace("-", "_")) is not None],
    }


def log_inert(flags: list[str]) -> None:
    """Say at start which of the given flags do nothing here, and what Naiad has instead."""
    for flag in flags:
        log.info("%s has no effect in Naiad: %s", flag, NO_EFFECT[flag])


def trace_items(args: argparse.Namespace) -> list[str]:
    """The deprecated ``--trace-*`` flags as ``--trace-config`` items, with Triton's warnings; they go
    before the ``--trace-config`` items, which override them (levels add up), as in Triton."""
    items: list[str] = []
    deprecated = (
        ("--trace-file", args.trace_file, "triton,file={}", "'--trace-config triton,file=<filepath>"),
        ("--trace-rate", args.trace_rate, "rate={}", "'--trace-config rate=<rate value>"),
        ("--trace-count", args.trace_count, "count={}", "'--trace-config count=<count value>"),
        (
            "--trace-log-frequency",
            args.trace_log_frequency,
            "triton,log-frequency={}",
            "'--trace-config triton,log-frequency=<log frequency value>",
        ),
    )
    for level in args.trace_level:
        _warn(
            "Warning: '--trace-level' has been deprecated and will be removed in future releases. "
            "Please use '--trace-config level=<OFF|TIMESTAMPS|TENSORS> instead."
        )
        items.append(f"level={level}")
    for flag, value, item, replacement in deprecated:
        if value is not None:
            _warn(
                f"Warning: '{flag}' has been deprecated and will be removed in future releases. "
                f"Please use {replacement} instead."
            )
            items.append(item.format(value))
    return items
