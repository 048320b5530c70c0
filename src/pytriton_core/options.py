"""Server options: one frozen, resolved object built once (from the CLI or the Python API)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType


def bundled_repository() -> Path:
    """The example repository served when no --model-repository is given.

    Wheels carry a copy under ``_bundled/`` (setup.py puts it there); a source checkout
    (editable install) serves ``examples/model_repository`` itself.
    """
    package_dir = Path(__file__).resolve().parent
    packaged = package_dir / "_bundled" / "model_repository"
    if packaged.is_dir():
        return packaged
    return package_dir.parents[1] / "examples" / "model_repository"


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

    # Accepted for compatibility: grpc.aio allocates request and response objects per call.
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
    use_ssl: bool = False
    use_ssl_mutual: bool = False  # implies use_ssl, and requires client certificates
    server_cert: Path | None = None
    server_key: Path | None = None
    root_cert: Path | None = None


@dataclass(frozen=True)
class ServerOptions:
    model_repositories: tuple[Path, ...] = ()
    server_id: str = "triton"

    allow_http: bool = True
    http_address: str = "0.0.0.0"
    http_port: int = 8000
    http_max_input_size: int = 64 * 1024 * 1024

    allow_grpc: bool = True
    grpc_address: str = "0.0.0.0"
    grpc_port: int = 8001
    grpc: GrpcOptions = field(default_factory=GrpcOptions)

    allow_metrics: bool = True
    metrics_address: str | None = None  # None: the HTTP address
    metrics_port: int = 8002

    model_control_mode: ModelControlMode = ModelControlMode.NONE
    load_models: tuple[str, ...] = ()
    repository_poll_secs: int = 15
    model_config_name: str | None = None
    disable_auto_complete_config: bool = False
    strict_readiness: bool = True
    exit_on_error: bool = True
    exit_timeout_secs: int = 30
    log_verbose: int = 0
    # backend name ("" for global keys) -> key -> value, from --backend-config
    backend_config: Mapping[str, Mapping[str, str]] = field(default_factory=_empty_backend_config)

    def backend_settings(self, backend: str) -> Mapping[str, str]:
        return self.backend_config.get(backend, MappingProxyType({}))
