"""``pytriton-server``: tritonserver's command line, for what this server implements."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import MappingProxyType

import uvloop

from pytriton_core.backends.settings import backend_config_notes
from pytriton_core.cli_extensions import add_extension_arguments, extension_options
from pytriton_core.cli_limits import add_limit_arguments, http_tls_options, limit_options
from pytriton_core.cli_restricted import add_restricted_arguments, restricted_options
from pytriton_core.cli_server_flags import (
    add_server_flag_arguments,
    server_flag_options,
    startup_notes,
)
from pytriton_core.cli_telemetry import add_telemetry_arguments, telemetry_options
from pytriton_core.cli_workers import (
    add_worker_arguments,
    refusals,
    worker_command,
)
from pytriton_core.errors import ServerError
from pytriton_core.logging_settings import LogControl
from pytriton_core.memory.allocator import keep_freed_tensor_memory
from pytriton_core.options import (
    OPENAI_EXAMPLE_MODELS,
    CompressionLevel,
    GrpcOptions,
    MemoryOptions,
    ModelControlMode,
    ServerOptions,
    bundled_repository,
)
from pytriton_core.server import ServerRuntime
from pytriton_core.workers.seat import WorkerSeat
from pytriton_core.workers.sequencer import DEFAULT_CHANGE_TIMEOUT_S
from pytriton_core.workers.supervisor import Supervisor

log = logging.getLogger("pytriton_core")

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (true/false), got '{text}'")


def _backend_config(text: str) -> tuple[str, str, str]:
    """``<backend>,<key>=<value>`` or a global ``<key>=<value>``."""
    backend, _, setting = text.rpartition(",")
    key, sep, value = setting.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(
            f"--backend-config expects <backend>,<setting>=<value>, got '{text}'"
        )
    return backend, key, value


def _false_only(text: str) -> bool:
    if _bool(text):
        raise argparse.ArgumentTypeError("this server has no such front end: only false works")
    return False


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pytriton-server",
        description="A Triton-compatible inference server (tritonserver's flags).",
        allow_abbrev=False,
    )
    add = parser.add_argument
    add(
        "--model-repository",
        "--model-store",
        dest="model_repository",
        action="append",
        type=Path,
        metavar="PATH",
        help="model repository folder (repeatable); default: the bundled examples",
    )
    add("--id", default="triton", help="server identifier reported in server metadata")
    add("--allow-http", type=_bool, default=True, metavar="BOOL")
    add("--http-address", default="0.0.0.0")
    add("--http-port", type=int, default=8000)
    add("--http-max-input-size", type=int, default=64 * 1024 * 1024, metavar="BYTES")
    # Not tritonserver's (its OpenAI front end is a process of its own, with --openai-port):
    # the same API on a port of this server (docs/openai.md).
    add(
        "--allow-openai",
        type=_bool,
        default=False,
        metavar="BOOL",
        help="serve the OpenAI-compatible API (/v1/...) on a port of its own",
    )
    add("--openai-address", default=None, help="default: the HTTP address")
    add("--openai-port", type=int, default=None, help="default: 9000")
    add_limit_arguments(parser, _bool)
    add("--allow-grpc", type=_bool, default=True, metavar="BOOL")
    add("--grpc-address", default="0.0.0.0")
    add("--grpc-port", type=int, default=8001)
    _add_grpc_arguments(parser)
    add_restricted_arguments(parser)
    _add_memory_arguments(parser)
    add("--allow-metrics", type=_bool, default=True, metavar="BOOL")
    add("--metrics-address", default=None)
    add("--metrics-port", type=int, default=8002)
    add_telemetry_arguments(parser, _bool)
    add("--model-control-mode", choices=[m.value for m in ModelControlMode], default="none")
    add("--load-model", action="append", default=[], metavar="NAME")
    add("--repository-poll-secs", type=int, default=15)
    add("--model-config-name", default=None)
    add(
        "--strict-model-config",
        type=_bool,
        default=None,
        metavar="BOOL",
        help="deprecated: true disables auto-complete",
    )
    add("--disable-auto-complete-config", action="store_true")
    add("--strict-readiness", type=_bool, default=True, metavar="BOOL")
    add("--exit-on-error", type=_bool, default=True, metavar="BOOL")
    add("--exit-timeout-secs", type=int, default=30)
    add(
        "--backend-config",
        action="append",
        type=_backend_config,
        default=[],
        metavar="<backend>,<key>=<value>",
    )
    add_extension_arguments(parser)
    # tritonserver's front ends this server does not have, accepted when off: manifests
    # written for tritonserver pass them (KServe ModelMesh's Triton runtime:
    # --allow-sagemaker=false).
    for flag in ("--allow-sagemaker", "--allow-vertex-ai"):
        add(flag, type=_false_only, default=False, metavar="false")
    add_server_flag_arguments(parser, _bool)
    add_worker_arguments(parser)
    return parser


def _compression_level(text: str) -> CompressionLevel:
    try:
        return CompressionLevel[text.upper()]
    except KeyError:
        raise argparse.ArgumentTypeError(
            f"expected none, low, medium or high, got '{text}'"
        ) from None


# tritonserver's gRPC transport flags: the GrpcOptions field each sets (its default is
# the field's) and how to read the value.
_GRPC_FLAGS: dict[str, tuple[str, Callable[[str], object]]] = {
    "--grpc-infer-allocation-pool-size": ("infer_allocation_pool_size", int),
    "--grpc-infer-response-compression-level": ("response_compression_level", _compression_level),
    "--grpc-keepalive-time": ("keepalive_time_ms", int),
    "--grpc-keepalive-timeout": ("keepalive_timeout_ms", int),
    "--grpc-keepalive-permit-without-calls": ("keepalive_permit_without_calls", _bool),
    "--grpc-http2-max-pings-without-data": ("http2_max_pings_without_data", int),
    "--grpc-http2-min-recv-ping-interval-without-data": (
        "http2_min_recv_ping_interval_without_data_ms",
        int,
    ),
    "--grpc-http2-max-ping-strikes": ("http2_max_ping_strikes", int),
    "--grpc-max-connection-age": ("max_connection_age_ms", int),
    "--grpc-max-connection-age-grace": ("max_connection_age_grace_ms", int),
    "--reuse-grpc-port": ("reuse_port", _bool),
    "--grpc-use-ssl": ("use_ssl", _bool),
    "--grpc-use-ssl-mutual": ("use_ssl_mutual", _bool),
    "--grpc-server-cert": ("server_cert", Path),
    "--grpc-server-key": ("server_key", Path),
    "--grpc-root-cert": ("root_cert", Path),
    # Not tritonserver's (it has none): the limits of docs/security.md.
    "--grpc-max-receive-message-size": ("max_receive_message_size", int),
    "--grpc-max-send-message-size": ("max_send_message_size", int),
    "--grpc-max-concurrent-streams": ("max_concurrent_streams", int),
    "--grpc-max-connections": ("max_connections", int),
}
_GRPC_DEST = "grpc_option_"


_METAVARS: dict[object, str] = {
    int: "INT",
    _bool: "BOOL",
    Path: "PEM_FILE",
    _compression_level: "{none,low,medium,high}",
}


def _add_grpc_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = GrpcOptions()
    for flag, (option, parse) in _GRPC_FLAGS.items():
        parser.add_argument(
            flag,
            dest=_GRPC_DEST + option,
            type=parse,
            default=getattr(defaults, option),
            metavar=_METAVARS[parse],
        )


def _grpc_options(args: argparse.Namespace) -> GrpcOptions:
    return GrpcOptions(
        **{option: getattr(args, _GRPC_DEST + option) for option, _ in _GRPC_FLAGS.values()},
        header_forward_pattern=args.grpc_header_forward_pattern,
    )


def _cuda_pool_size(text: str) -> tuple[int, int]:
    """``<device id>:<byte size>``, as tritonserver's --cuda-memory-pool-byte-size."""
    device, sep, size = text.partition(":")
    try:
        parsed = (int(device), int(size))
    except ValueError:
        parsed = (-1, -1)
    if not sep or parsed[0] < 0 or parsed[1] < 0:
        raise argparse.ArgumentTypeError(
            f"--cuda-memory-pool-byte-size expects <GPU device id>:<byte size>, got '{text}'"
        )
    return parsed


def _add_memory_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = MemoryOptions()
    add = parser.add_argument
    add(
        "--allow-client-shm",
        type=_bool,
        default=defaults.allow_client_shm,
        metavar="BOOL",
        help="let clients register system and CUDA shared memory regions (Triton 2.73's "
        "default: false; 2.51 and older allowed it)",
    )
    add(
        "--pinned-memory-pool-byte-size",
        type=int,
        default=defaults.pinned_memory_pool_byte_size,
        metavar="BYTES",
        help="page-locked host memory for device <-> host staging (0: none)",
    )
    add(
        "--cuda-memory-pool-byte-size",
        type=_cuda_pool_size,
        action="append",
        default=[],
        metavar="<GPU device id>:<byte size>",
    )


def _memory_options(args: argparse.Namespace) -> MemoryOptions:
    if args.pinned_memory_pool_byte_size < 0:
        raise SystemExit("error: --pinned-memory-pool-byte-size must be >= 0")
    return MemoryOptions(
        allow_client_shm=args.allow_client_shm,
        pinned_memory_pool_byte_size=args.pinned_memory_pool_byte_size,
        cuda_memory_pool_byte_size=MappingProxyType(dict(args.cuda_memory_pool_byte_size)),
    )


def options_from_args(args: argparse.Namespace) -> ServerOptions:
    backend_config: dict[str, dict[str, str]] = {}
    for backend, key, value in args.backend_config:
        backend_config.setdefault(backend, {})[key] = value
    # A folder given twice (--model-repository and --model-store, say) is one repository,
    # as in tritonserver, which keeps them in a set.
    if not args.allow_openai:
        for flag in ("openai_address", "openai_port"):
            if getattr(args, flag) is not None:
                name = "--" + flag.replace("_", "-")
                raise SystemExit(
                    f"error: {name} is for the OpenAI front end: add --allow-openai=true"
                )
    given = args.model_repository or [
        bundled_repository(),
        *([bundled_repository(OPENAI_EXAMPLE_MODELS)] if args.allow_openai else []),
    ]
    repositories = tuple({path.resolve(): path for path in given}.values())
    for repository in repositories:
        if not repository.is_dir():
            raise SystemExit(f"error: model repository '{repository}' is not a folder")
    return ServerOptions(
        model_repositories=repositories,
        server_id=args.id,
        allow_http=args.allow_http,
        http_address=args.http_address,
        http_port=args.http_port,
        http_max_input_size=args.http_max_input_size,
        allow_openai=args.allow_openai,
        openai_address=args.openai_address,
        openai_port=ServerOptions.openai_port if args.openai_port is None else args.openai_port,
        http_tls=http_tls_options(args),
        limits=limit_options(args),
        debug_live_objects=args.debug_live_objects,
        allow_grpc=args.allow_grpc,
        grpc_address=args.grpc_address,
        grpc_port=args.grpc_port,
        grpc=_grpc_options(args),
        restricted=restricted_options(args),
        memory=_memory_options(args),
        allow_metrics=args.allow_metrics,
        metrics_address=args.metrics_address,
        metrics_port=args.metrics_port,
        model_control_mode=ModelControlMode(args.model_control_mode),
        load_models=tuple(args.load_model),
        repository_poll_secs=args.repository_poll_secs,
        model_config_name=args.model_config_name,
        disable_auto_complete_config=bool(
            args.disable_auto_complete_config or args.strict_model_config
        ),
        strict_readiness=args.strict_readiness,
        exit_on_error=args.exit_on_error,
        exit_timeout_secs=args.exit_timeout_secs,
        workers=args.workers,
        **server_flag_options(args),
        **telemetry_options(args, _bool),
        **extension_options(args),
        backend_config=MappingProxyType(
            {k: MappingProxyType(v) for k, v in backend_config.items()}
        ),
    )


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(given)
    options = options_from_args(args)
    for refusal in refusals(options):
        raise SystemExit(f"error: --workers {options.workers}: {refusal}")
    change_timeout_s = args.worker_change_timeout_secs
    if change_timeout_s is not None and options.workers <= 1:
        raise SystemExit("error: --worker-change-timeout-secs applies to --workers N > 1 only")
    if options.workers > 1 and args.worker_board is None:
        poll_s = (
            float(options.repository_poll_secs)
            if options.model_control_mode is ModelControlMode.POLL
            else None
        )
        return _supervise(options, given, change_timeout_s or DEFAULT_CHANGE_TIMEOUT_S, poll_s)
    seat = (
        None if args.worker_board is None else WorkerSeat.take(args.worker_board, args.worker_index)
    )
    keep_freed_tensor_memory()  # before the first request's buffers (memory/allocator.py)
    runtime = ServerRuntime(options, seat)
    runtime.log_control.install()  # the root logger: Triton's layout, --log-* settings
    pool_size = args.grpc_option_infer_allocation_pool_size
    notes = startup_notes(args, pool_size != GrpcOptions().infer_allocation_pool_size)
    for note in (*notes, *backend_config_notes(options.backend_config)):
        log.info("%s", note)
    try:
        return uvloop.run(runtime.run_until_signalled())
    except ServerError as exc:
        # As tritonserver reports a server that could not start.
        log.error("error: creating server: %s", exc.status_text.replace(": ", " - ", 1))
        return 1


def _supervise(
    options: ServerOptions, argv: Sequence[str], change_timeout_s: float, poll_s: float | None
) -> int:
    """The parent of ``--workers N``: the workers serve; it watches and restarts them."""
    LogControl(options.log).install()  # the --log-* settings, as a worker's
    supervisor = Supervisor(
        options.workers,
        lambda index, board: worker_command(argv, index, board),
        options.exit_timeout_secs,
        change_timeout_s,
        poll_s,
    )
    return supervisor.run()
