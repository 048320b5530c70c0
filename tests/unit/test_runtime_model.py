"""A loaded model version (``runtime.Model``) driven on its own event loop with a backend
written here: submit, answer, and a stop that outlasts its exit timeout."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from pathlib import Path

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


def _model(backend: _Gate, loop: asyncio.AbstractEventLoop) -> Model:
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
