"""Server options: one frozen, resolved object built once (from the CLI or the Python API)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

# The example repositories in examples/ that wheels carry: the one served when no
# --model-repository is given, and the OpenAI front end's models, served beside it then
# when that front end is on.
EXAMPLE_MODELS = "model_repository"
OPENAI_EXAMPLE_MODELS = "openai_models"


def bundled_repository(name: str = EXAMPLE_MODELS) -> Path:
    """An example repository served when no --model-repository is given.

    Wheels carry a copy under ``_bundled/`` (setup.py puts it there); a source checkout
    (editable install) serves ``examples/<name>`` itself.
    """
    package_dir = Path(__file__).resolve().parent
    packaged = package_dir / "_bundled" / name
    if packaged.is_dir():
        return packaged
    return package_dir.parents[1] / "examples" / name


class ModelControlMode(enum.Enum):
    NONE = "none"
    POLL = "poll"
    EXPLICIT = "explicit"


def _empty_backend_config() -> Mapping[str, Mapping[str, str]]:
    return MappingProxyType({})


class CompressionLevel(enum.Enum):
    """``--grpc-infer-response-compression-level``; the values are gRPC core's levels."""

    NONE = 0
    LOW = 1
    MEDIUM = 2
    HIGH = 3


@dataclass(frozen=True)
class GrpcOptions:
    """The gRPC endpoint's transport settings (tritonserver's ``--grpc-*`` flags and defaults)."""

    # Accepted for compatibility: the gRPC transport keeps no message pool to size.
    infer_allocation_pool_size: int = 8
    response_compression_level: CompressionLevel = CompressionLevel.NONE
    keepalive_time_ms: int = 7_200_000
    keepalive_timeout_ms: int = 20_000
    keepalive_permit_without_calls: bool = False
    http2_max_pings_without_data: int = 2
    http2_min_recv_ping_interval_without_data_ms: int = 300_000
    http2_max_ping_strikes: int = 2
    max_connection_age_ms: int | None = None  # None: connections live on
    max_connection_age_grace_ms: int | None = None
    reuse_port: bool = False
    # --grpc-header-forward-pattern: request headers (metadata) whose names match reach the
    # model as request parameters; None: none do.
    header_forward_pattern: str | None = None
    use_ssl: bool = False
    use_ssl_mutual: bool = False  # implies use_ssl, and requires client certificates
    server_cert: Path | None = None
    server_key: Path | None = None
    root_cert: Path | None = None
    # Beyond these gRPC core answers RESOURCE_EXHAUSTED (Triton's: INT32_MAX both ways).
    max_receive_message_size: int = 2**31 - 1
    max_send_message_size: int = 2**31 - 1
    # Calls in flight on one connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS): a client
    # past it waits for a free stream.
    max_concurrent_streams: int = 1024
    max_connections: int = 1024  # connections at once; further ones are closed at accept


@dataclass(frozen=True)
class TlsOptions:
    """TLS for a front end, in the style of tritonserver's ``--grpc-use-ssl*`` flags."""

    use_ssl: bool = False
    use_ssl_mutual: bool = False  # implies use_ssl, and requires client certificates
    server_cert: Path | None = None
    server_key: Path | None = None
    root_cert: Path | None = None  # the CAs client certificates must chain to

    @property
    def enabled(self) -> bool:
        return self.use_ssl or self.use_ssl_mutual


@dataclass(frozen=True)
class LimitOptions:
    """What one client may ask of the server (docs/security.md, "Limits").

    Each limit is a flag; a request past one is refused with a 4xx answer (HTTP) or
    RESOURCE_EXHAUSTED / INVALID_ARGUMENT (gRPC) and the server goes on serving the others.
    """

    http_max_header_size: int = 64 << 10  # request line and headers
    http_max_connections: int = 1024  # further connections are answered 503 and closed
    # Requests one connection may have waiting (pipelined) behind the one that runs.
    http_max_pipelined_requests: int = 64
    # A request's bytes, head and body, must all arrive within this many seconds of its
    # first byte (slowloris); 0: no limit.
    http_request_timeout_s: float = 60.0
    # An HTTP JSON body: nesting of arrays and objects, and values in all.
    http_max_json_depth: int = 128
    http_max_json_elements: int = 1 << 22
    # Any input tensor, whichever way it arrives (JSON, binary, shared memory).
    max_tensor_byte_size: int = 1 << 31
    max_tensor_element_count: int = 1 << 31
    # Elements of a BYTES input, checked before they are decoded.
    max_bytes_elements: int = 1 << 22


# Triton's default summary quantiles and their allowed errors (``summary_quantiles``).
DEFAULT_SUMMARY_QUANTILES: tuple[tuple[float, float], ...] = (
    (0.5, 0.05),
    (0.9, 0.01),
    (0.95, 0.001),
    (0.99, 0.001),
    (0.999, 0.001),
)
# Default buckets (ms) of ``nv_inference_first_response_histogram_ms``.
DEFAULT_FIRST_RESPONSE_BUCKETS_MS: tuple[float, ...] = (100.0, 500.0, 2000.0, 5000.0)
# Default buckets (µs) of the latency histograms, Triton's (core's metric_model_reporter.h).
DEFAULT_DURATION_BUCKETS_US: Mapping[str, tuple[float, ...]] = MappingProxyType(
    {
        "nv_inference_request_duration_histogram_us": (1000, 5000, 25000, 50000, 100000),
        "nv_inference_queue_duration_histogram_us": (100, 1000, 5000, 10000, 50000),
        "nv_inference_compute_input_duration_histogram_us": (100, 500, 1000, 5000, 10000),
        "nv_inference_compute_infer_duration_histogram_us": (1000, 5000, 25000, 50000, 100000),
        "nv_inference_compute_output_duration_histogram_us": (100, 500, 1000, 5000, 10000),
    }
)


@dataclass(frozen=True)
class MetricsOptions:
    """The Prometheus endpoint's groups and latency families (``--metrics-*`` flags)."""

    allow_gpu_metrics: bool = True
    allow_cpu_metrics: bool = True
    interval_ms: int = 2000  # how often the CPU and GPU gauges are refreshed
    counter_latencies: bool = True  # the *_duration_us counters
    summary_latencies: bool = False  # the *_summary_us summaries
    summary_quantiles: tuple[tuple[float, float], ...] = DEFAULT_SUMMARY_QUANTILES
    # The latency histograms (request, queue, compute) and the first-response histogram.
    # On by default here (Triton's default is off): histograms aggregate across replicas.
    histogram_latencies: bool = True
    # --metrics-config <histogram family>=<bound>,...: the server's own bucket bounds for a
    # histogram family (a model's model_metrics still overrides them for that model).
    histogram_buckets: Mapping[str, tuple[float, ...]] = field(
        default_factory=lambda: MappingProxyType({})
    )


class LogFormat(enum.Enum):
    DEFAULT = "default"
    ISO8601 = "ISO8601"


@dataclass(frozen=True)
class LogOptions:
    """The server log at start (``--log-*``); the logging extension changes it at run time."""

    info: bool = True
    warning: bool = True
    error: bool = True
    verbose: int = 0
    format: LogFormat = LogFormat.DEFAULT
    file: Path | None = None  # None: standard error


class TraceMode(enum.Enum):
    TRITON = "triton"
    OPENTELEMETRY = "opentelemetry"


@dataclass(frozen=True)
class TraceOptions:
    """Request tracing at start (``--trace-config``); the trace extension changes it."""

    mode: TraceMode = TraceMode.TRITON
    level: frozenset[str] = frozenset()  # {"TIMESTAMPS", "TENSORS"}; empty: OFF
    rate: int = 1000  # trace one request in every ``rate``
    count: int = -1  # how many traces to take; -1: no limit
    file: Path | None = None  # triton mode: where the JSON goes
    log_frequency: int = 0  # triton mode: write every N traces to <file>.<n>; 0: at the end
    # opentelemetry mode: url, resource (key=value,...), bsp_* settings, as given.
    opentelemetry: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


DEFAULT_CUDA_MEMORY_POOL_BYTE_SIZE = 64 << 20


@dataclass(frozen=True)
class MemoryOptions:
    """Client shared memory and the staging pools (``--allow-client-shm``,
    ``--pinned-memory-pool-byte-size``, ``--cuda-memory-pool-byte-size``)."""

    # Triton 2.73's default: off (2.51 and older allowed client shared memory by default).
    allow_client_shm: bool = False
    pinned_memory_pool_byte_size: int = 256 << 20
    # device id -> bytes; devices not listed get DEFAULT_CUDA_MEMORY_POOL_BYTE_SIZE
    cuda_memory_pool_byte_size: Mapping[int, int] = field(
        default_factory=lambda: MappingProxyType({})
    )


class RateLimitMode(enum.Enum):
    OFF = "off"
    EXECUTION_COUNT = "execution_count"


@dataclass(frozen=True)
class RateLimitResource:
    """``--rate-limit-resource=<name>:<count>[:<device>]``; device None: every device."""

    name: str
    count: int
    device: int | None = None


@dataclass(frozen=True)
class RateLimiterOptions:
    """``--rate-limit`` and ``--rate-limit-resource``."""

    mode: RateLimitMode = RateLimitMode.OFF
    resources: tuple[RateLimitResource, ...] = ()


@dataclass(frozen=True)
class CacheOptions:
    """``--cache-config <cache>,<key>=<value>`` (or the deprecated
    ``--response-cache-byte-size``) and ``--cache-directory``. ``name`` None: no cache."""

    name: str | None = None  # "local"; a plug-in cache's name otherwise
    settings: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    directory: Path | None = None

    @property
    def enabled(self) -> bool:
        return self.name is not None


# --- --http-restricted-api / --grpc-restricted-protocol (parsed and checked in restricted.py)


class ApiCategory(enum.Enum):
    """Triton's restricted categories (``RESTRICTED_CATEGORY_NAMES``), in its order."""

    HEALTH = "health"
    METADATA = "metadata"
    INFERENCE = "inference"
    SHARED_MEMORY = "shared-memory"
    MODEL_CONFIG = "model-config"
    MODEL_REPOSITORY = "model-repository"
    STATISTICS = "statistics"
    TRACE = "trace"
    LOGGING = "logging"


@dataclass(frozen=True)
class Restriction:
    header: str  # the header (HTTP) or metadata key (gRPC, prefixed) a request must carry
    value: str  # ... with exactly this value


def _no_restrictions() -> Mapping[ApiCategory, Restriction]:
    return MappingProxyType({})


@dataclass(frozen=True)
class RestrictedApis:
    """The restricted categories of one protocol and what each requires."""

    by_category: Mapping[ApiCategory, Restriction] = field(default_factory=_no_restrictions)

    def get(self, category: ApiCategory) -> Restriction | None:
        return self.by_category.get(category)

    def __bool__(self) -> bool:
        return bool(self.by_category)


@dataclass(frozen=True)
class RestrictedOptions:
    """``--http-restricted-api`` and ``--grpc-restricted-protocol``, resolved."""

    http: RestrictedApis = field(default_factory=RestrictedApis)
    grpc: RestrictedApis = field(default_factory=RestrictedApis)


@dataclass(frozen=True)
class ServerOptions:
    model_repositories: tuple[Path, ...] = ()
    server_id: str = "triton"

    allow_http: bool = True
    http_address: str = "0.0.0.0"
    http_port: int = 8000
    http_max_input_size: int = 64 * 1024 * 1024
    # An idle keep-alive connection (no request since its last answer) is closed after this
    # many seconds; 0 keeps idle connections open, as Triton does.
    http_keepalive_timeout_s: float = 300.0
    reuse_http_port: bool = False  # SO_REUSEPORT: several servers share the port
    # --http-header-forward-pattern: headers whose names match reach the model as request
    # parameters; None: none do.
    http_header_forward_pattern: str | None = None
    http_tls: TlsOptions = field(default_factory=TlsOptions)
    # --busy-poll-us: after the event loop answers a request itself, it polls its sockets
    # this long for the next one instead of sleeping (frontends/busy_poll.py); 0: never.
    busy_poll_us: int = 100
    # --gc-threshold: Python's generation-0 collection threshold while serving (the number
    # of new container objects, less those freed, that starts a collection); 0: Python's
    # own (700). Requests waiting in a batcher keep their objects alive across many others'
    # allocations, so the default collects, and every tenth time looks at older objects
    # too, about once per 50 requests at 64 in flight (docs/configuration.md).
    gc_threshold: int = 10_000
    limits: LimitOptions = field(default_factory=LimitOptions)
    # --debug-live-objects: GET /v2/debug/live_objects answers a census of what requests
    # leave behind (service/census.py), for leak checks; off, the path does not exist.
    debug_live_objects: bool = False

    # The OpenAI-compatible front end (frontends/openai, docs/openai.md): a listener of its
    # own with the HTTP settings above; off unless asked for.
    allow_openai: bool = False
    openai_address: str | None = None  # None: the HTTP address
    openai_port: int = 9000

    allow_grpc: bool = True
    grpc_address: str = "0.0.0.0"
    grpc_port: int = 8001
    grpc: GrpcOptions = field(default_factory=GrpcOptions)
    # --http-restricted-api / --grpc-restricted-protocol
    restricted: RestrictedOptions = field(default_factory=RestrictedOptions)
    memory: MemoryOptions = field(default_factory=MemoryOptions)

    allow_metrics: bool = True
    metrics_address: str | None = None  # None: the HTTP address
    metrics_port: int = 8002
    metrics: MetricsOptions = field(default_factory=MetricsOptions)

    model_control_mode: ModelControlMode = ModelControlMode.NONE
    load_models: tuple[str, ...] = ()
    repository_poll_secs: int = 15
    model_config_name: str | None = None
    disable_auto_complete_config: bool = False
    strict_readiness: bool = True
    exit_on_error: bool = True
    exit_timeout_secs: int = 30
    # --workers: how many server processes share the ports (each worker's options say it).
    workers: int = 1
    model_load_thread_count: int = 4  # models (and versions) loading at once
    model_load_retry_count: int = 0  # further attempts at a version that failed to load
    model_namespacing: bool = False  # one namespace per repository: a name may repeat
    # GPUs below it are not used (Triton's default with GPU support: 6.0).
    min_supported_compute_capability: float = 6.0
    # device id -> fraction of its memory in use past which a model load is rejected
    model_load_gpu_limit: Mapping[int, float] = field(default_factory=lambda: MappingProxyType({}))
    log: LogOptions = field(default_factory=LogOptions)
    trace: TraceOptions = field(default_factory=TraceOptions)
    # backend name ("" for global keys) -> key -> value, from --backend-config
    backend_config: Mapping[str, Mapping[str, str]] = field(default_factory=_empty_backend_config)
    cache: CacheOptions = field(default_factory=CacheOptions)
    rate_limiter: RateLimiterOptions = field(default_factory=RateLimiterOptions)
    # --backend-directory: a folder of backend plug-ins (one folder per backend name)
    backend_directory: Path | None = None
    # --repoagent-directory: a folder of repository agent plug-ins (one per agent name)
    repoagent_directory: Path | None = None

    def backend_settings(self, backend: str) -> Mapping[str, str]:
        return self.backend_config.get(backend, MappingProxyType({}))
