"""The ensemble's data flow: which step runs when, and what it is given (after Triton's
``EnsembleContext``).

``EnsemblePlan`` is built once per loaded ensemble from its spec; ``EnsembleRun`` carries
one ensemble request. The run issues a step as soon as every tensor it reads exists, hands
each step request to ``submit`` (the runtime routes it through the composing model's own
scheduler), publishes each step response's outputs under the ensemble's tensor names, and
answers the ensemble request through ``deliver`` once every requested output exists.

Tensors move between steps as the same arrays (renamed, at most reshaped as a view), never
copied. A decoupled step may answer many times: each of its responses is an *iteration* of
the tensors it writes, and a step runs once per iteration of its inputs, as in Triton.

Everything here runs on the server's event loop.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from pytriton_core.config.ensemble import dims_match
from pytriton_core.config.spec import ModelSpec
from pytriton_core.errors import InvalidArgumentError, ServerError
from pytriton_core.inference.request import (
    SEQUENCE_END,
    SEQUENCE_START,
    InferenceRequest,
    RequestedOutput,
)
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.statistics import ComputeTiming
from pytriton_core.inference.tensor import DeviceTensor, Tensor


@dataclass(frozen=True)
class PlannedStep:
    index: int
    model_name: str
    model_version: int  # -1: the latest
    input_map: Mapping[str, str]  # the model's input -> the ensemble tensor it reads
    output_map: Mapping[str, str]  # the model's output -> the ensemble tensor it writes


class EnsemblePlan:
    """The steps of one loaded ensemble and the tensors that link them."""

    def __init__(self, spec: ModelSpec) -> None:
        scheduling = spec.ensemble_scheduling
        if scheduling is None:
            raise ValueError(f"model '{spec.name}' is not an ensemble")
        self.spec = spec
        self.decoupled = spec.decoupled
        self.steps = tuple(
            PlannedStep(i, s.model_name, s.model_version, s.input_map, s.output_map)
            for i, s in enumerate(scheduling.steps)
        )
        consumers: dict[str, set[int]] = {name: set() for name in spec.inputs}
        consumers.update((name, set()) for name in spec.outputs)
        self._producer: dict[str, int] = {}
        for step in self.steps:
            for tensor in step.input_map.values():
                consumers.setdefault(tensor, set()).add(step.index)
            for tensor in step.output_map.values():
                consumers.setdefault(tensor, set())
                self._producer[tensor] = step.index
        self._consumers = {name: frozenset(steps) for name, steps in consumers.items()}
        self.optional_inputs = frozenset(t.name for t in spec.inputs.values() if t.optional)
        self._pruned: dict[frozenset[str], dict[str, frozenset[int]]] = {}

    def consumers(self, requested: frozenset[str]) -> Mapping[str, frozenset[int]]:
        """Each tensor's consuming steps, leaving out the steps that write nothing the
        request asked for (directly or through later steps), as Triton prunes them."""
        cached = self._pruned.get(requested)
        if cached is not None:
            return cached
        consumers = {name: set(steps) for name, steps in self._consumers.items()}
        ignored = set(self.spec.outputs) - requested
        outputs_left: dict[int, int] = {}
        while ignored:
            newly_ignored: set[str] = set()
            for tensor in ignored:
                index = self._producer.get(tensor)
                if index is None:  # an ensemble input nothing reads any more
                    continue
                step = self.steps[index]
                left = outputs_left.get(index, len(step.output_map)) - 1
                outputs_left[index] = left
                if left == 0:
                    for source in step.input_map.values():
                        consumers[source].discard(index)
                        if not consumers[source]:
                            newly_ignored.add(source)
            ignored = newly_ignored
        pruned = {name: frozenset(steps) for name, steps in consumers.items()}
        if len(self._pruned) < 64:  # a handful of requested-output sets in practice
            self._pruned[requested] = pruned
        return pruned


@dataclass(slots=True)
class _Slot:
    """One iteration of an ensemble tensor, until every reader has taken it."""

    tensor: Tensor | None  # None: an optional input that was not given
    readers_left: int
    correlation_id: int | str
    flags: int


@dataclass(slots=True)
class _TensorData:
    readers: int  # consuming steps, plus one when the request asked for the tensor
    batch_size: int = 0  # 0: made without a batch dimension
    next_iteration: int = 0
    slots: dict[int, _Slot] = field(default_factory=dict)

    def add(self, slot: _Slot) -> int:
        iteration = self.next_iteration
        self.slots[iteration] = slot
        self.next_iteration += 1
        return iteration

    def take(self, iteration: int) -> None:
        slot = self.slots[iteration]
        slot.readers_left -= 1
        if slot.readers_left <= 0:
            del self.slots[iteration]


@dataclass(eq=False)
class StepCall:
    """One step request in flight, for the runtime to submit (its ``request``)."""

    step: PlannedStep
    request: InferenceRequest
    correlation_id: int | str
    flags: int


Submit = Callable[[StepCall], None]
Deliver = Callable[[InferenceResponse | None, bool], None]


class EnsembleRun:
    """One ensemble request through the plan.

    ``targets[i]`` is the spec of the model version step ``i`` runs on. ``submit`` sends a
    step request on its way (raising a ServerError if it cannot), and the runtime calls
    ``step_response`` with each of its responses; ``deliver`` receives the ensemble's own
    responses, the last with ``final=True``. ``done`` is set once the request is answered
    and no step is in flight; ``error`` holds what failed it.
    """

    def __init__(
        self,
        plan: EnsemblePlan,
        request: InferenceRequest,
        targets: Sequence[ModelSpec],
        submit: Submit,
        deliver: Deliver,
    ) -> None:
        self._plan = plan
        self.request = request
        self._targets = targets
        self._submit = submit
        self._deliver = deliver
        spec = plan.spec
        requested = (
            frozenset(spec.outputs)
            if request.requested_outputs is None
            else frozenset(request.requested_outputs)
        )
        self.requested = requested
        self._consumers = plan.consumers(requested)
        self._tensors = {
            name: _TensorData(len(steps) + (1 if name in requested else 0))
            for name, steps in self._consumers.items()
        }
        self._batch_size = request.batch_size if spec.batching else 0
        self._in_flight = 0
        self._active: dict[int, StepCall] = {}  # submitted, not answered yet (by id)
        self._response_sent = False
        self._final_sent = False
        self._error_sent = False
        self.error: ServerError | None = None
        self.done = False
        # Summed over the step requests (Triton's per-ensemble stats aggregator).
        self.compute_input_ns = 0
        self.compute_infer_ns = 0
        self.compute_output_ns = 0
        # Steps answered while their execution had not ended on the loop (a decoupled
        # model's final response comes before its execute returns): their compute time is
        # still to come. ``on_computed`` is called once none is left (``computed``).
        self._uncomputed: set[int] = set()
        self.on_computed: Callable[[], None] | None = None

    # ------------------------------------------------------------------ driving

    def start(self) -> None:
        """Put the request's inputs in place and issue the steps that can run.

        The request has passed the ensemble's validation, so each input is an ensemble
        input; an optional input it leaves out is filed as absent.
        """
        request = self.request
        updated: list[tuple[str, int]] = []
        for name in self._plan.spec.inputs:
            tensor = request.inputs.get(name)
            if tensor is None and name not in self._plan.optional_inputs:
                continue
            data = self._tensors[name]
            data.batch_size = self._batch_size
            slot = _Slot(tensor, data.readers, request.correlation_id, request.flags)
            updated.append((name, data.add(slot)))
        self._issue(self._ready_steps(updated))
        self._finish()

    def fail(self, error: ServerError) -> None:
        """Fail the request (the first error wins); the answer waits for steps in flight."""
        if self.error is None:
            self.error = error

    def step_response(
        self, call: StepCall, response: InferenceResponse | None, final: bool
    ) -> None:
        """One response of a step request (None: a flag-only final one)."""
        if final:
            self._in_flight -= 1
            self._active.pop(id(call), None)
            if call.request.executing:
                self._uncomputed.add(id(call))
        updated: list[tuple[str, int]] = []
        if response is not None:
            if response.error is not None:
                self.fail(response.error)
            else:
                updated = self._publish(call, response)
        if self.error is None:
            self._issue(self._ready_steps(updated))
            if updated:
                self._send_outputs(updated)
        self._finish()

    def step_failed(self, call: StepCall, error: ServerError) -> None:
        """A step request could not be submitted (or was refused before it ran)."""
        self.step_response(call, InferenceResponse.failed(error), True)

    def cancel_steps(self) -> None:
        """The ensemble request was cancelled: cancel its step requests in flight (those
        not started yet never start; the others see it through ``is_cancelled()``)."""
        for call in list(self._active.values()):
            call.request.cancel()

    @property
    def computed(self) -> bool:
        """Whether every answered step's compute time is in the sums."""
        return not self._uncomputed

    def observe_compute(self, call: StepCall, timing: ComputeTiming | None) -> None:
        """A step's execution ended (None: it failed, with no compute time to add)."""
        awaited = id(call) in self._uncomputed
        if timing is not None and (awaited or not self.done):
            self.compute_input_ns += timing.input_end_ns - timing.start_ns
            self.compute_infer_ns += timing.infer_end_ns - timing.input_end_ns
            self.compute_output_ns += timing.end_ns - timing.infer_end_ns
        if awaited:
            self._uncomputed.discard(id(call))
            if not self._uncomputed and self.on_computed is not None:
                on_computed, self.on_computed = self.on_computed, None
                on_computed()

    # ----------------------------------------------------------------- internals

    def _ready_steps(self, updated: list[tuple[str, int]]) -> list[tuple[int, int]]:
        """The (step, iteration) pairs whose every input now exists."""
        ready: dict[tuple[int, int], None] = {}
        steps = self._plan.steps
        for name, iteration in updated:
            for index in sorted(self._consumers[name]):
                if (index, iteration) in ready:
                    continue
                if all(
                    iteration in self._tensors[source].slots
                    for source in steps[index].input_map.values()
                ):
                    ready[(index, iteration)] = None
        return list(ready)

    def _issue(self, ready: list[tuple[int, int]]) -> None:
        calls = [self._prepare_step(self._plan.steps[i], iteration) for i, iteration in ready]
        self._in_flight += len(calls)
        for call in calls:
            if self.error is not None:
                self._in_flight -= 1  # never submitted: the request has failed already
                continue
            # Active before it is submitted: a step may be answered within ``submit`` (a
            # lone request to a short Python model executes on the loop).
            self._active[id(call)] = call
            try:
                self._submit(call)
            except ServerError as exc:
                self._active.pop(id(call), None)
                self._in_flight -= 1
                self.fail(exc)

    def _prepare_step(self, step: PlannedStep, iteration: int) -> StepCall:
        request = self.request
        target = self._targets[step.index]
        correlation_id, flags = request.correlation_id, request.flags
        overridden = False
        inputs: dict[str, Tensor] = {}
        batch_size = 0
        for model_input, source in step.input_map.items():
            data = self._tensors[source]
            slot = data.slots[iteration]
            if slot.tensor is not None:
                declared = target.inputs[model_input]
                shape = reshaped_dims(
                    declared.dims, target.batching, data.batch_size, slot.tensor.shape
                )
                tensor = renamed(slot.tensor, model_input, shape)
                inputs[model_input] = tensor
                if target.batching and tensor.shape and not batch_size:
                    batch_size = tensor.shape[0]
            # Steps take the sequence settings of the response that made their inputs; the
            # first one wins when they disagree, as in Triton.
            if not overridden:
                correlation_id, flags, overridden = slot.correlation_id, slot.flags, True
        for source in set(step.input_map.values()):
            self._tensors[source].take(iteration)
        for output in step.output_map.values():
            self._tensors[output].batch_size = batch_size
        step_request = InferenceRequest(
            model_name=step.model_name,
            model_version=step.model_version,
            id=request.id,
            inputs=inputs,
            requested_outputs={name: RequestedOutput(name) for name in step.output_map},
            parameters=request.parameters,
            priority=request.priority,
            timeout_us=request.timeout_us,
            correlation_id=correlation_id,
            flags=flags,
        )
        call = StepCall(step, step_request, correlation_id, flags)
        step_request.on_response = lambda r, final: self.step_response(call, r, final)
        step_request.compute_observer = functools.partial(self.observe_compute, call)
        return call

    def _publish(self, call: StepCall, response: InferenceResponse) -> list[tuple[str, int]]:
        """File the response's outputs under their ensemble names."""
        correlation_id, flags = call.correlation_id, call.flags
        parameters = response.parameters
        if any(key in parameters for key in _SEQUENCE_PARAMETERS):
            # A model's sequence settings replace the request's for what reads its outputs.
            sequence_id = parameters.get("sequence_id", correlation_id)
            if isinstance(sequence_id, int | str):
                correlation_id = sequence_id
            flags = (SEQUENCE_START if parameters.get("sequence_start") else 0) | (
                SEQUENCE_END if parameters.get("sequence_end") else 0
            )
        updated: list[tuple[str, int]] = []
        missing = dict(call.step.output_map)
        for tensor in response.outputs:
            name = missing.pop(tensor.name, None)
            if name is None:
                continue  # an output the step did not ask for
            data = self._tensors[name]
            slot = _Slot(renamed(tensor, name), data.readers, correlation_id, flags)
            updated.append((name, data.add(slot)))
        # An output the model left out may still be an optional input of a later step.
        for name in missing.values():
            data = self._tensors[name]
            updated.append((name, data.add(_Slot(None, data.readers, correlation_id, flags))))
        return updated

    def _send_outputs(self, updated: list[tuple[str, int]]) -> None:
        """Answer once every requested output has the iteration just made."""
        requested = self.requested
        iteration = -1
        for name, made in updated:
            if name in requested:
                iteration = made
        if iteration < 0 or any(iteration not in self._tensors[n].slots for n in requested):
            return
        spec = self._plan.spec
        response = InferenceResponse()
        for name, declared in spec.outputs.items():
            if name not in requested:
                continue
            data = self._tensors[name]
            slot = data.slots[iteration]
            data.take(iteration)
            if slot.tensor is None:
                continue  # the composing model did not produce it
            shape = reshaped_dims(
                declared.model_shape, self._batch_size != 0, data.batch_size, slot.tensor.shape
            )
            response.outputs.append(renamed(slot.tensor, name, shape))
            # Triton reports the sequence settings with every output of an ensemble.
            response.parameters["sequence_id"] = slot.correlation_id
            response.parameters["sequence_start"] = bool(slot.flags & SEQUENCE_START)
            response.parameters["sequence_end"] = bool(slot.flags & SEQUENCE_END)
        self._answer(response)

    def _answer(self, response: InferenceResponse | None) -> None:
        final = self._in_flight == 0
        if response is not None:
            self._response_sent = True
            self._final_sent = final
            self._deliver(response, final)
        elif final:
            # A decoupled ensemble may end with no response at all, as its models may.
            if self._plan.decoupled or self._response_sent:
                self._final_sent = True
                self._deliver(None, True)
            else:
                self.fail(
                    InvalidArgumentError(
                        "unexpected deadlock, at least one output is not set while no more "
                        "ensemble steps can be made"
                    ).with_request_id(self.request.id)
                )

    def _finish(self) -> None:
        if self.done:
            return
        if self._in_flight == 0 and self.error is None and not self._final_sent:
            self._answer(None)
        if self._in_flight == 0:
            if self.error is not None and not self._error_sent:
                self._error_sent = True
                self.error = _in_ensemble(self._plan.spec.name, self.error)
                self._deliver(InferenceResponse.failed(self.error), True)
            self.done = True


_SEQUENCE_PARAMETERS = ("sequence_id", "sequence_start", "sequence_end")


def _in_ensemble(name: str, error: ServerError) -> ServerError:
    return ServerError.from_code(error.code, f"in ensemble '{name}', {error.message}")


def reshaped_dims(
    config_dims: Sequence[int],
    allow_batching: bool,
    tensor_batch_size: int,
    shape: Sequence[int],
) -> tuple[int, ...]:
    """A tensor's shape as the next model expects it (Triton's ``ReshapeTensorDims``).

    Between a batching and a non-batching model a shape gains a batch dimension of 1, or
    loses one of size 1, when that is what makes it fit the next model's dims.
    """
    dims = tuple(shape)
    if allow_batching == (tensor_batch_size != 0):
        return dims
    if allow_batching:
        return (1, *dims) if dims_match(config_dims, dims) else dims
    if not dims_match(config_dims, dims) and tensor_batch_size == 1:
        return dims[1:]
    return dims


def renamed(tensor: Tensor, name: str, shape: tuple[int, ...] | None = None) -> Tensor:
    """The same data under another name (and shape), without copying it."""
    if isinstance(tensor, DeviceTensor):
        if shape is None or shape == tensor.shape:
            moved = DeviceTensor(name, tensor.datatype, tensor.device)
            if tensor.on_host:
                moved.data = tensor.data
            return moved
        return Tensor(name, tensor.datatype, tensor.data.reshape(shape))
    data = tensor.data
    if shape is not None and shape != data.shape:
        data = data.reshape(shape)
    return Tensor(name, tensor.datatype, data)
