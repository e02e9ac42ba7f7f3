"""Server settings: one typed, documented field per ``naiad serve`` flag.

Every field mirrors a ``tritonserver`` flag of the same name (dashes for underscores) and default, so a
Triton command line works unchanged.  The CLI parses flags into this object; nothing else reads argv or
the environment.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path


class ModelControlMode(enum.Enum):
    NONE = "none"
    POLL = "poll"
    EXPLICIT = "explicit"


@dataclass(slots=True)
class ServerSettings:
    model_repositories: list[str] = field(default_factory=list)
    """``--model-repository`` (alias ``--model-store``), repeatable: folders holding model folders, or
    cloud repositories ``s3://bucket/prefix``, ``s3://[http[s]://]host:port/bucket/prefix`` (boto3's
    credential chain) and ``gs://bucket/prefix`` (google-auth's; ``STORAGE_EMULATOR_HOST`` honoured)."""

    repository_cache_dir: Path | None = None
    """``--repository-cache-dir`` (Naiad): where cloud repositories are mirrored, content-addressed and
    keyed by ETag/generation (default: ``<tmp>/naiad-repository-cache``)."""

    http_port: int = 8000
    """``--http-port``: KServe v2 HTTP/REST."""

    grpc_port: int = 8001
    """``--grpc-port``: KServe v2 gRPC (``inference.GRPCInferenceService``)."""

    metrics_port: int = 8002
    """``--metrics-port``: Prometheus ``/metrics``."""

    http_address: str = "0.0.0.0"
    """``--http-address``: interface the HTTP frontend binds."""

    grpc_address: str = "0.0.0.0"
    """``--grpc-address``: interface the gRPC frontend binds."""

    metrics_address: str = "0.0.0.0"
    """``--metrics-address``: interface the metrics endpoint binds."""

    openai_port: int | None = None
    """``--openai-port`` (Naiad): serve OpenAI's completions and chat completions API on this port (off
    when unset; Triton's OpenAI frontend listens on 9000)."""

    openai_address: str = "0.0.0.0"
    """``--openai-address`` (Naiad): interface the OpenAI frontend binds."""

    allow_http: bool = True
    """``--allow-http``: serve HTTP/REST at all."""

    allow_grpc: bool = True
    """``--allow-grpc``: serve gRPC at all."""

    allow_metrics: bool = True
    """``--allow-metrics``: serve Prometheus metrics at all."""

    model_control_mode: ModelControlMode = ModelControlMode.NONE
    """``--model-control-mode``: NONE loads everything at start and ignores later changes; POLL also
    applies repository changes; EXPLICIT loads the ``--load-model`` list, then what the repository
    API asks."""

    load_models: list[str] = field(default_factory=list)
    """``--load-model``, repeatable: models to load at start in EXPLICIT mode (``*`` for all)."""

    repository_poll_secs: int = 15
    """``--repository-poll-secs``: seconds between repository scans in POLL mode."""

    model_namespacing: bool = False
    """``--model-namespacing``: each ``--model-repository`` is a namespace, so repositories may hold
    models of the same name (a name several hold is then ambiguous to requests; an ensemble's steps
    are looked for in its own repository first), as Triton's option does."""

    model_memory_budget: int | None = None
    """``--model-memory-budget`` (Naiad; env ``NAIAD_MODEL_MEMORY_BUDGET``): host memory, in bytes, the
    loaded models may hold; a load that would pass it first unloads the least recently used models loaded
    on demand (see :mod:`naiad.repository.residency`).  None: no budget, no eviction."""

    model_gpu_memory_budget: int | None = None
    """``--model-gpu-memory-budget`` (Naiad; env ``NAIAD_MODEL_GPU_MEMORY_BUDGET``): the same per GPU,
    applied to the measured GPU footprint where a GPU exists."""

    load_on_demand: list[str] = field(default_factory=list)
    """``--load-on-demand`` (Naiad; env ``NAIAD_LOAD_ON_DEMAND``, comma-separated), repeatable: fnmatch
    patterns of model names that the first request naming them loads, in every control mode."""

    on_demand_load_timeout_secs: float = 60
    """``--on-demand-load-timeout-secs`` (Naiad): how long a request waits for an on-demand load before
    it fails with UNAVAILABLE (the load carries on)."""

    min_residency_secs: float = 30
    """``--min-residency-secs`` (Naiad): a model loaded less than this long ago is never evicted."""

    eviction_policy: str = "lru"
    """``--eviction-policy`` (Naiad): which evictable models a load past the budget unloads first:
    ``lru``, the least recently used, or ``gdsf``, the fewest requests x load seconds per MiB held since
    they loaded
    (GreedyDual-Size-Frequency; see :class:`naiad.repository.residency.Residency`)."""

    peers_file: Path | None = None
    """``--peers-file`` (Naiad; env ``NAIAD_PEERS_FILE``): JSON naming which peer servers hold each model
    (``{"models": {"<model>": ["host:httpport:grpcport", ...]}}``, written by the operator); a request for
    a model not served here is forwarded to one of them (see :mod:`naiad.repository.peers`).  Read again
    when it changes."""

    strict_readiness: bool = True
    """``--strict-readiness``: ready only while every model that should be loaded is READY; when
    false, ready as soon as the server has started."""

    exit_on_error: bool = True
    """``--exit-on-error``: as Triton, the server exits (status 1, "failed to load all models") when a
    model it loads at start fails to load; when false, it serves the others and lists the failure in
    the repository index (the operator's pods run so, to report each model's state)."""

    exit_timeout_secs: int = 30
    """``--exit-timeout-secs``: how long SIGTERM waits for in-flight requests before exiting."""

    disable_auto_complete_config: bool = False
    """``--disable-auto-complete-config``: take config.pbtxt as written; no filling from model files."""

    backend_directory: Path = Path("/opt/tritonserver/backends")
    """``--backend-directory``: where Python-based backends live, as in Triton: a model whose
    ``backend`` is none of Naiad's runs ``<backend-directory>/<backend>/model.py`` on the Python
    backend (the vLLM backend's layout)."""

    backend_config: list[str] = field(default_factory=list)
    """``--backend-config``: Triton's ``<backend>,<setting>=<value>`` (or a global ``<setting>=<value>``)
    options, accepted as Triton accepts them; Naiad's backends read none (see ``backend_configs``)."""

    log_verbose: int = 0
    """``--log-verbose``: verbose logging level (0 = off)."""

    http_max_input_size: int = 64 * 1024 * 1024
    """``--http-max-input-size``: largest HTTP request body accepted, in bytes (Triton's 64 MiB)."""

    model_load_thread_count: int = 4
    """``--model-load-thread-count``: models loaded in parallel."""

    grpc_max_message_size: int = 2**31 - 1
    """``--grpc-max-message-size``: largest gRPC message received or sent, in bytes.  Triton hard-codes
    INT32_MAX; this flag (not a tritonserver one) makes the limit testable and lowerable."""

    grpc_infer_response_compression_level: str = "none"
    """``--grpc-infer-response-compression-level``: ``none``, ``low``, ``medium`` or ``high``;
    compresses ModelInfer/ModelStreamInfer responses (gzip for low, deflate above, as gRPC core ranks
    them)."""

    grpc_keepalive_time: int = 7_200_000
    """``--grpc-keepalive-time``: milliseconds between keepalive pings on an idle transport."""

    grpc_keepalive_timeout: int = 20_000
    """``--grpc-keepalive-timeout``: milliseconds to wait for a ping acknowledgement before closing."""

    grpc_keepalive_permit_without_calls: bool = False
    """``--grpc-keepalive-permit-without-calls``: allow keepalive pings while no call is in flight."""

    grpc_http2_max_pings_without_data: int = 2
    """``--grpc-http2-max-pings-without-data``: pings sent without data before pinging stops (0: no
    limit)."""

    grpc_http2_min_recv_ping_interval_without_data: int = 300_000
    """``--grpc-http2-min-recv-ping-interval-without-data``: milliseconds below which a client ping
    without data counts as a ping strike."""

    grpc_http2_max_ping_strikes: int = 2
    """``--grpc-http2-max-ping-strikes``: bad pings tolerated before GOAWAY (0: any number)."""

    grpc_max_connection_age: int | None = None
    """``--grpc-max-connection-age``: milliseconds a connection may live (unset: forever)."""

    grpc_max_connection_age_grace: int | None = None
    """``--grpc-max-connection-age-grace``: milliseconds granted to calls on an aged connection."""

    reuse_grpc_port: bool = False
    """``--reuse-grpc-port``: let several servers listen on the gRPC port (SO_REUSEPORT)."""

    reuse_http_port: bool = False
    """``--reuse-http-port``: let several servers listen on the HTTP port (SO_REUSEPORT)."""

    server_id: str = "triton"
    """``--id``: the server's name in its metadata (``GET /v2``, ``ServerMetadata``), as Triton's."""

    model_config_name: str = ""
    """``--model-config-name``: a model folder's ``configs/<name>.pbtxt`` is its configuration where that
    file exists, ``config.pbtxt`` elsewhere (one repository for several kinds of machine)."""

    model_load_retry_count: int = 0
    """``--model-load-retry-count``: a version that fails to load is tried again this many times, at
    once (a model whose start depends on something that may be briefly away)."""

    inert_flags: list[str] = field(default_factory=list)
    """Flags of ``tritonserver`` given that tune what Naiad does not have (thread and memory pools):
    accepted, checked, and named in the log at start (:mod:`naiad.triton_flags`)."""

    model_load_gpu_limit: dict[int, float] = field(default_factory=dict)
    """``--model-load-gpu-limit <device>:<fraction>``: a GPU instance's load fails once the device's
    used memory exceeds this share of its total (read from NVML after the instance is created)."""

    frontend_workers: int = 0
    """``--frontend-workers`` (Naiad; env ``NAIAD_FRONTEND_WORKERS``): processes that serve HTTP and gRPC
    over one engine (0: the single-process server).  The CLI's default, ``auto``, is 0 on machines with
    at most two usable cores and half of them (at most 16) elsewhere (see docs/architecture.md)."""

    cpu_policy: str = "batch"
    """``--cpu-policy`` (Naiad; env ``NAIAD_CPU_POLICY``): the Linux scheduling policy of every thread
    and process of the server, ``batch`` (``SCHED_BATCH``: a woken thread does not preempt the one that
    woke it, so the hand-offs between a request's threads are batched on a busy core) or ``normal``
    (``SCHED_OTHER``); see :mod:`naiad.core.cpu_policy`."""

    allow_cpu_metrics: bool = True
    """``--allow-cpu-metrics``: publish ``nv_cpu_*`` (Linux, from ``/proc``)."""

    allow_gpu_metrics: bool = True
    """``--allow-gpu-metrics``: publish ``nv_gpu_*`` where NVML finds a GPU (``nvidia-ml-py``)."""

    metrics_interval_ms: int = 2000
    """``--metrics-interval-ms``: how often the per-interval gauges (CPU, GPU) are sampled."""

    metrics_config: list[str] = field(default_factory=list)
    """``--metrics-config``, repeatable ``key=value``: ``counter_latencies``, ``histogram_latencies``,
    ``summary_latencies``, ``summary_quantiles`` (see :mod:`naiad.metrics.config`)."""

    log_info: bool = True
    """``--log-info``: write INFO lines."""

    log_warning: bool = True
    """``--log-warning``: write WARNING lines."""

    log_error: bool = True
    """``--log-error``: write ERROR lines."""

    log_format: str = "default"
    """``--log-format``: ``default`` (Triton's ``I1121 20:19:06.136285 ...`` lines), ``ISO8601``, or
    ``json`` (Naiad: one JSON object per line, for log pipelines)."""

    log_file: Path | None = None
    """``--log-file``: append the log to this file instead of standard error."""

    trace_config: list[str] = field(default_factory=list)
    """``--trace-config``, repeatable: ``<setting>=<value>`` (``level``, ``rate``, ``count``, ``mode``) or
    ``<mode>,<setting>=<value>`` (``triton,file=``, ``triton,log-frequency=``, ``opentelemetry,url=``,
    ``opentelemetry,resource=``, ``opentelemetry,bsp_*=``), as tritonserver takes them."""

    allow_client_shm: bool = False
    """``--allow-client-shm``: let clients register system shared memory regions (off by default, as in
    current Triton: a registered region lets a client have the server read and write a shared memory
    object by name)."""

    cache_config: list[str] = field(default_factory=list)
    """``--cache-config``, repeatable: ``local,size=<bytes>``, or ``redis,host=<host>`` and
    ``redis,port=<port>`` (and Triton's other Redis settings), enables the response cache for models
    whose config sets ``response_cache { enable: true }`` (see :mod:`naiad.scheduling.cache`)."""

    rate_limit: str = "off"
    """``--rate-limit``: ``off`` or ``execution_count`` (instances wait for their ``rate_limiter``
    resources; see :mod:`naiad.scheduling.rate_limiter`)."""

    rate_limit_resources: list[str] = field(default_factory=list)
    """``--rate-limit-resource``, repeatable: ``<name>:<count>[:<device>]``."""

    http_restricted_apis: list[str] = field(default_factory=list)
    """``--http-restricted-api``, repeatable: ``<api>[,<api>...]:<header>=<value>``."""

    grpc_restricted_protocols: list[str] = field(default_factory=list)
    """``--grpc-restricted-protocol``, repeatable: as above; gRPC clients send the header as
    ``triton-grpc-protocol-<header>``, as in Triton."""

    auth_key_file: Path | None = None
    """``--auth-key-file`` (Naiad): bearer keys with scopes, for HTTP and gRPC (see
    :mod:`naiad.frontends.access.keyring`); reloaded when it changes."""

    http_header_forward_pattern: str | None = None
    """``--http-header-forward-pattern``: HTTP headers matching it become inference request parameters."""

    grpc_header_forward_pattern: str | None = None
    """``--grpc-header-forward-pattern``: gRPC metadata matching it becomes inference request parameters."""

    http_use_ssl: bool = False
    """``--http-use-ssl`` (Naiad, mirrors gRPC's): serve HTTPS with the two files below."""

    http_use_ssl_mutual: bool = False
    """``--http-use-ssl-mutual``: also require client certificates signed by ``--http-root-cert``."""

    http_server_cert: Path | None = None
    """``--http-server-cert``: PEM server certificate (chain)."""

    http_server_key: Path | None = None
    """``--http-server-key``: PEM server private key."""

    http_root_cert: Path | None = None
    """``--http-root-cert``: PEM root certificate that client certificates must chain to."""

    grpc_use_ssl: bool = False
    """``--grpc-use-ssl``: serve gRPC over TLS."""

    grpc_use_ssl_mutual: bool = False
    """``--grpc-use-ssl-mutual``: TLS with client certificates (implies ``--grpc-use-ssl``)."""

    grpc_server_cert: Path | None = None
    """``--grpc-server-cert``: PEM server certificate (chain)."""

    grpc_server_key: Path | None = None
    """``--grpc-server-key``: PEM server private key."""

    grpc_root_cert: Path | None = None
    """``--grpc-root-cert``: PEM root certificate that client certificates must chain to."""
