"""The model spec: one loaded version's settings, frozen and typed, built once at load.

``ModelSpec.from_config`` reads a completed, normalized and validated ``ModelConfig``
(``config.validate_config`` has passed) and everything downstream reads the spec: request
validation, the schedulers, batching, the backends, warm-up, statistics and the metadata
endpoint. Only the config loader and ``config_to_json_dict`` (the JSON of ``/config`` and of
the Python backend's ``model_config``) read the protobuf message itself.

Names follow the config's fields; durations keep the config's unit in their name
(``max_queue_delay_us``); enum values are their config names (``"KIND_GPU"``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from google.protobuf.message import Message

from pytriton_core import proto, types

_EMPTY: Mapping[Any, Any] = MappingProxyType({})

_ModelConfig: Any = proto.ModelConfig


def _enum_name(enum_type: str, value: int) -> str:
    return str(proto.enum_type(enum_type).Name(value))


def _frozen(items: Iterable[tuple[Any, Any]]) -> Mapping[Any, Any]:
    return MappingProxyType(dict(items))


def _datatype(value: int) -> types.DataType | None:
    """The datatype of a config enum value; None for TYPE_INVALID (unset)."""
    return types.BY_CONFIG_VALUE.get(value)


# ---------------------------------------------------------------------------- tensors


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One input or output as the config declares it."""

    name: str
    datatype: types.DataType
    dims: tuple[int, ...]  # what clients see, without the batch dimension; -1: variable
    reshape: tuple[int, ...] | None = None  # reshape.shape when the config has a reshape
    optional: bool = False  # inputs only
    is_shape_tensor: bool = False
    allow_ragged_batch: bool = False  # inputs only
    label_filename: str = ""  # outputs only: the classification extension's labels
    format: str = "FORMAT_NONE"  # inputs only
    is_non_linear_format_io: bool = False

    @property
    def model_shape(self) -> tuple[int, ...]:
        """What the model sees: ``reshape`` when set, else ``dims``."""
        return self.reshape if self.reshape is not None else self.dims

    @property
    def reshaped(self) -> bool:
        return self.model_shape != self.dims

    @classmethod
    def _input(cls, entry: Any) -> TensorSpec:
        return cls(
            name=entry.name,
            datatype=types.BY_CONFIG_VALUE[entry.data_type],
            dims=tuple(entry.dims),
            reshape=tuple(entry.reshape.shape) if entry.HasField("reshape") else None,
            optional=entry.optional,
            is_shape_tensor=entry.is_shape_tensor,
            allow_ragged_batch=entry.allow_ragged_batch,
            format=_enum_name("inference.ModelInput.Format", entry.format),
            is_non_linear_format_io=entry.is_non_linear_format_io,
        )

    @classmethod
    def _output(cls, entry: Any) -> TensorSpec:
        return cls(
            name=entry.name,
            datatype=types.BY_CONFIG_VALUE[entry.data_type],
            dims=tuple(entry.dims),
            reshape=tuple(entry.reshape.shape) if entry.HasField("reshape") else None,
            is_shape_tensor=entry.is_shape_tensor,
            label_filename=entry.label_filename,
            is_non_linear_format_io=entry.is_non_linear_format_io,
        )


# ------------------------------------------------------------------- dynamic batching


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """``ModelQueuePolicy``: what happens to a request that waits too long."""

    delay_on_timeout: bool = False  # timeout_action DELAY (else REJECT)
    default_timeout_us: int = 0  # 0: no timeout
    allow_timeout_override: bool = False
    max_queue_size: int = 0  # 0: unbounded

    @classmethod
    def _from(cls, policy: Any) -> QueuePolicy:
        return cls(
            delay_on_timeout=_enum_name(
                "inference.ModelQueuePolicy.TimeoutAction", policy.timeout_action
            )
            == "DELAY",
            default_timeout_us=policy.default_timeout_microseconds,
            allow_timeout_override=policy.allow_timeout_override,
            max_queue_size=policy.max_queue_size,
        )

    def timeout_us(self, requested_us: int) -> int:
        """A request's queue timeout: it may only shorten the model's, and only if allowed."""
        if self.allow_timeout_override and 0 < requested_us < self.default_timeout_us:
            return requested_us
        return self.default_timeout_us


@dataclass(frozen=True)
class DynamicBatching:
    """``ModelDynamicBatching``."""

    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = 0
    preserve_ordering: bool = False
    priority_levels: int = 0  # 0: a single level
    default_priority_level: int = 0
    default_queue_policy: QueuePolicy = QueuePolicy()
    priority_queue_policies: Mapping[int, QueuePolicy] = field(default_factory=lambda: _EMPTY)

    @classmethod
    def _from(cls, batching: Any) -> DynamicBatching:
        return cls(
            preferred_batch_sizes=tuple(batching.preferred_batch_size),
            max_queue_delay_us=batching.max_queue_delay_microseconds,
            preserve_ordering=batching.preserve_ordering,
            priority_levels=batching.priority_levels,
            default_priority_level=batching.default_priority_level,
            default_queue_policy=QueuePolicy._from(batching.default_queue_policy),
            priority_queue_policies=_frozen(
                (int(level), QueuePolicy._from(policy))
                for level, policy in sorted(batching.priority_queue_policy.items())
            ),
        )


# ------------------------------------------------------------------ sequence batching


CONTROL_START = "CONTROL_SEQUENCE_START"
CONTROL_END = "CONTROL_SEQUENCE_END"
CONTROL_READY = "CONTROL_SEQUENCE_READY"
CONTROL_CORRID = "CONTROL_SEQUENCE_CORRID"


@dataclass(frozen=True)
class SequenceControl:
    """``ModelSequenceBatching.Control``: how one control signal reaches the model."""

    kind: str  # CONTROL_SEQUENCE_START, _READY, _END or _CORRID
    int32_false_true: tuple[int, ...] = ()
    fp32_false_true: tuple[float, ...] = ()
    bool_false_true: tuple[bool, ...] = ()
    datatype: types.DataType | None = None  # CONTROL_SEQUENCE_CORRID's type

    @property
    def tensor_datatype(self) -> types.DataType | None:
        """The datatype of the tensor the model gets (None: a CORRID without a valid type)."""
        if self.kind == CONTROL_CORRID:
            return self.datatype
        if self.int32_false_true:
            return types.BY_WIRE_NAME["INT32"]
        if self.fp32_false_true:
            return types.BY_WIRE_NAME["FP32"]
        return types.BY_WIRE_NAME["BOOL"]

    @property
    def false_true(self) -> tuple[int, int] | tuple[float, float] | tuple[bool, bool]:
        """A boolean control's (false, true) values, in its tensor's type."""
        if self.int32_false_true:
            return (self.int32_false_true[0], self.int32_false_true[1])
        if self.fp32_false_true:
            return (self.fp32_false_true[0], self.fp32_false_true[1])
        return (self.bool_false_true[0], self.bool_false_true[1])


@dataclass(frozen=True)
class SequenceControlInput:
    """``ModelSequenceBatching.ControlInput``: a model input fed by control signals."""

    name: str
    controls: tuple[SequenceControl, ...]


@dataclass(frozen=True)
class SequenceInitialState:
    """``ModelSequenceBatching.InitialState``."""

    name: str
    datatype: types.DataType | None
    dims: tuple[int, ...]
    zero_data: bool = False
    data_file: str = ""  # under <model>/initial_state/


@dataclass(frozen=True)
class SequenceState:
    """``ModelSequenceBatching.State``: an implicit state carried between requests."""

    input_name: str
    output_name: str
    datatype: types.DataType | None
    dims: tuple[int, ...]
    initial_states: tuple[SequenceInitialState, ...] = ()
    use_same_buffer_for_input_output: bool = False
    use_growable_memory: bool = False


@dataclass(frozen=True)
class DirectStrategy:
    """``StrategyDirect`` (also what a config without a strategy gets)."""

    max_queue_delay_us: int = 0
    minimum_slot_utilization: float = 0.0


@dataclass(frozen=True)
class OldestStrategy:
    """``StrategyOldest``."""

    max_candidate_sequences: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = 0
    preserve_ordering: bool = False


@dataclass(frozen=True)
class SequenceBatching:
    """``ModelSequenceBatching``."""

    max_sequence_idle_us: int
    strategy: DirectStrategy | OldestStrategy
    control_inputs: tuple[SequenceControlInput, ...] = ()
    states: tuple[SequenceState, ...] = ()
    iterative_sequence: bool = False

    def control(self, kind: str) -> tuple[str, SequenceControl] | None:
        """The input that carries control ``kind`` and its control (validation allows one)."""
        for entry in self.control_inputs:
            for control in entry.controls:
                if control.kind == kind:
                    return entry.name, control
        return None

    def batcher_tensors(self) -> tuple[list[TensorSpec], list[TensorSpec]]:
        """The inputs and outputs the sequence batcher adds to what the config lists: the
        control inputs (dims [1]) and the implicit state's inputs and outputs."""
        inputs = [
            TensorSpec(entry.name, datatype, (1,))
            for entry in self.control_inputs
            for control in entry.controls[:1]
            if (datatype := control.tensor_datatype) is not None
        ]
        outputs = []
        for state in self.states:
            if state.datatype is None:
                continue
            inputs.append(TensorSpec(state.input_name, state.datatype, state.dims))
            outputs.append(TensorSpec(state.output_name, state.datatype, state.dims))
        return inputs, outputs

    @classmethod
    def _from(cls, sequence: Any) -> SequenceBatching:
        strategy: DirectStrategy | OldestStrategy
        if sequence.HasField("oldest"):
            oldest = sequence.oldest
            strategy = OldestStrategy(
                max_candidate_sequences=oldest.max_candidate_sequences,
                preferred_batch_sizes=tuple(oldest.preferred_batch_size),
                max_queue_delay_us=oldest.max_queue_delay_microseconds,
                preserve_ordering=oldest.preserve_ordering,
            )
        else:
            direct = sequence.direct
            strategy = DirectStrategy(
                max_queue_delay_us=direct.max_queue_delay_microseconds,
                minimum_slot_utilization=direct.minimum_slot_utilization,
            )
        return cls(
            max_sequence_idle_us=sequence.max_sequence_idle_microseconds,
            strategy=strategy,
            control_inputs=tuple(
                SequenceControlInput(
                    name=entry.name,
                    controls=tuple(
                        SequenceControl(
                            kind=_enum_name(
                                "inference.ModelSequenceBatching.Control.Kind", control.kind
                            ),
                            int32_false_true=tuple(control.int32_false_true),
                            fp32_false_true=tuple(control.fp32_false_true),
                            bool_false_true=tuple(control.bool_false_true),
                            datatype=_datatype(control.data_type),
                        )
                        for control in entry.control
                    ),
                )
                for entry in sequence.control_input
            ),
            states=tuple(
                SequenceState(
                    input_name=state.input_name,
                    output_name=state.output_name,
                    datatype=_datatype(state.data_type),
                    dims=tuple(state.dims),
                    initial_states=tuple(
                        SequenceInitialState(
                            name=initial.name,
                            datatype=_datatype(initial.data_type),
                            dims=tuple(initial.dims),
                            zero_data=initial.zero_data,
                            data_file=initial.data_file,
                        )
                        for initial in state.initial_state
                    ),
                    use_same_buffer_for_input_output=state.use_same_buffer_for_input_output,
                    use_growable_memory=state.use_growable_memory,
                )
                for state in sequence.state
            ),
            iterative_sequence=sequence.iterative_sequence,
        )


# ---------------------------------------------------------------------------- ensembles


@dataclass(frozen=True)
class EnsembleStep:
    """``ModelEnsembling.Step``: one model run, its tensors mapped to the ensemble's."""

    model_name: str
    model_version: int  # -1: the latest
    input_map: Mapping[str, str]  # the step model's input -> the ensemble tensor feeding it
    output_map: Mapping[str, str]  # the step model's output -> the ensemble tensor it makes
    model_namespace: str = ""


@dataclass(frozen=True)
class EnsembleScheduling:
    """``ModelEnsembling``."""

    steps: tuple[EnsembleStep, ...]
    max_inflight_requests: int = 0  # 0: no limit

    @classmethod
    def _from(cls, ensemble: Any) -> EnsembleScheduling:
        return cls(
            steps=tuple(
                EnsembleStep(
                    model_name=step.model_name,
                    model_version=step.model_version,
                    input_map=_frozen(step.input_map.items()),
                    output_map=_frozen(step.output_map.items()),
                    model_namespace=step.model_namespace,
                )
                for step in ensemble.step
            ),
            max_inflight_requests=ensemble.max_inflight_requests,
        )


# ------------------------------------------------------------------- instance groups


@dataclass(frozen=True)
class RateLimiterResource:
    name: str
    is_global: bool  # the config's ``global``
    count: int


@dataclass(frozen=True)
class InstanceGroup:
    """``ModelInstanceGroup`` after normalization (kind resolved, count >= 1, GPUs placed)."""

    name: str
    kind: str  # KIND_CPU, KIND_GPU or KIND_MODEL
    count: int
    gpus: tuple[int, ...] = ()
    rate_limiter_resources: tuple[RateLimiterResource, ...] = ()
    rate_limiter_priority: int = 0
    profiles: tuple[str, ...] = ()
    passive: bool = False
    host_policy: str = ""

    @classmethod
    def _from(cls, group: Any) -> InstanceGroup:
        return cls(
            name=group.name,
            kind=_enum_name("inference.ModelInstanceGroup.Kind", group.kind),
            count=group.count,
            gpus=tuple(group.gpus),
            rate_limiter_resources=tuple(
                RateLimiterResource(r.name, getattr(r, "global"), r.count)
                for r in group.rate_limiter.resources
            ),
            rate_limiter_priority=group.rate_limiter.priority,
            profiles=tuple(group.profile),
            passive=group.passive,
            host_policy=group.host_policy,
        )


# ---------------------------------------------------------------- warm-up, optimization


@dataclass(frozen=True)
class WarmupInput:
    """``ModelWarmup.Input``: where one input's data comes from."""

    datatype: types.DataType | None  # None: TYPE_INVALID, refused when samples are built
    dims: tuple[int, ...]
    zero_data: bool = False
    random_data: bool = False
    input_data_file: str = ""  # under <model>/warmup/


@dataclass(frozen=True)
class WarmupSetting:
    """``ModelWarmup``: one sample, as the config gives it."""

    name: str  # may be "": warm-up names it by its index
    batch_size: int  # the config's 0 reads as 1
    count: int  # the config's 0 reads as 1
    inputs: Mapping[str, WarmupInput]

    @classmethod
    def _from(cls, setting: Any) -> WarmupSetting:
        return cls(
            name=setting.name,
            batch_size=setting.batch_size or 1,
            count=setting.count or 1,
            inputs=_frozen(
                (
                    name,
                    WarmupInput(
                        datatype=_datatype(data.data_type),
                        dims=tuple(data.dims),
                        zero_data=data.zero_data,
                        random_data=data.random_data,
                        input_data_file=data.input_data_file,
                    ),
                )
                for name, data in setting.inputs.items()
            ),
        )


@dataclass(frozen=True)
class ExecutionAccelerator:
    name: str
    parameters: Mapping[str, str]


@dataclass(frozen=True)
class Optimization:
    """``ModelOptimizationPolicy`` (CUDA graphs are left in the config: no backend uses them)."""

    graph_level: int = 0
    priority: str = "PRIORITY_DEFAULT"
    gpu_execution_accelerators: tuple[ExecutionAccelerator, ...] = ()
    cpu_execution_accelerators: tuple[ExecutionAccelerator, ...] = ()
    input_pinned_memory: bool = True
    output_pinned_memory: bool = True
    gather_kernel_buffer_threshold: int = 0
    eager_batching: bool = False

    @classmethod
    def _from(cls, optimization: Any) -> Optimization:
        accelerators = optimization.execution_accelerators

        def listed(entries: Any) -> tuple[ExecutionAccelerator, ...]:
            return tuple(
                ExecutionAccelerator(entry.name, _frozen(entry.parameters.items()))
                for entry in entries
            )

        return cls(
            graph_level=optimization.graph.level,
            priority=_enum_name(
                "inference.ModelOptimizationPolicy.ModelPriority", optimization.priority
            ),
            gpu_execution_accelerators=listed(accelerators.gpu_execution_accelerator),
            cpu_execution_accelerators=listed(accelerators.cpu_execution_accelerator),
            # Normalization sets both; an ensemble has neither (and pins nothing).
            input_pinned_memory=optimization.input_pinned_memory.enable,
            output_pinned_memory=optimization.output_pinned_memory.enable,
            gather_kernel_buffer_threshold=optimization.gather_kernel_buffer_threshold,
            eager_batching=optimization.eager_batching,
        )


@dataclass(frozen=True)
class VersionPolicy:
    """``ModelVersionPolicy``: which version folders are served."""

    choice: str  # "latest", "all" or "specific"
    num_versions: int = 0  # latest
    versions: tuple[int, ...] = ()  # specific

    @classmethod
    def _from(cls, policy: Any) -> VersionPolicy:
        choice = policy.WhichOneof("policy_choice") or "latest"
        if choice == "specific":
            return cls(choice, versions=tuple(policy.specific.versions))
        if choice == "latest":
            return cls(choice, num_versions=policy.latest.num_versions or 1)
        return cls(choice)


# ------------------------------------------------------------------------- the spec


@dataclass(frozen=True)
class ModelSpec:
    """One loaded model version's settings (see the module docstring)."""

    name: str
    version: int
    platform: str
    backend: str
    max_batch_size: int  # 0: no batch dimension
    inputs: Mapping[str, TensorSpec]  # in config order
    outputs: Mapping[str, TensorSpec]  # in config order
    required_inputs: tuple[str, ...]  # the inputs that are not optional, in config order
    runtime: str = ""
    default_model_filename: str = ""
    version_policy: VersionPolicy = VersionPolicy("latest", num_versions=1)
    # At most one scheduling choice is set (the config's oneof); none: the default scheduler.
    dynamic_batching: DynamicBatching | None = None
    sequence_batching: SequenceBatching | None = None
    ensemble_scheduling: EnsembleScheduling | None = None
    instance_groups: tuple[InstanceGroup, ...] = ()
    parameters: Mapping[str, str] = field(default_factory=lambda: _EMPTY)  # string_value
    decoupled: bool = False  # model_transaction_policy
    warmup: tuple[WarmupSetting, ...] = ()
    response_cache: bool = False
    optimization: Optimization = Optimization()
    # model_metrics: a histogram family's bucket bounds (sorted) where the config sets them.
    histogram_buckets: Mapping[str, tuple[float, ...]] = field(default_factory=lambda: _EMPTY)

    @classmethod
    def from_config(cls, config: Message, version: int) -> ModelSpec:
        """The spec of ``version`` of a validated config."""
        cfg: Any = config
        inputs = [TensorSpec._input(entry) for entry in cfg.input]
        outputs = [TensorSpec._output(entry) for entry in cfg.output]
        buckets = {
            control.metric_identifier.family: tuple(
                sorted(float(b) for b in control.histogram_options.buckets)
            )
            for control in cfg.model_metrics.metric_control
            if control.histogram_options.buckets
        }
        scheduling = cfg.WhichOneof("scheduling_choice")
        return cls(
            name=cfg.name,
            version=version,
            platform=cfg.platform,
            backend=cfg.backend,
            runtime=cfg.runtime,
            default_model_filename=cfg.default_model_filename,
            max_batch_size=cfg.max_batch_size,
            inputs=_frozen((t.name, t) for t in inputs),
            outputs=_frozen((t.name, t) for t in outputs),
            required_inputs=tuple(t.name for t in inputs if not t.optional),
            version_policy=VersionPolicy._from(cfg.version_policy),
            dynamic_batching=DynamicBatching._from(cfg.dynamic_batching)
            if scheduling == "dynamic_batching"
            else None,
            sequence_batching=SequenceBatching._from(cfg.sequence_batching)
            if scheduling == "sequence_batching"
            else None,
            ensemble_scheduling=EnsembleScheduling._from(cfg.ensemble_scheduling)
            if scheduling == "ensemble_scheduling"
            else None,
            instance_groups=tuple(InstanceGroup._from(g) for g in cfg.instance_group),
            parameters=_frozen((k, v.string_value) for k, v in cfg.parameters.items()),
            decoupled=cfg.model_transaction_policy.decoupled,
            warmup=tuple(WarmupSetting._from(s) for s in cfg.model_warmup),
            response_cache=cfg.response_cache.enable,
            optimization=Optimization._from(cfg.optimization),
            histogram_buckets=_frozen(buckets.items()),
        )

    @property
    def batching(self) -> bool:
        """Whether the model has a batch dimension (``max_batch_size > 0``)."""
        return self.max_batch_size > 0

    @functools.cached_property
    def model_inputs(self) -> Mapping[str, TensorSpec]:
        """What the model itself receives: the config's inputs, then the sequence
        batcher's control inputs and implicit-state inputs (clients send neither)."""
        if self.sequence_batching is None:
            return self.inputs
        added, _ = self.sequence_batching.batcher_tensors()
        return _frozen([*self.inputs.items(), *((t.name, t) for t in added)])

    @functools.cached_property
    def model_outputs(self) -> Mapping[str, TensorSpec]:
        """What the model itself produces: the config's outputs and the implicit-state
        outputs (a state output may also be listed in the config, to be requested)."""
        if self.sequence_batching is None:
            return self.outputs
        _, added = self.sequence_batching.batcher_tensors()
        extra = [(t.name, t) for t in added if t.name not in self.outputs]
        return _frozen([*self.outputs.items(), *extra])

    @functools.cached_property
    def state_outputs(self) -> frozenset[str]:
        """The implicit-state outputs, which the server keeps for the sequence's next request."""
        if self.sequence_batching is None:
            return frozenset()
        return frozenset(state.output_name for state in self.sequence_batching.states)

    @property
    def reported_platform(self) -> str:
        """What model metadata names as the platform: the platform, else the backend."""
        return self.platform or self.backend

    def full_shape(self, tensor: TensorSpec) -> list[int]:
        """The shape clients see: ``[-1] + dims`` for batching models."""
        return [-1, *tensor.dims] if self.max_batch_size > 0 else list(tensor.dims)
