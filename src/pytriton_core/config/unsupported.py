"""The model-configuration fields this server does not implement, in one table.

No setting is silently ignored: a config that sets a field listed here fails to load with a
message naming the field, or, for a performance hint that changes no result (where Triton's
own backends pass over it too), loads with a warning naming it. ``docs/configuration.md``
shows this table (a test keeps the two in step); implementing a feature means deleting its
row here and there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytriton_core.errors import ModelConfigError

log = logging.getLogger(__name__)

_TENSORRT_PLATFORM = "tensorrt_plan"


@dataclass(frozen=True)
class UnsupportedField:
    field: str  # as the docs name it
    is_set: Callable[[Any], bool]  # on the normalized ModelConfig
    why: str  # what the server does not do
    warn_only: bool = False


def _groups(cfg: Any, test: Callable[[Any], bool]) -> bool:
    return any(test(group) for group in cfg.instance_group)


def _tensors(cfg: Any, test: Callable[[Any], bool]) -> bool:
    return any(test(t) for t in (*cfg.input, *cfg.output))


def _own_runtime(cfg: Any) -> bool:
    """``runtime`` names the backend's own library (what Triton loads anyway)."""
    return cfg.runtime in ("", f"libtriton_{cfg.backend}.so")


def _is_tensorrt(cfg: Any) -> bool:
    return bool(cfg.platform == _TENSORRT_PLATFORM or cfg.backend == "tensorrt")


UNSUPPORTED_FIELDS: tuple[UnsupportedField, ...] = (
    UnsupportedField(
        "response_cache",
        lambda cfg: cfg.response_cache.enable,
        "the response cache is not implemented yet",
    ),
    UnsupportedField(
        "instance_group.rate_limiter",
        lambda cfg: _groups(
            cfg, lambda g: bool(g.rate_limiter.resources) or g.rate_limiter.priority != 0
        ),
        "the rate limiter is not implemented yet",
    ),
    UnsupportedField(
        "model_repository_agents",
        lambda cfg: bool(cfg.model_repository_agents.agents),
        "repository agents (checksum, encryption...) are not implemented",
    ),
    UnsupportedField(
        "instance_group.passive",
        lambda cfg: _groups(cfg, lambda g: g.passive),
        "passive instances are not implemented",
    ),
    UnsupportedField(
        "instance_group.host_policy",
        lambda cfg: _groups(cfg, lambda g: bool(g.host_policy)),
        "host policies are not implemented",
    ),
    UnsupportedField(
        "instance_group.secondary_devices",
        lambda cfg: _groups(cfg, lambda g: bool(g.secondary_devices)),
        "secondary devices are not implemented",
    ),
    UnsupportedField(
        "metric_tags",
        lambda cfg: bool(cfg.metric_tags),
        "metric tags are not added to the metrics",
    ),
    UnsupportedField(
        "batch_input",
        lambda cfg: bool(cfg.batch_input),
        "batch inputs (ragged batching helpers) are not implemented",
    ),
    UnsupportedField(
        "batch_output",
        lambda cfg: bool(cfg.batch_output),
        "batch outputs are not implemented",
    ),
    UnsupportedField(
        "cc_model_filenames",
        lambda cfg: bool(cfg.cc_model_filenames),
        "model files chosen by compute capability are not implemented",
    ),
    UnsupportedField(
        "model_operations",
        lambda cfg: bool(cfg.model_operations.op_library_filename),
        "custom operation libraries are not loaded",
    ),
    UnsupportedField(
        "is_non_linear_format_io",
        lambda cfg: _tensors(cfg, lambda t: t.is_non_linear_format_io),
        "non-linear (TensorRT) tensor formats are not implemented",
    ),
    UnsupportedField(
        "runtime",
        lambda cfg: not _own_runtime(cfg),
        "a backend runtime other than the backend's own is not implemented",
    ),
    UnsupportedField(
        "sequence_batching.state",
        lambda cfg: bool(cfg.sequence_batching.state) and _is_tensorrt(cfg),
        "implicit state is not implemented for TensorRT models",
    ),
    UnsupportedField(
        "optimization.cuda",
        lambda cfg: cfg.optimization.HasField("cuda"),
        "CUDA graphs and the other CUDA options are not applied",
        warn_only=True,
    ),
    UnsupportedField(
        "optimization.priority",
        lambda cfg: cfg.optimization.priority != 0,
        "stream priorities are not applied",
        warn_only=True,
    ),
    UnsupportedField(
        "optimization.gather_kernel_buffer_threshold",
        lambda cfg: cfg.optimization.gather_kernel_buffer_threshold != 0,
        "inputs are gathered on the host, never by a CUDA kernel",
        warn_only=True,
    ),
    UnsupportedField(
        "optimization.eager_batching",
        lambda cfg: cfg.optimization.eager_batching,
        "eager batching is not applied",
        warn_only=True,
    ),
    UnsupportedField(
        "optimization.input_pinned_memory / output_pinned_memory",
        lambda cfg: (
            (
                not cfg.optimization.input_pinned_memory.enable
                or not cfg.optimization.output_pinned_memory.enable
            )
            and not cfg.HasField("ensemble_scheduling")
        ),
        "host staging buffers are pinned whenever a GPU is usable",
        warn_only=True,
    ),
    UnsupportedField(
        "optimization.graph / execution_accelerators",
        lambda cfg: (
            cfg.backend != "onnxruntime"
            and (
                cfg.optimization.HasField("graph")
                or cfg.optimization.HasField("execution_accelerators")
            )
        ),
        "only the onnxruntime backend applies them",
        warn_only=True,
    ),
)


def check_supported(config: Any) -> None:
    """Raise ModelConfigError for the first unsupported field ``config`` sets; log a warning
    for each unsupported hint."""
    for entry in UNSUPPORTED_FIELDS:
        if not entry.is_set(config):
            continue
        message = (
            f"model '{config.name}': '{entry.field}' is set, but this server does not "
            f"support it: {entry.why}"
        )
        if not entry.warn_only:
            raise ModelConfigError(message)
        log.warning("%s; the setting has no effect", message)
