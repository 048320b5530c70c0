"""tritonserver's metrics, logging and tracing flags: their arguments and the option objects
they resolve to (``MetricsOptions``, ``LogOptions``, ``TraceOptions``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pytriton_core.options import (
    DEFAULT_DURATION_BUCKETS_US,
    LogFormat,
    LogOptions,
    MetricsOptions,
    TraceMode,
    TraceOptions,
)

# The histogram families whose buckets --metrics-config sets (<family>=<bound>,...).
HISTOGRAM_FAMILIES = ("nv_inference_first_response_histogram_ms", *DEFAULT_DURATION_BUCKETS_US)


def add_telemetry_arguments(
    parser: argparse.ArgumentParser, parse_bool: Callable[[str], bool]
) -> None:
    add = parser.add_argument
    defaults = MetricsOptions()
    add(
        "--allow-gpu-metrics",
        type=parse_bool,
        default=defaults.allow_gpu_metrics,
        metavar="BOOL",
        help="GPU gauges (nv_gpu_*) through NVML, when nvidia-ml-py and a GPU are present",
    )
    add(
        "--allow-cpu-metrics",
        type=parse_bool,
        default=defaults.allow_cpu_metrics,
        metavar="BOOL",
        help="CPU and RAM gauges (nv_cpu_*) from /proc",
    )
    add(
        "--metrics-interval-ms",
        type=int,
        default=defaults.interval_ms,
        metavar="MS",
        help="how often the CPU and GPU gauges are refreshed",
    )
    add(
        "--metrics-config",
        action="append",
        default=[],
        metavar="<key>=<value>",
        help="counter_latencies, summary_latencies, summary_quantiles=<q>:<error>,..., "
        "histogram_latencies, <histogram family>=<bound>,... (repeatable)",
    )
    logs = LogOptions()
    add(
        "--log-verbose",
        type=int,
        default=logs.verbose,
        metavar="LEVEL",
        help="verbose logging level (0: off; 1: Python DEBUG; higher: more)",
    )
    add("--log-info", type=parse_bool, default=logs.info, metavar="BOOL", help="log info messages")
    add(
        "--log-warning",
        type=parse_bool,
        default=logs.warning,
        metavar="BOOL",
        help="log warning messages",
    )
    add(
        "--log-error",
        type=parse_bool,
        default=logs.error,
        metavar="BOOL",
        help="log error messages",
    )
    add(
        "--log-format",
        choices=[f.value for f in LogFormat],
        default=logs.format.value,
        help="log line layout: default (glog-like) or ISO8601",
    )
    add("--log-file", type=Path, default=None, metavar="PATH", help="log here instead of stderr")
    add(
        "--trace-config",
        action="append",
        default=[],
        metavar="[<mode>,]<setting>=<value>",
        help="request tracing: level=OFF|TIMESTAMPS|TENSORS, rate=N, count=N, mode=triton|"
        "opentelemetry; triton,file=PATH; triton,log-frequency=N; opentelemetry,url=URL; "
        "opentelemetry,resource=<key>=<value> (repeatable)",
    )
    add("--trace-file", type=Path, default=None, metavar="PATH", help="deprecated: triton,file")
    add(
        "--trace-level",
        action="append",
        default=[],
        choices=["OFF", "TIMESTAMPS", "TENSORS"],
        help="deprecated: level (repeatable)",
    )
    add("--trace-rate", type=int, default=None, metavar="N", help="deprecated: rate")
    add("--trace-count", type=int, default=None, metavar="N", help="deprecated: count")
    add(
        "--trace-log-frequency",
        type=int,
        default=None,
        metavar="N",
        help="deprecated: triton,log-frequency",
    )


def telemetry_options(
    args: argparse.Namespace, parse_bool: Callable[[str], bool]
) -> dict[str, Any]:
    """The ``ServerOptions`` fields these flags set: ``metrics``, ``log`` and ``trace``."""
    return {
        "metrics": metrics_options(args, parse_bool),
        "log": LogOptions(
            info=args.log_info,
            warning=args.log_warning,
            error=args.log_error,
            verbose=max(0, args.log_verbose),
            format=LogFormat(args.log_format),
            file=args.log_file,
        ),
        "trace": trace_options(args),
    }


def metrics_options(args: argparse.Namespace, parse_bool: Callable[[str], bool]) -> MetricsOptions:
    settings: dict[str, Any] = {
        "allow_gpu_metrics": args.allow_gpu_metrics,
        "allow_cpu_metrics": args.allow_cpu_metrics,
        "interval_ms": args.metrics_interval_ms,
    }
    if args.metrics_interval_ms <= 0:
        raise SystemExit("error: --metrics-interval-ms must be > 0")
    for item in args.metrics_config:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"error: --metrics-config expects <key>=<value>, got '{item}'")
        if key in ("counter_latencies", "summary_latencies", "histogram_latencies"):
            try:
                settings[key] = parse_bool(value)
            except argparse.ArgumentTypeError as exc:
                raise SystemExit(f"error: --metrics-config {key}: {exc}") from None
        elif key == "summary_quantiles":
            settings[key] = _quantiles(value)
        elif key in HISTOGRAM_FAMILIES:
            buckets = dict(settings.get("histogram_buckets", {}))
            buckets[key] = _buckets(key, value)
            settings["histogram_buckets"] = MappingProxyType(buckets)
        else:
            raise SystemExit(f"error: --metrics-config: unknown key '{key}'")
    return MetricsOptions(**settings)


def _buckets(family: str, text: str) -> tuple[float, ...]:
    try:
        bounds = tuple(float(item) for item in text.split(","))
    except ValueError:
        bounds = ()
    if not bounds or any(b != b for b in bounds) or list(bounds) != sorted(set(bounds)):
        raise SystemExit(
            f"error: --metrics-config {family} expects increasing bucket bounds "
            f"<bound>,<bound>,..., got '{text}'"
        )
    return bounds


def _quantiles(text: str) -> tuple[tuple[float, float], ...]:
    pairs = []
    for item in text.split(","):
        quantile, sep, error = item.partition(":")
        try:
            pair = (float(quantile), float(error))
        except ValueError:
            pair = (-1.0, -1.0)
        if not sep or not 0 <= pair[0] <= 1 or not 0 <= pair[1] <= 1:
            raise SystemExit(
                f"error: --metrics-config summary_quantiles expects <quantile>:<error>,..., "
                f"got '{text}'"
            )
        pairs.append(pair)
    return tuple(pairs)


_TRITON_SETTINGS = ("file", "log-frequency", "log_frequency")
_OPENTELEMETRY_SETTINGS = (
    "url",
    "resource",
    "bsp_max_queue_size",
    "bsp_schedule_delay",
    "bsp_max_export_batch_size",
)


def trace_options(args: argparse.Namespace) -> TraceOptions:
    levels: list[str] = list(args.trace_level)
    settings: dict[str, Any] = {}
    otel: dict[str, str] = {}
    if args.trace_file is not None:
        settings["file"] = args.trace_file
    if args.trace_rate is not None:
        settings["rate"] = args.trace_rate
    if args.trace_count is not None:
        settings["count"] = args.trace_count
    if args.trace_log_frequency is not None:
        settings["log_frequency"] = args.trace_log_frequency
    for item in args.trace_config:
        mode, key, value = _trace_setting(item)
        if mode is None and key == "level":
            levels.append(value.upper())
        elif mode is None and key == "rate":
            settings["rate"] = _int(item, value, 1)
        elif mode is None and key == "count":
            settings["count"] = _int(item, value, -1)
        elif mode is None and key == "mode":
            try:
                settings["mode"] = TraceMode(value)
            except ValueError:
                raise SystemExit(f"error: --trace-config: unknown trace mode '{value}'") from None
        elif mode == "triton" and key == "file":
            settings["file"] = Path(value)
        elif mode == "triton" and key in _TRITON_SETTINGS:
            settings["log_frequency"] = _int(item, value, 0)
        elif mode == "opentelemetry" and key in _OPENTELEMETRY_SETTINGS:
            if key == "resource" and "resource" in otel:
                otel[key] = f"{otel[key]},{value}"
            else:
                otel[key] = value
        else:
            raise SystemExit(f"error: --trace-config: unknown setting '{item}'")
    return TraceOptions(level=_levels(levels), opentelemetry=MappingProxyType(otel), **settings)


def _trace_setting(item: str) -> tuple[str | None, str, str]:
    head, sep, value = item.partition("=")
    if not sep:
        raise SystemExit(f"error: --trace-config expects [<mode>,]<setting>=<value>, got '{item}'")
    mode, comma, key = head.rpartition(",")
    if comma and mode not in ("triton", "opentelemetry"):
        raise SystemExit(f"error: --trace-config: unknown trace mode '{mode}'")
    return (mode if comma else None), key, value


def _int(item: str, text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise SystemExit(f"error: --trace-config {item}: expected an integer >= {minimum}")
    return value


def _levels(names: Sequence[str]) -> frozenset[str]:
    """The levels named; OFF clears those named before it."""
    levels: set[str] = set()
    for name in names:
        if name == "OFF":
            levels.clear()
        elif name in ("TIMESTAMPS", "TENSORS"):
            levels.add(name)
        else:
            raise SystemExit(f"error: --trace-config: unknown trace level '{name}'")
    return frozenset(levels)
