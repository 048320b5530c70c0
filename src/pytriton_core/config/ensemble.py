"""Load-time checks of an ensemble (``platform: "ensemble"``), with Triton's messages.

Two stages, as in Triton:

* ``check_ensemble_graph`` needs only the ensemble's own config (Triton's
  ``ValidateEnsembleSchedulingConfig``, run when the repository is polled): steps name a
  model and map inputs and outputs, every ensemble input is used, every ensemble output is
  written and every intermediate tensor feeds a step.
* ``check_ensemble_steps`` runs once the composing models are loaded, against their specs
  (Triton's ``ValidateEnsembleConfig``): maximum batch sizes, every step input mapped once,
  no mapping to a tensor the model lacks, one datatype and a compatible shape per ensemble
  tensor, and no step fed by tensors that come from different decoupled models. It returns
  whether the ensemble is decoupled (some decoupled model feeds its outputs), which the
  loader writes into the ensemble's ``model_transaction_policy`` as Triton does.

Triton walks protobuf maps in hash order; here they are walked in config order, so where
several rules are broken the first one reported may differ.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import Message

from pytriton_core.config.spec import EnsembleStep, ModelSpec, TensorSpec
from pytriton_core.errors import InvalidArgumentError, ModelConfigError
from pytriton_core.types import DataType

ENSEMBLE_PLATFORM = "ensemble"


def is_ensemble(config: Message) -> bool:
    cfg: Any = config
    return bool(cfg.platform == ENSEMBLE_PLATFORM or cfg.HasField("ensemble_scheduling"))


def composing_models(config: Message) -> list[tuple[str, int]]:
    """The (model name, version) of each step, in step order (-1: the latest version)."""
    cfg: Any = config
    return [(step.model_name, step.model_version) for step in cfg.ensemble_scheduling.step]


# ------------------------------------------------------------------ the ensemble alone


def check_ensemble_platform(config: Message) -> None:
    """Platform, backend and the fields an ensemble may not have (Triton's checks)."""
    cfg: Any = config
    name = cfg.name
    if cfg.platform == ENSEMBLE_PLATFORM and cfg.backend:
        raise ModelConfigError(
            f"Ensemble model '{name}' must have platform type '{cfg.platform}' and empty "
            "backend type"
        )
    if cfg.HasField("ensemble_scheduling"):
        if cfg.platform != ENSEMBLE_PLATFORM:
            raise ModelConfigError(
                f"ensemble scheduling cannot be set for model '{name}' whose platform is not "
                f"{ENSEMBLE_PLATFORM}"
            )
        if cfg.instance_group:
            raise ModelConfigError(f"instance group should not be specified for ensemble '{name}'")
        if cfg.HasField("optimization"):
            raise ModelConfigError(f"optimization should not be specified for ensemble '{name}'")
        if cfg.model_warmup:
            raise ModelConfigError(f"model_warmup can not be specified for ensemble '{name}'")
    elif cfg.platform == ENSEMBLE_PLATFORM:
        raise ModelConfigError(
            f"ensemble scheduling must be set for ensemble {name} whose platform is "
            f"{ENSEMBLE_PLATFORM}"
        )


@dataclass(eq=False)
class _GraphTensor:
    name: str
    is_output: bool  # some step writes it
    ready: bool = False
    prev: list[_GraphTensor] = field(default_factory=list)
    next: list[_GraphTensor] = field(default_factory=list)


def check_ensemble_graph(config: Message) -> None:
    """The data flow of the steps, from the ensemble's config alone."""
    cfg: Any = config
    name = cfg.name
    steps = cfg.ensemble_scheduling.step
    if not steps:
        raise ModelConfigError(f"must specify 'step' for ensemble '{name}'")
    tensors = _build_graph(name, steps)
    queue: deque[_GraphTensor] = deque()
    for entry in cfg.input:
        tensor = tensors.get(entry.name)
        if tensor is None:
            raise ModelConfigError(
                f"ensemble input '{entry.name}' for ensemble {name}' is not used"
            )
        tensor.ready = True
        queue.append(tensor)
    while queue:
        for following in queue.popleft().next:
            if not following.ready and all(p.ready for p in following.prev):
                following.ready = True
                queue.append(following)
    outputs: set[str] = set()
    for entry in cfg.output:
        tensor = tensors.get(entry.name)
        if tensor is None:
            raise ModelConfigError(
                f"ensemble output '{entry.name}' for ensemble {name}' is not used"
            )
        if not tensor.ready:
            raise ModelConfigError(_not_written(name, tensor))
        outputs.add(entry.name)
    for tensor_name, tensor in tensors.items():
        if tensor_name not in outputs and (not tensor.ready or not tensor.next):
            raise ModelConfigError(
                f"ensemble tensor '{tensor_name}' is unused in ensemble '{name}'"
            )


def _build_graph(name: str, steps: Sequence[Any]) -> dict[str, _GraphTensor]:
    tensors: dict[str, _GraphTensor] = {}
    for index, step in enumerate(steps):
        for what in ("model_name", "input_map", "output_map"):
            if not getattr(step, what):
                raise ModelConfigError(
                    f"must specify '{what}' in step {index} of ensemble '{name}'"
                )
        written: list[_GraphTensor] = []
        for tensor_name in step.output_map.values():
            tensor = tensors.get(tensor_name)
            if tensor is None:
                tensor = tensors[tensor_name] = _GraphTensor(tensor_name, is_output=True)
            elif tensor.is_output:
                raise ModelConfigError(
                    f"ensemble tensor '{tensor_name}' can appear in an output map only once "
                    f"for ensemble '{name}' step {index}"
                )
            else:
                tensor.is_output = True
            written.append(tensor)
        # A protobuf map holds each model input once, so Triton's "mapped to multiple
        # ensemble tensors" (a duplicated key) cannot be built from a parsed config.
        for tensor_name in step.input_map.values():
            tensor = tensors.get(tensor_name)
            if tensor is None:
                tensor = tensors[tensor_name] = _GraphTensor(tensor_name, is_output=False)
            for output in written:
                output.prev.append(tensor)
                tensor.next.append(output)
    return tensors


def _not_written(name: str, output: _GraphTensor) -> str:
    message = f"output '{output.name}' for ensemble '{name}' is not written"
    # Follow not-ready producers back to the first tensor nothing connects.
    source, prev, seen = output, output.prev, set[str]()
    while prev:
        candidates, prev = prev, []
        for tensor in candidates:
            if not tensor.ready and tensor.name not in seen:
                seen.add(tensor.name)
                source, prev = tensor, tensor.prev
                break
    if source is not output:
        message += f": at least one of its depending tensors, '{source.name}', is not connected"
    return message


# ------------------------------------------------------------- against composing models


@dataclass(eq=False)
class _StepOutputs:
    """What the outputs of one step share: one decouple label."""

    decouple_label: int = 0
    visited: bool = False


@dataclass(eq=False)
class _TypedTensor:
    """An ensemble tensor's datatype and shape, as inferred from one model's config."""

    model: str
    datatype: DataType
    dims: tuple[int, ...]
    full_dims: tuple[int, ...]
    decoupled: bool = False
    decouple_label: int = 0
    visited: bool = False
    prev: list[_TypedTensor] = field(default_factory=list)
    next: list[_TypedTensor] = field(default_factory=list)
    sibling: _StepOutputs | None = None  # set for a tensor some step writes

    @classmethod
    def of(
        cls, model: str, batching: bool, tensor: TensorSpec, dims: tuple[int, ...]
    ) -> _TypedTensor:
        return cls(model, tensor.datatype, dims, ((-1,) if batching else ()) + dims)


def _dims_text(dims: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def dims_match(a: Sequence[int], b: Sequence[int]) -> bool:
    """Same length, and equal dims wherever neither is variable (-1)."""
    return len(a) == len(b) and all(x == y or x == -1 or y == -1 for x, y in zip(a, b, strict=True))


def _consistent(known: _TypedTensor, new: _TypedTensor, prefix: str) -> None:
    if known.datatype != new.datatype:
        raise InvalidArgumentError(
            f"{prefix}inconsistent data type: {known.datatype.config_name} is inferred from "
            f"model {known.model} while {new.datatype.config_name} is inferred from model "
            f"{new.model}"
        )
    # A tensor may pass between a batching and a non-batching model when the full shapes
    # agree ([-1, 4] for a batching model's [4] is a non-batching model's [-1, 4]).
    if not dims_match(known.dims, new.dims) and not dims_match(known.full_dims, new.full_dims):
        raise InvalidArgumentError(
            f"{prefix}inconsistent shape: {_dims_text(known.full_dims)} is inferred from "
            f"model {known.model} while {_dims_text(new.full_dims)} is inferred from model "
            f"{new.model}"
        )


def check_ensemble_steps(ensemble: ModelSpec, composing: Mapping[str, ModelSpec]) -> bool:
    """Check the steps against the composing models' specs (keyed by step model name);
    return whether the ensemble is decoupled. Raises InvalidArgumentError naming the step."""
    scheduling = ensemble.ensemble_scheduling
    if scheduling is None:
        raise ValueError(f"model '{ensemble.name}' is not an ensemble")
    name = ensemble.name
    tensors: dict[str, _TypedTensor] = {}
    for tensor in ensemble.inputs.values():
        tensors[tensor.name] = _TypedTensor.of(name, ensemble.batching, tensor, tensor.model_shape)
    for tensor in ensemble.outputs.values():
        # An output shares its node with a same-named input, as Triton's map emplace does.
        tensors.setdefault(
            tensor.name, _TypedTensor.of(name, ensemble.batching, tensor, tensor.model_shape)
        )
    for step in scheduling.steps:
        model = composing[step.model_name]
        if model.max_batch_size != 0 and model.max_batch_size < ensemble.max_batch_size:
            raise InvalidArgumentError(
                f"ensemble {name} allows maximum batch size {ensemble.max_batch_size}, but it "
                f"contains model {step.model_name} which only allows maximum batch size to be "
                f"{model.max_batch_size}"
            )
        _check_step_mapping(name, step, model, tensors)
    return _label_decoupled(name, ensemble, tensors)


def _check_step_mapping(
    name: str, step: EnsembleStep, model: ModelSpec, tensors: dict[str, _TypedTensor]
) -> None:
    step_model = step.model_name
    batching = model.batching
    for model_input, tensor_name in step.input_map.items():
        if model_input not in model.inputs:
            raise InvalidArgumentError(
                f"in ensemble {name}, ensemble tensor {tensor_name} is mapping to "
                f"non-existing input {model_input} in model {step_model}"
            )
    for declared in model.inputs.values():
        source = step.input_map.get(declared.name)
        if source is None:
            if declared.optional:
                continue
            raise InvalidArgumentError(
                f"in ensemble {name}, input {declared.name} in model {step_model} is not "
                "mapped to any ensemble tensors"
            )
        typed = _TypedTensor.of(step_model, batching, declared, declared.dims)
        known = tensors.get(source)
        if known is None:
            tensors[source] = typed
        else:
            _consistent(known, typed, f"in ensemble {name}, ensemble tensor {source}: ")
    for model_output, tensor_name in step.output_map.items():
        if model_output not in model.outputs:
            raise InvalidArgumentError(
                f"in ensemble {name}, ensemble tensor {tensor_name} is mapped from "
                f"non-existing output {model_output} in model {step_model}"
            )
    sibling = _StepOutputs()
    for model_output, tensor_name in step.output_map.items():
        output = model.outputs[model_output]
        typed = _TypedTensor.of(step_model, batching, output, output.dims)
        known = tensors.get(tensor_name)
        if known is None:
            known = tensors[tensor_name] = typed
        else:
            _consistent(known, typed, f"in ensemble {name}, ensemble tensor {tensor_name}: ")
        known.sibling = sibling
    for tensor_name in step.output_map.values():
        node = tensors[tensor_name]
        node.decoupled = model.decoupled
        for source_name in step.input_map.values():
            read = tensors[source_name]
            node.prev.append(read)
            read.next.append(node)


def _label_decoupled(name: str, ensemble: ModelSpec, tensors: dict[str, _TypedTensor]) -> bool:
    """Give each tensor the label of the decoupled model it comes from (0: none); whether
    any tensor comes from a decoupled model."""
    label = 0
    queue: deque[_TypedTensor] = deque()
    for tensor_name in ensemble.inputs:
        node = tensors[tensor_name]
        node.visited = True
        queue.append(node)
    while queue:
        for node in queue.popleft().next:
            if node.visited or not all(p.visited for p in node.prev):
                continue
            first = node.prev[0].decouple_label
            if any(p.decouple_label != first for p in node.prev):
                raise InvalidArgumentError(
                    f"in ensemble {name}, step of model '{node.model}' receives inputs "
                    "originated from different decoupled models"
                )
            sibling = node.sibling
            if sibling is not None and sibling.visited:
                node.decouple_label = sibling.decouple_label
            else:
                if node.decoupled:
                    label += 1
                    node.decouple_label = label
                else:
                    node.decouple_label = first
                if sibling is not None:
                    sibling.decouple_label = node.decouple_label
                    sibling.visited = True
            node.visited = True
            queue.append(node)
    return label != 0
