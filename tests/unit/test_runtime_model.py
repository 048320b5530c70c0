"""A loaded model version (``runtime.Model``) driven on its own event loop with a backend
written here: submit, answer, a stop that outlasts its exit timeout, and batches started on
the loop (``loop_dispatch``) up to the backend's depth."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytriton_core import types
from pytriton_core.backends.base import BackendInstance, BackendModel, InstanceSpec
from pytriton_core.config import ModelSpec, normalize_config, parse_config_text, validate_config
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.statistics import ComputeTiming
from pytriton_core.inference.tensor import Tensor
from pytriton_core.runtime.model import Model, ModelState

CONFIG = """
name: "slow" backend: "python" max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


class _Gate(BackendModel, BackendInstance):
    """Echoes its input once ``release`` is set; ``started`` tells an execution began."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        return self

    def execute(
        self, requests: Sequence[InferenceRequest], timing: ComputeTiming
    ) -> Sequence[InferenceResponse | None]:
        self.started.set()
        self.release.wait(10)
        return [InferenceResponse(outputs=list(r.inputs.values())) for r in requests]


def _model(backend: BackendModel, loop: asyncio.AbstractEventLoop) -> Model:
    config = parse_config_text(CONFIG, "test")
    normalize_config(config)
    validate_config(config)
    model = Model(ModelSpec.from_config(config, 1), config, Path("/nonexistent"), backend, loop)
    model.start([InstanceSpec("slow_0", "CPU", 0)])
    return model


def _request(answers: list[InferenceResponse]) -> InferenceRequest:
    x = Tensor("X", types.BY_WIRE_NAME["FP32"], np.ones(1, np.float32))
    return InferenceRequest(
        "slow", inputs={"X": x}, on_response=lambda response, final: answers.append(response)
    )


def test_a_request_is_answered_and_stop_finalizes() -> None:
    async def scenario() -> tuple[list[InferenceResponse], Model]:
        backend = _Gate()
        backend.release.set()
        model = _model(backend, asyncio.get_running_loop())
        answers: list[InferenceResponse] = []
        model.submit(_request(answers))
        while not answers:
            await asyncio.sleep(0.001)
        await model.stop(5.0)
        return answers, model

    answers, model = asyncio.run(scenario())
    assert answers[0].outputs[0].data.tolist() == [1.0]
    assert model.state is ModelState.UNAVAILABLE and model.pending_request_count() == 0


def test_stop_gives_up_waiting_at_the_exit_timeout(caplog: pytest.LogCaptureFixture) -> None:
    # asyncio.wait_for raises asyncio.TimeoutError, which only Python 3.11 made the builtin.
    async def scenario() -> Model:
        backend = _Gate()
        model = _model(backend, asyncio.get_running_loop())
        answers: list[InferenceResponse] = []
        model.submit(_request(answers))
        await asyncio.to_thread(backend.started.wait, 10)
        try:
            await model.stop(0.05)
        finally:
            backend.release.set()
        while not answers:  # the late answer reaches the loop before it closes
            await asyncio.sleep(0.001)
        return model

    with caplog.at_level(logging.WARNING, logger="pytriton_core.runtime.model"):
        model = asyncio.run(scenario())
    assert model.state is ModelState.UNAVAILABLE
    assert "1 requests still in flight" in caplog.text


class _OnLoop(BackendModel, BackendInstance):
    """Starts batches on the loop (as process mode does) and keeps them until the test
    finishes them, oldest first, ``finish_ns`` after they were begun."""

    loop_dispatch = True

    def __init__(self, depth: int) -> None:
        self.loop_depth = depth
        self.begun: list[tuple[Sequence[InferenceRequest], ComputeTiming, Any]] = []

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        return self

    def execute(
        self, requests: Sequence[InferenceRequest], timing: ComputeTiming
    ) -> Sequence[InferenceResponse | None]:
        raise AssertionError("batches start on the loop")

    def begin(
        self, requests: Sequence[InferenceRequest], timing: ComputeTiming, finished: Any
    ) -> None:
        timing.mark_input_done()
        self.begun.append((requests, timing, finished))

    def finish_oldest(self) -> None:
        requests, timing, finished = self.begun.pop(0)
        timing.mark_infer_done()
        finished([InferenceResponse(outputs=list(r.inputs.values())) for r in requests])


@pytest.mark.parametrize("depth", [1, 2])
def test_batches_started_on_the_loop_are_in_flight_up_to_the_depth(depth: int) -> None:
    """Three requests at once: ``depth`` batches go to the instance, the rest waits; each
    finished batch lets the next one go. A batch that waited behind another in the backend
    counts that wait as queue time, as one that waited here does: the statistics read the
    same at either depth, and the compute spans of batches run one at a time never add up
    to more than the time they took."""
    hold_s = 0.02

    async def scenario() -> tuple[list[int], Model, list[InferenceResponse], int]:
        backend = _OnLoop(depth)
        model = _model(backend, asyncio.get_running_loop())
        answers: list[InferenceResponse] = []
        started_ns = time.monotonic_ns()
        for _ in range(3):
            model.submit(_request(answers))
        in_flight = [len(backend.begun)]
        while backend.begun:
            await asyncio.sleep(hold_s)
            backend.finish_oldest()
            in_flight.append(len(backend.begun))
        took_ns = time.monotonic_ns() - started_ns
        await model.stop(5.0)
        return in_flight, model, answers, took_ns

    in_flight, model, answers, took_ns = asyncio.run(scenario())
    assert in_flight == ([2, 2, 1, 0] if depth == 2 else [1, 1, 1, 0])
    assert [a.outputs[0].data.tolist() for a in answers] == [[1.0]] * 3
    stats = model.stats
    assert stats.execution_count == 3 and stats.success.count == 3
    hold_ns = int(hold_s * 1e9)
    # The second request waited one hold, the third two (less the microseconds the
    # starts take).
    assert stats.queue.ns >= 3 * hold_ns - 1_000_000
    compute_ns = stats.compute_input.ns + stats.compute_infer.ns + stats.compute_output.ns
    # Counted from when it was begun, the second one's compute would overlap the first's
    # by a whole hold; what remains is the hand-over's microseconds.
    assert compute_ns < took_ns + hold_ns // 2
