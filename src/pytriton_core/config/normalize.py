"""Triton's normalization: the defaults the server writes into every loaded config.

The result is what GET /v2/models/<m>/config shows, so each default here matches what
Triton itself fills in (checked against Triton 2.51's output).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.protobuf.message import Message

from pytriton_core import proto
from pytriton_core.errors import ModelConfigError

SEQUENCE_IDLE_DEFAULT_MICROSECONDS = 1_000_000

# Backends whose CPU instances are cheap enough to run two by default (Triton's choice).
_TWO_CPU_INSTANCES_BACKENDS = frozenset({"onnxruntime", "tensorflow"})

_Kind = proto.enum_type("inference.ModelInstanceGroup.Kind")
KIND_AUTO = _Kind.Value("KIND_AUTO")
KIND_GPU = _Kind.Value("KIND_GPU")
KIND_CPU = _Kind.Value("KIND_CPU")


def normalize_config(config: Message, *, gpu_ids: Sequence[int] = ()) -> None:
    """Fill Triton's defaults in place: version policy, instance groups, batching, pinning.

    ``gpu_ids`` are the GPUs the server may use. Raises ModelConfigError for an instance
    group that needs a GPU the server does not have.
    """
    cfg: Any = config
    if not cfg.HasField("version_policy"):
        cfg.version_policy.latest.num_versions = 1

    if cfg.HasField("dynamic_batching"):
        _default_preferred_batch_size(cfg.dynamic_batching.preferred_batch_size, cfg)

    if cfg.HasField("sequence_batching"):
        sequence = cfg.sequence_batching
        if sequence.max_sequence_idle_microseconds == 0:
            sequence.max_sequence_idle_microseconds = SEQUENCE_IDLE_DEFAULT_MICROSECONDS
        # No strategy means "direct"; Triton leaves it unset in the config, and so do we.
        if sequence.HasField("oldest"):
            _default_preferred_batch_size(sequence.oldest.preferred_batch_size, cfg)

    # Ensembles run no instances of their own: no groups, no pinned buffers.
    if cfg.HasField("ensemble_scheduling"):
        return
    _normalize_instance_groups(cfg, gpu_ids)
    optimization = cfg.optimization
    # Only when absent: an explicit "enable: false" stays.
    if not optimization.HasField("input_pinned_memory"):
        optimization.input_pinned_memory.enable = True
    if not optimization.HasField("output_pinned_memory"):
        optimization.output_pinned_memory.enable = True


def _default_preferred_batch_size(preferred: Any, cfg: Any) -> None:
    if not preferred and cfg.max_batch_size > 0:
        preferred.append(cfg.max_batch_size)


def _normalize_instance_groups(cfg: Any, gpu_ids: Sequence[int]) -> None:
    if not cfg.instance_group:
        # The implicit group takes the model's own name (Triton: "m", not "m_0").
        cfg.instance_group.add(name=cfg.name)
    available = sorted(set(gpu_ids))
    for index, group in enumerate(cfg.instance_group):
        if not group.name:
            group.name = f"{cfg.name}_{index}"
        if group.kind == KIND_AUTO:
            # GPU only when the server has GPUs and every listed one among them.
            on_gpu = bool(available) and all(gpu in available for gpu in group.gpus)
            group.kind = KIND_GPU if on_gpu else KIND_CPU
        if group.kind == KIND_GPU:
            _place_on_gpus(cfg.name, group, available)
        if group.count < 1:
            two = group.kind == KIND_CPU and cfg.backend in _TWO_CPU_INSTANCES_BACKENDS
            group.count = 2 if two else 1


def _place_on_gpus(model: str, group: Any, available: list[int]) -> None:
    if not available:
        raise ModelConfigError(
            f"model '{model}': instance group '{group.name}' has kind KIND_GPU "
            "but no GPUs are available"
        )
    if not group.gpus:
        group.gpus.extend(available)
        return
    for gpu in group.gpus:
        if gpu not in available:
            raise ModelConfigError(
                f"model '{model}': instance group '{group.name}' lists GPU {gpu}, "
                f"which is not available (available GPUs: {available})"
            )
