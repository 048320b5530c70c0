"""Checks a completed, normalized ModelConfig must pass before the model loads.

Each failure raises ModelConfigError naming the model and the field, in the form
``model 'm': input 'INPUT0' has no data_type``. The rules are Triton's (ValidateModelConfig
and ValidateModelInput/Output), checked against what Triton 2.51 accepts and rejects.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NoReturn

from google.protobuf.message import Message

from pytriton_core import proto, types
from pytriton_core.config import ensemble
from pytriton_core.config.unsupported import check_supported
from pytriton_core.config.validate_sequence import check_sequence_batching
from pytriton_core.errors import ModelConfigError

PYTHON_BACKEND = "python"
WILDCARD_DIM = -1

_DELAY = proto.enum_type("inference.ModelQueuePolicy.TimeoutAction").Value("DELAY")
_KIND_CPU = proto.enum_type("inference.ModelInstanceGroup.Kind").Value("KIND_CPU")


def validate_config(config: Message, *, check_tensors: bool = True) -> None:
    """Raise ModelConfigError for the first rule the config breaks.

    Without ``check_tensors`` the inputs and outputs are left for later, as Triton leaves
    them while a backend may still complete them.
    """
    cfg: Any = config
    model = cfg.name
    if not model:
        raise ModelConfigError("model config must specify 'name'")
    check = _Checker(model)
    if cfg.max_batch_size < 0:
        check.fail(f"'max_batch_size' must be >= 0, got {cfg.max_batch_size}")
    _check_platform(check, cfg)
    if check_tensors:
        _check_tensors(check, "input", cfg.input)
        _check_tensors(check, "output", cfg.output)
    if cfg.HasField("dynamic_batching"):
        _check_dynamic_batching(check, cfg.dynamic_batching, cfg.max_batch_size)
    if cfg.HasField("sequence_batching"):
        check_sequence_batching(check, cfg)
    for group in cfg.instance_group:
        if group.kind == _KIND_CPU and group.gpus:
            check.fail(f"instance group '{group.name}' has kind KIND_CPU but lists GPUs")
    check_supported(cfg)


class _Checker:
    """Carries the model name into every message."""

    def __init__(self, model: str) -> None:
        self.model = model

    def fail(self, detail: str) -> NoReturn:
        raise ModelConfigError(f"model '{self.model}': {detail}")


def _check_platform(check: _Checker, cfg: Any) -> None:
    if ensemble.is_ensemble(cfg):
        # Triton's own messages, which name the ensemble themselves.
        ensemble.check_ensemble_platform(cfg)
        ensemble.check_ensemble_graph(cfg)
    if cfg.backend == PYTHON_BACKEND and cfg.platform:
        check.fail(f"backend 'python' requires an empty platform, got '{cfg.platform}'")


def _check_tensors(check: _Checker, kind: str, tensors: Iterable[Any]) -> None:
    """Inputs or outputs: names, datatypes, dims and reshape."""
    seen: set[str] = set()
    for index, tensor in enumerate(tensors):
        if not tensor.name:
            check.fail(f"{kind} #{index} has no name")
        what = f"{kind} '{tensor.name}'"
        if tensor.name in seen:
            check.fail(f"duplicate {kind} name '{tensor.name}'")
        seen.add(tensor.name)
        if tensor.data_type == 0:  # TYPE_INVALID, the unset value
            check.fail(f"{what} has no data_type")
        if tensor.data_type not in types.BY_CONFIG_VALUE:
            check.fail(f"{what} has an unknown data_type {tensor.data_type}")
        dims = list(tensor.dims)
        if not dims:
            # Triton's idiom for a scalar is dims [1] with an empty reshape.
            check.fail(f"{what} has no dims (for a scalar use dims: [1] and reshape: {{}})")
        if any(dim < 1 and dim != WILDCARD_DIM for dim in dims):
            check.fail(f"{what} dims must be >= 1 or -1 (variable size), got {dims}")
        if tensor.HasField("reshape"):
            _check_reshape(check, what, dims, list(tensor.reshape.shape))


def _check_reshape(check: _Checker, what: str, dims: list[int], shape: list[int]) -> None:
    if any(dim < 1 and dim != WILDCARD_DIM for dim in shape):
        check.fail(f"{what} reshape.shape must be >= 1 or -1 (variable size), got {shape}")
    # An empty reshape (a scalar) counts one element, so it fits dims [1].
    # Around each variable-size dim the element counts must agree:
    # [2, 4, -1, 6] may become [8, -1, 1, 6], since 2*4 == 8 and 6 == 1*6.
    if _segment_sizes(dims) != _segment_sizes(shape):
        check.fail(f"{what} has different sizes in dims {dims} and reshape.shape {shape}")


def _segment_sizes(dims: list[int]) -> list[int]:
    """Element counts of the runs of fixed dims between variable-size (-1) dims."""
    sizes = [1]
    for dim in dims:
        if dim == WILDCARD_DIM:
            sizes.append(1)
        else:
            sizes[-1] *= dim
    return sizes


def _check_preferred_sizes(check: _Checker, field: str, sizes: Any, max_batch_size: int) -> None:
    for size in sizes:
        if not 0 < size <= max_batch_size:
            check.fail(f"{field} {size} must be in [1, max_batch_size={max_batch_size}]")


def _check_dynamic_batching(check: _Checker, batching: Any, max_batch_size: int) -> None:
    _check_preferred_sizes(
        check,
        "dynamic_batching.preferred_batch_size",
        batching.preferred_batch_size,
        max_batch_size,
    )
    levels = batching.priority_levels
    if levels > 0:
        if not 1 <= batching.default_priority_level <= levels:
            check.fail(
                f"dynamic_batching.default_priority_level must be in [1, {levels}], "
                f"got {batching.default_priority_level}"
            )
        for level in batching.priority_queue_policy:
            if not 1 <= level <= levels:
                check.fail(
                    f"dynamic_batching.priority_queue_policy key {level} must be in [1, {levels}]"
                )
    if batching.preserve_ordering:
        if levels > 1:
            check.fail(
                "dynamic_batching.preserve_ordering allows only one priority level, "
                f"got priority_levels {levels}"
            )
        # A delayed request would be overtaken by later ones; without a timeout it never is.
        policies = [("default_queue_policy", batching.default_queue_policy)] + [
            (f"priority_queue_policy[{level}]", policy)
            for level, policy in sorted(batching.priority_queue_policy.items())
        ]
        for where, policy in policies:
            if policy.timeout_action == _DELAY and policy.default_timeout_microseconds != 0:
                check.fail(
                    f"dynamic_batching.{where}.timeout_action DELAY is not allowed "
                    "with preserve_ordering"
                )
