"""What the framework backends (onnxruntime, pytorch, openvino, tensorrt) share.

* ``model_path``: the model file a version folder holds;
* ``flag``: a boolean in the config's free-form ``parameters`` (``ModelSpec.parameters``);
* ``complete_config``: Triton's auto-complete for models that describe their own I/O
  (ONNX, OpenVINO, TensorRT): inputs, outputs, datatypes, dims and ``max_batch_size``
  from the model, and ``dynamic_batching`` for a batching model without a scheduler;
* ``check_config_io``: the load-time check that a config agrees with the model file.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.message import Message

from pytriton_core import types
from pytriton_core.backends.base import ModelLocation
from pytriton_core.config.spec import ModelSpec, TensorSpec
from pytriton_core.errors import ModelConfigError
from pytriton_core.paths import confined_path

log = logging.getLogger(__name__)

DEFAULT_MAX_BATCH_SIZE = 4
VARIABLE = -1


@dataclass(frozen=True)
class ModelTensor:
    """An input or output as the model file declares it."""

    name: str
    datatype: types.DataType | None  # None: a type no config datatype expresses
    shape: tuple[int, ...]  # the full shape, -1 where variable
    type_name: str = ""  # the framework's own name of the type, for messages


def model_path(location: ModelLocation, default_model_filename: str, default: str) -> Path:
    """``<version>/<default_model_filename>``; raises ModelConfigError when it is missing."""
    filename = default_model_filename or default
    path = confined_path(
        location.model_dir,
        str(location.version),
        filename,
        what=f"default_model_filename '{filename}'",
    )
    if not path.exists():
        raise ModelConfigError(
            f"unable to find '{path}' for model '{location.name}' version {location.version}"
        )
    return path


def flag(value: str | None, default: bool = False) -> bool:
    """A boolean parameter as Triton's backends read them ("true"/"1"/"yes", any case)."""
    if value is None or value == "":
        return default
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ModelConfigError(f"expected a boolean parameter value (true/false), got '{value}'")


def default_max_batch_size(location: ModelLocation) -> int:
    """``--backend-config=[<backend>,]default-max-batch-size=<n>`` (Triton's default 4)."""
    value = location.setting("default-max-batch-size")
    if value is None:
        return DEFAULT_MAX_BATCH_SIZE
    try:
        parsed = int(value)
    except ValueError:
        parsed = -1
    if parsed < 0:
        raise ModelConfigError(
            f"--backend-config default-max-batch-size must be an integer >= 0, got '{value}'"
        )
    return parsed


def complete_config(
    config: Message,
    inputs: Sequence[ModelTensor],
    outputs: Sequence[ModelTensor],
    location: ModelLocation,
    *,
    batch_limit: int | None = None,
) -> None:
    """Fill ``config`` in place from the model's I/O, as Triton's backends do.

    Nothing changes when the config already lists inputs and outputs. ``batch_limit`` caps
    the auto-completed ``max_batch_size`` (a TensorRT engine's largest profile batch).
    """
    cfg: Any = config
    if (cfg.input or cfg.batch_input) and cfg.output:
        return
    batchable = all(t.shape and t.shape[0] == VARIABLE for t in (*inputs, *outputs))
    if batchable:
        if cfg.max_batch_size == 0:
            size = default_max_batch_size(location)
            if batch_limit is not None and batch_limit > 0:
                size = min(size, batch_limit)
            cfg.max_batch_size = size
            log.warning(
                "autofilled max_batch_size to %d for model '%s': the model can batch but "
                "its configuration gives no max_batch_size",
                size,
                location.name,
            )
        if cfg.max_batch_size > 1 and not (
            cfg.HasField("dynamic_batching") or cfg.HasField("sequence_batching")
        ):
            cfg.dynamic_batching.SetInParent()
    elif cfg.max_batch_size != 0:
        raise ModelConfigError(
            f"autofill failed for model '{location.name}': model does not support batching "
            "while non-zero max_batch_size is specified"
        )
    batching = cfg.max_batch_size > 0
    if not (cfg.input or cfg.batch_input):
        for tensor in inputs:
            _add_tensor(cfg.input.add(), tensor, batching, "input", location.name)
    if not cfg.output:
        for tensor in outputs:
            _add_tensor(cfg.output.add(), tensor, batching, "output", location.name)


def _add_tensor(entry: Any, tensor: ModelTensor, batching: bool, kind: str, model: str) -> None:
    if tensor.datatype is None:
        raise ModelConfigError(
            f"autofill failed for model '{model}': {kind} '{tensor.name}' has type "
            f"'{tensor.type_name}', which has no model configuration datatype"
        )
    entry.name = tensor.name
    entry.data_type = tensor.datatype.config_value
    dims = list(tensor.shape[1:] if batching else tensor.shape)
    if dims:
        entry.dims.extend(dims)
    else:
        # A scalar (per batch item): Triton's idiom is dims [1] with an empty reshape.
        entry.dims.append(1)
        if batching:
            entry.reshape.SetInParent()


def check_config_io(
    spec: ModelSpec,
    inputs: Sequence[ModelTensor],
    outputs: Sequence[ModelTensor],
    model: str,
) -> None:
    """Raise ModelConfigError where the config's inputs or outputs disagree with the model
    (a sequence model's control and implicit-state tensors included)."""
    _check_side("input", spec.model_inputs.values(), inputs, spec.batching, model)
    _check_side("output", spec.model_outputs.values(), outputs, spec.batching, model)


def _check_side(
    kind: str,
    declared: Iterable[TensorSpec],
    actual: Sequence[ModelTensor],
    batching: bool,
    model: str,
) -> None:
    by_name = {t.name: t for t in actual}
    for spec in declared:
        tensor = by_name.get(spec.name)
        if tensor is None:
            allowed = ", ".join(f"'{n}'" for n in by_name)
            raise ModelConfigError(
                f"model '{model}': unexpected {kind} '{spec.name}', the model's {kind}s are: "
                f"{allowed}"
            )
        _check_tensor(kind, spec, tensor, batching, model)


def _check_tensor(
    kind: str, spec: TensorSpec, tensor: ModelTensor, batching: bool, model: str
) -> None:
    if tensor.datatype is not spec.datatype:
        found = tensor.datatype.config_name if tensor.datatype else tensor.type_name
        raise ModelConfigError(
            f"model '{model}': unexpected datatype {spec.datatype.config_name} for {kind} "
            f"'{spec.name}', the model has {found}"
        )
    shape = tensor.shape
    if batching:
        if not shape:
            raise ModelConfigError(
                f"model '{model}': {kind} '{spec.name}' has no batch dimension in the model, "
                "but max_batch_size > 0"
            )
        shape = shape[1:]
    expected = spec.model_shape
    mismatch = len(shape) != len(expected) or any(
        m != c and m != VARIABLE and c != VARIABLE for m, c in zip(shape, expected, strict=True)
    )
    if mismatch:
        batch_note = " (without the batch dimension)" if batching else ""
        raise ModelConfigError(
            f"model '{model}': {kind} '{spec.name}' has dims {list(expected)} in the model "
            f"configuration{batch_note}, but the model expects {list(shape)}"
        )
