"""The dynamic batcher gets the requests of one event-loop turn together (runtime.Model's
``_end_of_turn``): requests in flight together execute as one batch, on the loop while the
instance is idle and its executions are short, else on the instance's thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pytriton_core import types
from pytriton_core.backends.base import BackendInstance, BackendModel, InstanceSpec
from pytriton_core.config import ModelSpec, normalize_config, parse_config_text, validate_config
from pytriton_core.errors import ErrorCode
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.statistics import ComputeTiming
from pytriton_core.inference.tensor import Tensor
from pytriton_core.runtime.instance import INLINE_AFTER
from pytriton_core.runtime.model import Model

CONFIG = """
name: "batched" backend: "python" max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
dynamic_batching { }
"""
# The same with an optional input Y: requests with and without it never share a batch.
OPTIONAL_CONFIG = CONFIG.replace(
    "dims: [ 1 ] } ]\noutput",
    'dims: [ 1 ] }, { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] optional: true } ]\noutput',
)


class _Recorder(BackendModel, BackendInstance):
    """Echoes its inputs and records each batch: its request values and the thread."""

    def __init__(self, loop_execution: bool) -> None:
        self.loop_execution = loop_execution
        self.batches: list[tuple[list[float], str]] = []

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        return self

    def execute(
        self, requests: Sequence[InferenceRequest], timing: ComputeTiming
    ) -> Sequence[InferenceResponse | None]:
        values = [float(r.inputs["X"].data[0, 0]) for r in requests]
        self.batches.append((values, threading.current_thread().name))
        return [InferenceResponse(outputs=[r.inputs["X"]]) for r in requests]


def _request(value: float, answers: dict[float, InferenceResponse]) -> InferenceRequest:
    """A request of X = ``value``; a value over 100 also carries the optional input Y."""
    fp32 = types.BY_WIRE_NAME["FP32"]
    inputs = {"X": Tensor("X", fp32, np.full((1, 1), value, np.float32))}
    if value > 100:
        inputs["Y"] = Tensor("Y", fp32, np.zeros((1, 1), np.float32))

    def on_response(response: InferenceResponse, final: bool) -> None:
        answers[value] = response

    return InferenceRequest("batched", inputs=inputs, on_response=on_response)


async def _answered(answers: dict[float, InferenceResponse], count: int) -> None:
    for _ in range(5000):
        if len(answers) >= count:
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"{len(answers)} of {count} requests answered")


def _run(
    backend: _Recorder, values_per_turn: Sequence[Sequence[float]], config_text: str = CONFIG
) -> tuple[dict[float, InferenceResponse], list[tuple[list[float], str]]]:
    """Warm the instance up with lone requests (so it may execute inline), then submit each
    group of ``values_per_turn`` in one loop turn and wait for all answers; the batches
    executed after the warm-up are returned."""

    async def scenario() -> tuple[dict[float, InferenceResponse], list[tuple[list[float], str]]]:
        config = parse_config_text(config_text, "test")
        normalize_config(config)
        validate_config(config)
        spec = ModelSpec.from_config(config, 1)
        model = Model(spec, config, Path("/nonexistent"), backend, asyncio.get_running_loop())
        await asyncio.to_thread(model.start, [InstanceSpec("batched_0", "CPU", 0)])
        warm: dict[float, InferenceResponse] = {}
        for index in range(INLINE_AFTER):
            model.submit(_request(-1.0 - index, warm))
            await _answered(warm, index + 1)
        warmed = len(backend.batches)
        answers: dict[float, InferenceResponse] = {}
        total = 0
        for values in values_per_turn:
            requests = [_request(value, answers) for value in values]
            for request in requests:  # one turn: no await between them
                model.submit(request)
            total += len(values)
            if values and values[0] < 0:  # a negative first value: cancel it in the turn
                requests[0].cancel()
            await _answered(answers, total)
        await model.stop(5.0)
        return answers, backend.batches[warmed:]

    return asyncio.run(scenario())


def test_requests_of_one_turn_execute_as_one_batch_on_the_loop() -> None:
    answers, batches = _run(_Recorder(loop_execution=True), [[1, 2, 3, 4, 5]])
    assert batches == [([1, 2, 3, 4, 5], threading.main_thread().name)]
    assert all(answers[v].outputs[0].data.tolist() == [[v]] for v in (1, 2, 3, 4, 5))


def test_a_turn_beyond_max_batch_size_executes_as_full_batches_in_order() -> None:
    values = [float(v) for v in range(1, 13)]
    _, batches = _run(_Recorder(loop_execution=True), [values])
    assert [b for b, _ in batches] == [values[:8], values[8:]]


def test_a_backend_that_keeps_its_thread_gets_the_turn_as_one_batch() -> None:
    _, batches = _run(_Recorder(loop_execution=False), [[1, 2, 3], [4, 5]])
    assert [b for b, _ in batches] == [[1, 2, 3], [4, 5]]
    assert all(name != threading.main_thread().name for _, name in batches)


def test_a_request_cancelled_within_its_turn_never_executes() -> None:
    answers, batches = _run(_Recorder(loop_execution=True), [[-7, 8, 9]])
    assert [b for b, _ in batches] == [[8, 9]]
    error = answers[-7].error
    assert error is not None and error.code is ErrorCode.CANCELLED


def test_requests_with_and_without_an_optional_input_are_never_merged() -> None:
    _, batches = _run(_Recorder(loop_execution=True), [[101, 102, 3, 4, 105]], OPTIONAL_CONFIG)
    assert [b for b, _ in batches] == [[101, 102], [3, 4], [105]]
