"""tritonserver's flags beyond the basics: model loading, port sharing, header forwarding,
GPU selection, and those of the C++ server's own parts.

Every flag of tritonserver 2.51's and 2.73's ``--help`` is accepted, so a command line
written for tritonserver (a Helm chart, a Model Analyzer launch, a blog post) starts this
server. Each one then works, or is noted once at startup with what it means here (the
sizes of the C++ server's thread and object pools, its shared-library folders), or is
refused with the reason, naming what is missing.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pytriton_core.options import ServerOptions

_DEFAULTS = ServerOptions()


@dataclass(frozen=True)
class _Noted:
    """A flag of the C++ server's own parts: accepted, and what it means here said once."""

    metavar: str
    meaning: str


# Flags that size or locate parts of the C++ server that this server does not have.
NOTED_FLAGS: dict[str, _Noted] = {
    "--http-thread-count": _Noted(
        "INT",
        "HTTP is served by one asyncio event loop (uvloop) shared with gRPC; model "
        "instances run on threads of their own. There is no HTTP thread pool to size.",
    ),
    "--grpc-infer-thread-count": _Noted(
        "INT",
        "gRPC calls are served on the event loop shared with HTTP (this server's own HTTP/2 "
        "transport). There is no gRPC inference thread pool to size.",
    ),
    "--grpc-max-response-pool-size": _Noted(
        "INT",
        "each gRPC response is serialized straight into the frame that carries it. There is no "
        "response pool.",
    ),
    "--buffer-manager-thread-count": _Noted(
        "INT",
        "tensor copies run on the thread of the model instance that needs them. There is no "
        "buffer-manager thread pool.",
    ),
    "--cuda-virtual-address-size": _Noted(
        "<GPU device id>:<byte size>",
        "it bounds the growable CUDA memory of implicit sequence state, which this server "
        "does not allocate.",
    ),
    "--enable-peer-access": _Noted(
        "BOOL",
        "CUDA peer access between GPUs is left to each framework (torch, onnxruntime, "
        "TensorRT), which enables it as it needs.",
    ),
    "--sagemaker-port": _Noted("INT", "there is no SageMaker front end (--allow-sagemaker)."),
    "--sagemaker-safe-port-range": _Noted(
        "<integer>-<integer>", "there is no SageMaker front end (--allow-sagemaker)."
    ),
    "--sagemaker-thread-count": _Noted(
        "INT", "there is no SageMaker front end (--allow-sagemaker)."
    ),
    "--vertex-ai-port": _Noted("INT", "there is no Vertex AI front end (--allow-vertex-ai)."),
    "--vertex-ai-thread-count": _Noted(
        "INT", "there is no Vertex AI front end (--allow-vertex-ai)."
    ),
    "--vertex-ai-default-model": _Noted(
        "NAME", "there is no Vertex AI front end (--allow-vertex-ai)."
    ),
}

_GRPC_POOL_MEANING = (
    "each gRPC request is read from the frames that carry it, and each response serialized "
    "into its frame. There is no pool to size."
)


@dataclass(frozen=True)
class _Refused:
    """A flag of a feature this server does not have yet: refused, naming what is missing.
    ``accepted`` is the value that asks for nothing (the default), which is let through."""

    reason: str
    accepted: str | None = None


_REFUSED: dict[str, _Refused] = {
    "--host-policy": _Refused(
        "this server has no host policies yet: model instances are not pinned to NUMA nodes "
        "or CPU cores"
    ),
}


def add_server_flag_arguments(
    parser: argparse.ArgumentParser, parse_bool: Callable[[str], bool]
) -> None:
    add = parser.add_argument
    add(
        "--reuse-http-port",
        type=parse_bool,
        default=_DEFAULTS.reuse_http_port,
        metavar="BOOL",
        help="let several servers listen on the HTTP port (SO_REUSEPORT)",
    )
    add(
        "--http-header-forward-pattern",
        type=_regex,
        default=None,
        metavar="REGEX",
        help="HTTP headers whose names match reach the model as request parameters",
    )
    add(
        "--grpc-header-forward-pattern",
        type=_regex,
        default=None,
        metavar="REGEX",
        help="gRPC metadata whose keys match reach the model as request parameters",
    )
    add(
        "--busy-poll-us",
        type=_at_least(0),
        default=_DEFAULTS.busy_poll_us,
        metavar="MICROSECONDS",
        help="after answering a request on its event loop, poll the sockets this long for "
        "the next one instead of sleeping (lower latency for lone clients); 0: never",
    )
    add(
        "--gc-threshold",
        type=_at_least(0),
        default=_DEFAULTS.gc_threshold,
        metavar="OBJECTS",
        help="Python's generation-0 garbage collection threshold while serving (new "
        "container objects, less those freed, between collections); 0: Python's own (700)",
    )
    add(
        "--model-load-thread-count",
        type=_at_least(1),
        default=_DEFAULTS.model_load_thread_count,
        metavar="INT",
        help="models (and versions) loading at once",
    )
    add(
        "--model-load-retry-count",
        type=_at_least(0),
        default=_DEFAULTS.model_load_retry_count,
        metavar="INT",
        help="further attempts at a model version that failed to load",
    )
    add(
        "--model-namespacing",
        type=parse_bool,
        default=_DEFAULTS.model_namespacing,
        metavar="BOOL",
        help="each repository is a namespace: the same model name may be in several",
    )
    add(
        "--min-supported-compute-capability",
        type=float,
        default=_DEFAULTS.min_supported_compute_capability,
        metavar="FLOAT",
        help="GPUs with a lower CUDA compute capability are not used",
    )
    add(
        "--model-load-gpu-limit",
        type=_gpu_limit,
        action="append",
        default=[],
        metavar="<device_id>:<fraction>",
        help="reject a model load once the GPU's memory in use passes the fraction",
    )
    for flag, noted in NOTED_FLAGS.items():
        add(flag, default=None, metavar=noted.metavar, help=f"accepted; {noted.meaning}")
    for flag, refused in _REFUSED.items():
        add(flag, action="append", default=[], metavar="VALUE", help=f"refused: {refused.reason}")


def server_flag_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``ServerOptions`` fields these flags set; refuses what cannot work here."""
    for flag, refused in _REFUSED.items():
        for value in getattr(args, _dest(flag)):
            if refused.accepted is None or value.lower() != refused.accepted:
                raise SystemExit(f"error: {flag}={value}: {refused.reason}")
    return {
        "reuse_http_port": args.reuse_http_port,
        "http_header_forward_pattern": args.http_header_forward_pattern,
        "busy_poll_us": args.busy_poll_us,
        "gc_threshold": args.gc_threshold,
        "model_load_thread_count": args.model_load_thread_count,
        "model_load_retry_count": args.model_load_retry_count,
        "model_namespacing": args.model_namespacing,
        "min_supported_compute_capability": args.min_supported_compute_capability,
        "model_load_gpu_limit": MappingProxyType(dict(args.model_load_gpu_limit)),
    }


def startup_notes(args: argparse.Namespace, grpc_pool_size_given: bool) -> list[str]:
    """One line per accepted flag that sets nothing here: what it means for this server."""
    notes = [
        f"{flag}={getattr(args, _dest(flag))}: {noted.meaning}"
        for flag, noted in NOTED_FLAGS.items()
        if getattr(args, _dest(flag)) is not None
    ]
    if grpc_pool_size_given:
        notes.append(f"--grpc-infer-allocation-pool-size: {_GRPC_POOL_MEANING}")
    return notes


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def _regex(text: str) -> str:
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression ({exc}): '{text}'") from None
    return text


def _at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got '{text}'")
        return value

    return parse


def _gpu_limit(text: str) -> tuple[int, float]:
    """``<device id>:<fraction>``, the fraction in [0, 1], as tritonserver requires."""
    device, sep, fraction = text.partition(":")
    try:
        parsed = (int(device), float(fraction))
    except ValueError:
        parsed = (-1, -1.0)
    if not sep or parsed[0] < 0:
        raise argparse.ArgumentTypeError(
            f"--model-load-gpu-limit expects <device_id>:<fraction>, got '{text}'"
        )
    if not 0.0 <= parsed[1] <= 1.0:
        raise argparse.ArgumentTypeError(
            f"expects limit fraction to be in range [0.0, 1.0], got {fraction}"
        )
    return parsed
