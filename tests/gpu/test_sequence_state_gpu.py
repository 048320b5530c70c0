"""Implicit state on GPU instances (ONNX Runtime's CUDA provider, torch on CUDA): the state
a sequence carries stays on the device between its requests, one device buffer per
sequence with ``use_same_buffer_for_input_output``, and a buffer that keeps taking states
that fit in it with ``use_growable_memory``.

The sequence batcher and the backend instance are driven in-process the way a model
instance drives them (``next_batch``, ``execute``, ``completed``), so the test sees the state
each request is given: a ``DeviceTensor`` never copied to the host, at the device pointer
expected. One served test checks the same models through a real server and tritonclient.

They skip, with the reason, without a visible NVIDIA GPU, without onnxruntime's CUDA
provider or a CUDA build of torch; tools/gpu-checks.sh runs them (all of tests/gpu).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from gpu_support import GPU_SPEC, load_model, onnxruntime_provider_or_skip, skip_module_without_gpu
from sequence_models import (
    GROWING_STATE_CONFIG,
    write_growing_state_onnx,
    write_state_onnx,
    write_state_pytorch,
)

from pytriton_core import types
from pytriton_core.errors import ServerError
from pytriton_core.inference.request import SEQUENCE_END, SEQUENCE_START, InferenceRequest
from pytriton_core.inference.statistics import ComputeTiming
from pytriton_core.inference.tensor import DeviceTensor, Tensor
from pytriton_core.memory.device import DeviceArray
from pytriton_core.scheduling import SequenceBatchScheduler

skip_module_without_gpu("the GPU implicit-state tests")

INT32 = types.BY_WIRE_NAME["INT32"]

SUM_CONFIG = """
name: "%s"
backend: "%s"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  state [ {
    input_name: "SUM_IN" output_name: "SUM_OUT" data_type: TYPE_INT32 dims: [ 1 ]
    initial_state { name: "zero" data_type: TYPE_INT32 dims: [ 1 ] zero_data: true }
    %s
  } ]
}
instance_group [ { count: 1 kind: KIND_GPU } ]
"""
SAME_BUFFER = "use_same_buffer_for_input_output: true"
GROWABLE = "use_growable_memory: true"


def _sum_model(tmp_path: Path, backend: str, state_settings: str) -> tuple[Path, str]:
    """The running-sum state loop (SUM_OUT = SUM_IN + INPUT = OUTPUT) for ``backend``."""
    name = f"state_{backend}_gpu"
    folder = tmp_path / name
    (folder / "1").mkdir(parents=True)
    if backend == "onnxruntime":
        write_state_onnx(folder / "1" / "model.onnx", start_input=False)
        onnxruntime_provider_or_skip("CUDAExecutionProvider", folder / "1" / "model.onnx")
    else:
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip(f"torch {torch.__version__} has no CUDA (a CPU build?)")
        write_state_pytorch(folder / "1" / "model.pt")
    config = SUM_CONFIG % (name, backend, state_settings)
    (folder / "config.pbtxt").write_text(config)
    return folder, config


class DrivenSequence:
    """One sequence (correlation ID 1) through the scheduler and one GPU instance."""

    def __init__(self, backend: str, model_dir: Path, config: str) -> None:
        model, spec, _ = load_model(backend, model_dir, config)
        self.rejected: list[ServerError] = []
        self.scheduler = SequenceBatchScheduler(
            spec, lambda _, error: self.rejected.append(error), model_dir
        )
        self.scheduler.start(1)
        self.instance = model.create_instance(GPU_SPEC)

    def infer(self, value: int, flags: int = 0) -> tuple[int, Tensor]:
        """OUTPUT of one request, and the state it was given (before it executed)."""
        request = InferenceRequest(
            model_name="m",
            inputs={"INPUT": Tensor("INPUT", INT32, np.full([1, 1], value, np.int32))},
            correlation_id=1,
            flags=flags,
            queue_start_ns=time.monotonic_ns(),
        )
        self.scheduler.enqueue(request)
        batch = self.scheduler.next_batch(0)
        assert batch == [request]
        given = request.inputs["SUM_IN"]
        responses = self.instance.execute(batch, ComputeTiming())
        self.scheduler.completed(0, batch, responses)
        response = responses[0]
        assert response is not None and response.error is None, response
        # Neither the batcher nor the backend read a device state through the host.
        assert not (isinstance(given, DeviceTensor) and given.on_host), "state copied to host"
        output = response.output("OUTPUT")
        assert output is not None
        return int(output.data.reshape(-1)[0]), given

    def close(self) -> None:
        self.scheduler.stop(1)
        self.instance.finalize()
        assert not self.rejected


@pytest.fixture
def driven(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A factory: ``driven(backend, state_settings)``; closed after the test."""
    made: list[DrivenSequence] = []

    def make(backend: str, state_settings: str = "") -> DrivenSequence:
        folder, config = _sum_model(tmp_path, backend, state_settings)
        sequence = DrivenSequence(backend, folder, config)
        made.append(sequence)
        return sequence

    yield make
    for sequence in made:
        sequence.close()


def _pointer(tensor: Tensor) -> int:
    """Where a state given to a request lives: on the instance's GPU, or the test fails."""
    assert isinstance(tensor, DeviceTensor), f"the state is on the host: {tensor!r}"
    device = tensor.device
    assert isinstance(device, DeviceArray), device
    assert device.device_id == GPU_SPEC.device_id
    return device.pointer


def _run(sequence: DrivenSequence, values: list[int]) -> tuple[list[int], list[Tensor]]:
    sums, given = [], []
    for index, value in enumerate(values):
        flags = (SEQUENCE_START if index == 0 else 0) | (
            SEQUENCE_END if index == len(values) - 1 else 0
        )
        total, state = sequence.infer(value, flags)
        sums.append(total)
        given.append(state)
    return sums, given


@pytest.mark.parametrize("backend", ["onnxruntime", "pytorch"])
def test_state_stays_on_the_device(driven: Any, backend: str) -> None:
    """From the second request on, the state a request is given is the device output of
    the one before, never copied to the host; a new START starts from the initial state."""
    sequence = driven(backend)
    values = [3, 4, -2, 10]
    sums, given = _run(sequence, values)
    assert sums == [int(s) for s in np.cumsum(values)]
    assert not isinstance(given[0], DeviceTensor)  # the initial state, from the host
    for state in given[1:]:
        _pointer(state)
    again, _ = _run(sequence, values[:2])
    assert again == sums[:2]


@pytest.mark.parametrize("backend", ["onnxruntime", "pytorch"])
def test_same_buffer_keeps_one_device_buffer(driven: Any, backend: str) -> None:
    """``use_same_buffer_for_input_output``: the first device state gets a buffer of the
    sequence's own, and every later state of the same size is copied into it."""
    pytest.importorskip("cupy", reason="device-to-device copies need cupy (pytriton-core[gpu])")
    sequence = driven(backend, SAME_BUFFER)
    values = [5, 6, 7, 8, 9]
    sums, given = _run(sequence, values)
    assert sums == [int(s) for s in np.cumsum(values)]
    pointers = [_pointer(state) for state in given[1:]]
    assert len(set(pointers)) == 1, pointers


def test_growable_state_buffer_takes_what_fits(tmp_path: Path) -> None:
    """``use_growable_memory`` (ONNX Runtime): a state of variable size keeps its device
    buffer while each new state fits in it (3 values, then 1, then 2) and moves to a new
    one when it outgrows it (5); each request is given the state the one before left."""
    pytest.importorskip("cupy", reason="device-to-device copies need cupy (pytriton-core[gpu])")
    folder = tmp_path / "growing_gpu"
    (folder / "1").mkdir(parents=True)
    write_growing_state_onnx(folder / "1" / "model.onnx")
    onnxruntime_provider_or_skip("CUDAExecutionProvider", folder / "1" / "model.onnx")
    config = GROWING_STATE_CONFIG % ("growing_gpu", GROWABLE, "GPU")
    sequence = DrivenSequence("onnxruntime", folder, config)
    try:
        lengths, given = _run(sequence, [3, 1, 2, 5, 1])
        assert lengths == [1, 3, 1, 2, 5]
        first, fits_1, fits_2, outgrown = (_pointer(state) for state in given[1:])
        assert first == fits_1 == fits_2
        assert outgrown != first
        assert [tuple(state.shape) for state in given[1:]] == [(1, 3), (1, 1), (1, 2), (1, 5)]
    finally:
        sequence.close()


def test_gpu_state_models_served(tmp_path: Path) -> None:
    """The same models behind a real server, through tritonclient: exact running sums with
    the state on the device, and the growable state's lengths."""
    import tritonclient.http as httpclient
    from harness import run_pytriton_server

    pytest.importorskip("cupy", reason="device-to-device copies need cupy (pytriton-core[gpu])")
    _sum_model(tmp_path, "onnxruntime", SAME_BUFFER)
    growing = tmp_path / "growing_gpu"
    (growing / "1").mkdir(parents=True)
    write_growing_state_onnx(growing / "1" / "model.onnx")
    (growing / "config.pbtxt").write_text(GROWING_STATE_CONFIG % ("growing_gpu", GROWABLE, "GPU"))

    def outputs(client: Any, model: str, values: list[int]) -> list[int]:
        got = []
        for index, value in enumerate(values):
            tensor = httpclient.InferInput("INPUT", [1, 1], "INT32")
            tensor.set_data_from_numpy(np.array([[value]], np.int32))
            result = client.infer(
                model,
                [tensor],
                sequence_id=42,
                sequence_start=index == 0,
                sequence_end=index == len(values) - 1,
            )
            got.append(int(result.as_numpy("OUTPUT").reshape(-1)[0]))
        return got

    with run_pytriton_server(tmp_path, timeout=180) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert outputs(client, "state_onnxruntime_gpu", [1, 2, 3]) == [1, 3, 6]
        assert outputs(client, "growing_gpu", [3, 1, 2, 5, 1]) == [1, 3, 1, 2, 5]
