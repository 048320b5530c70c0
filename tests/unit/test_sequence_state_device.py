"""Where a sequence's implicit state lives when a GPU backend leaves it on the device, run
on a CPU: the stand-in cupy of tests/integration/cuda_standin plays the device (its memory
is host memory, its copies ``memmove``), so this is the server's own device-state code
(``SequenceStates`` with device outputs) without a GPU. tests/gpu/test_sequence_state_gpu.py
runs the same paths on real CUDA through the backends."""

from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from pytriton_core import types
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.tensor import DeviceTensor, Tensor
from pytriton_core.memory import device as device_memory
from pytriton_core.memory.device import DeviceArray
from pytriton_core.scheduling import sequence_state
from pytriton_core.scheduling.sequence_state import SequenceStates, StateTemplate

INT32 = types.BY_WIRE_NAME["INT32"]
STANDIN = Path(__file__).resolve().parents[1] / "integration" / "cuda_standin" / "cupy"


@pytest.fixture(autouse=True)
def standin_cupy(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The stand-in, for the server's cupy calls only (a real cupy, if any, is left alone)."""
    spec = importlib.util.spec_from_file_location("cupy_standin", STANDIN / "__init__.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(device_memory, "cupy_module", lambda: module)
    monkeypatch.setattr(sequence_state, "cupy_module", lambda: module)
    return module


def _template(same_buffer: bool, growable: bool) -> StateTemplate:
    initial = np.zeros([1, 1], np.int32)
    initial.flags.writeable = False
    return StateTemplate("S_IN", "S_OUT", INT32, initial, same_buffer, growable)


class DeviceOutputs:
    """Device outputs as a GPU backend leaves them (memory that stays alive here)."""

    def __init__(self) -> None:
        self._kept: list[np.ndarray] = []

    def response(self, values: list[int]) -> tuple[InferenceResponse, int]:
        data = np.array([values], np.int32)
        self._kept.append(data)
        array = DeviceArray(data.ctypes.data, data.shape, data.dtype, 0, data, None)
        return InferenceResponse(outputs=[DeviceTensor("S_OUT", INT32, array)]), array.pointer


def _held(states: SequenceStates) -> tuple[int, list[int]]:
    """The device pointer of the state the next request gets, and what it holds."""
    tensor = states.inputs()["S_IN"]
    assert isinstance(tensor, DeviceTensor) and not tensor.on_host, tensor
    device = tensor.device
    assert isinstance(device, DeviceArray)
    count = int(np.prod(device.shape))
    values = (ctypes.c_int32 * count).from_address(device.pointer)
    return device.pointer, list(values)


def test_a_device_output_becomes_the_next_state_as_it_is() -> None:
    outputs = DeviceOutputs()
    states = SequenceStates((_template(same_buffer=False, growable=False),))
    assert not isinstance(states.inputs()["S_IN"], DeviceTensor)  # the initial state
    response, pointer = outputs.response([4, 5])
    states.update(response)
    assert _held(states) == (pointer, [4, 5])  # no copy


def test_the_same_buffer_takes_outputs_of_its_size() -> None:
    outputs = DeviceOutputs()
    states = SequenceStates((_template(same_buffer=True, growable=False),))
    response, source = outputs.response([1, 2, 3])
    states.update(response)
    own, values = _held(states)
    assert own != source and values == [1, 2, 3]  # a buffer of the sequence's own
    states.update(outputs.response([7, 8, 9])[0])
    assert _held(states) == (own, [7, 8, 9])
    states.update(outputs.response([6])[0])  # another size: a new buffer
    moved, values = _held(states)
    assert moved != own and values == [6]


def test_a_growable_buffer_keeps_what_fits() -> None:
    outputs = DeviceOutputs()
    states = SequenceStates((_template(same_buffer=True, growable=True),))
    states.update(outputs.response([1, 1, 1])[0])
    own, _ = _held(states)
    for values in ([5], [2, 3], [9, 9, 9]):
        states.update(outputs.response(values)[0])
        assert _held(states) == (own, values)
    states.update(outputs.response([4, 4, 4, 4, 4])[0])  # outgrown: a new buffer
    grown, values = _held(states)
    assert grown != own and values == [4, 4, 4, 4, 4]
    states.update(outputs.response([3])[0])
    assert _held(states) == (grown, [3])


def test_a_host_state_output_stays_on_the_host() -> None:
    states = SequenceStates((_template(same_buffer=True, growable=False),))
    buffer = states.inputs()["S_IN"].data
    states.update(InferenceResponse(outputs=[Tensor("S_OUT", INT32, np.array([[11]], np.int32))]))
    held = states.inputs()["S_IN"]
    assert not isinstance(held, DeviceTensor)
    assert held.data is buffer and buffer.tolist() == [[11]]  # copied into the same buffer
