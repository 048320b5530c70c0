"""Implicit state (``sequence_batching.state``): tensors a sequence carries between requests.

The model reads each state as an input (``input_name``) and writes its next value as an
output (``output_name``); the batcher feeds request i+1 what request i wrote, so clients
never send it. A sequence starts from ``initial_state`` (zeros, or the bytes of a file in
``<model>/initial_state/``) or, without one, from zeros with every variable dimension 1;
a START request resets it.

Where the state lives: the model's output becomes the next input as it is, without a copy,
so a GPU instance keeps its state on the device. ``use_same_buffer_for_input_output``
gives each sequence one buffer for its whole life instead: the model gets it as a writable
input (it may update it in place) and an output of the same size is copied into it.
``use_growable_memory`` (GPU instances only, with the same buffer, as in Triton) lets that
buffer hold a state whose size changes: an output that fits is copied in, and only a larger
one takes a new buffer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pytriton_core import types
from pytriton_core.config.spec import ModelSpec, SequenceState
from pytriton_core.errors import ModelConfigError, ServerError
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.tensor import DeviceTensor, Tensor
from pytriton_core.inference.tensor_data import array_from_bytes, zeros
from pytriton_core.memory.device import DeviceArray, cupy_module
from pytriton_core.paths import PathEscapeError, confined_path

INITIAL_STATE_DIR = "initial_state"


@dataclass(frozen=True)
class StateTemplate:
    """One configured state, with the data a sequence starts from (read-only)."""

    input_name: str
    output_name: str
    datatype: types.DataType
    initial: np.ndarray  # with the batch dimension when the model batches
    same_buffer: bool
    growable: bool


def state_templates(spec: ModelSpec, model_dir: Path | None) -> tuple[StateTemplate, ...]:
    """The model's states with their initial data; ModelConfigError names a bad one."""
    sequence = spec.sequence_batching
    if sequence is None:
        return ()
    templates = []
    for state in sequence.states:
        assert state.datatype is not None  # validation refuses a state without one
        lead = (1,) if spec.batching else ()
        if state.initial_states:
            initial = _initial_data(spec, state, model_dir, lead)
        else:
            initial = zeros(state.datatype, lead + tuple(1 if d == -1 else d for d in state.dims))
        initial.flags.writeable = False
        templates.append(
            StateTemplate(
                state.input_name,
                state.output_name,
                state.datatype,
                initial,
                state.use_same_buffer_for_input_output,
                state.use_growable_memory,
            )
        )
    return tuple(templates)


def _initial_data(
    spec: ModelSpec, state: SequenceState, model_dir: Path | None, lead: tuple[int, ...]
) -> np.ndarray:
    """Triton's checks and messages (SequenceBatchScheduler::GenerateInitialStateData)."""
    datatype = state.datatype
    assert datatype is not None
    name = state.input_name

    def fail(detail: str) -> ModelConfigError:
        return ModelConfigError(f"model '{spec.name}': {detail}")

    if len(state.initial_states) > 1:
        raise fail(
            f"initial_state field for state input '{name}' must contain exactly one or zero "
            f"element. Found '{len(state.initial_states)}' elements."
        )
    initial = state.initial_states[0]
    if initial.datatype is not datatype:
        raise fail(
            f"The data type used for 'initial_state' field of state '{name}' does not match "
            "the state data type."
        )
    if not initial.name:
        raise fail(f"Field 'name' must be set when using initial_state for state input '{name}'.")
    if len(initial.dims) != len(state.dims):
        raise fail(
            "Number of dimensions in 'initial_state' doesn't match the size of 'state' "
            f"dimensions for state input '{name}'. {len(initial.dims)} != {len(state.dims)}"
        )
    for given, declared in zip(initial.dims, state.dims, strict=True):
        if given == -1:
            raise fail(
                f"'initial_state' field for state input name '{name}' contains variable dimensions."
            )
        if declared != -1 and given != declared:
            raise fail(
                f"'initial_state' dim for input name '{name}' doesn't match 'state' dim "
                f"description. {given} != {declared}"
            )
    shape = list(lead + initial.dims)
    if initial.zero_data:
        return zeros(datatype, shape)
    if not initial.data_file:
        raise fail(f"initial_state setting expects state'{name}' to have state_data set")
    if model_dir is None:
        raise fail(f"initial_state data_file '{initial.data_file}' needs the model's folder")
    try:
        # The server's one rule for paths a config names: inside the model's folder.
        path = confined_path(
            model_dir,
            INITIAL_STATE_DIR,
            initial.data_file,
            what=f"initial_state data_file '{initial.data_file}' of state input '{name}'",
        )
    except PathEscapeError as exc:
        raise fail(exc.message) from None
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise fail(f"unable to read initial_state data_file '{path}': {exc.strerror}") from None
    if not datatype.is_bytes:
        expected = types.element_count(shape) * datatype.itemsize
        if len(raw) < expected:
            raise fail(
                f"initial_state setting expects {expected} bytes, but the data provided from "
                f"{initial.data_file}only has {len(raw)} bytes."
            )
        raw = raw[:expected]  # Triton takes the first bytes of a larger file
    try:
        data = array_from_bytes(
            raw, datatype, shape, input_name=name, model_name=spec.name, request_id=""
        )
    except ServerError as exc:
        raise fail(f"initial_state data_file '{initial.data_file}': {exc.message}") from None
    return np.array(data)  # its own memory, not a view of the file's bytes


@dataclass(slots=True)
class _Held:
    tensor: Tensor
    capacity: int  # bytes of the buffer behind it (growable device buffers)


class SequenceStates:
    """The implicit state of the sequence in one slot (see the module docstring)."""

    __slots__ = ("_held", "_templates")

    def __init__(self, templates: tuple[StateTemplate, ...]) -> None:
        self._templates = templates
        self._held: dict[str, _Held] = {}
        self.reset()

    def reset(self) -> None:
        """Back to the initial state (a sequence starts)."""
        self._held = {}
        for template in self._templates:
            data = template.initial
            if template.same_buffer:
                data = np.array(data)  # the sequence's own buffer, writable by the model
            self._held[template.input_name] = _Held(
                Tensor(template.input_name, template.datatype, data), data.nbytes
            )

    def inputs(self) -> dict[str, Tensor]:
        """The state inputs of the sequence's next request."""
        return {name: held.tensor for name, held in self._held.items()}

    def filler_inputs(self) -> dict[str, Tensor]:
        """Zeros shaped like this sequence's states, for a slot's filler (whose outputs are
        dropped: the real state is never touched)."""
        return {
            name: Tensor(name, held.tensor.datatype, zeros(held.tensor.datatype, held.tensor.shape))
            for name, held in self._held.items()
        }

    def update(self, response: InferenceResponse) -> None:
        """Keep what the model wrote to the state outputs (a state it did not write stays)."""
        for template in self._templates:
            written = response.output(template.output_name)
            if written is not None:
                self._store(template, written)

    def _store(self, template: StateTemplate, written: Tensor) -> None:
        name = template.input_name
        held = self._held[name]
        if isinstance(written, DeviceTensor) and isinstance(written.device, DeviceArray):
            if not written.on_host:
                self._store_on_device(template, held, written.device)
                return
        array = written.data
        current = held.tensor.data
        if template.same_buffer:
            if (
                not isinstance(held.tensor, DeviceTensor)
                and current.shape == array.shape
                and current.dtype == array.dtype
            ):
                np.copyto(current, array)
                return
            array = np.array(array)  # a buffer of its own for the next requests
        self._held[name] = _Held(Tensor(name, written.datatype, array), array.nbytes)

    def _store_on_device(self, template: StateTemplate, held: _Held, written: DeviceArray) -> None:
        name = template.input_name
        current = held.tensor
        if template.same_buffer and isinstance(current, DeviceTensor):
            buffer = current.device
            assert isinstance(buffer, DeviceArray)
            fits = (
                written.nbytes <= held.capacity
                if template.growable
                else written.shape == buffer.shape
            )
            if fits and written.dtype == buffer.dtype:
                written.copy_to(buffer.pointer)
                view = DeviceArray(
                    buffer.pointer,
                    written.shape,
                    written.dtype,
                    buffer.device_id,
                    buffer.owner,
                    buffer.staging,
                )
                self._held[name] = _Held(DeviceTensor(name, current.datatype, view), held.capacity)
                return
        if template.same_buffer:
            # The sequence's buffer must be its own: the output may be a view of a batch
            # that responses still read.
            written = _device_copy(written)
        # Otherwise the model's output buffer becomes the state as it is (no copy).
        self._held[name] = _Held(DeviceTensor(name, template.datatype, written), written.nbytes)


def _device_copy(array: DeviceArray) -> DeviceArray:
    """A copy of ``array`` in a device buffer of its own (on the same GPU)."""
    cupy = cupy_module()
    with cupy.cuda.Device(array.device_id):
        memory = cupy.cuda.alloc(max(array.nbytes, 1))
    array.copy_to(int(memory.ptr))
    return DeviceArray(
        int(memory.ptr), array.shape, array.dtype, array.device_id, memory, array.staging
    )
