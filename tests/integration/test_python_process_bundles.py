"""Process mode's bundles: several executions handed to a worker process in one message
and answered in one (docs/architecture.md, "Where executions run"). A real worker runs a
real model; the test starts the bundles itself on its own event loop, as the server's loop
does (``ProcessInstance.begin``), so that each bundle holds exactly the executions named:
each execution keeps its own outcome (one failing fails only its request), a request
cancelled while its execution waits behind another in the bundle sees it when it starts,
and a worker that dies mid-bundle fails every execution of the bundle with the cause."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from harness import write_python_model

from pytriton_core import types
from pytriton_core.backends.base import InstanceSpec, LoopExecution, ModelLocation
from pytriton_core.backends.python.backend import PythonBackend
from pytriton_core.backends.python.process_instance import ProcessInstance, ProcessModel
from pytriton_core.config import ModelSpec, normalize_config, parse_config_text, validate_config
from pytriton_core.errors import ServerError
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.statistics import ComputeTiming
from pytriton_core.inference.tensor import Tensor

CONFIG = """
name: "bundled"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
parameters { key: "EXECUTION_MODE" value { string_value: "process" } }
"""

# What an execution does is picked by its input: > 0 answers IN + 1; -1 raises; -2 exits
# the process; -3 sleeps 0.5 s, then answers; -4 answers 1 if its request is cancelled.
MODEL = """
import os, time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            what = float(x[0])
            if what == -1:
                raise ValueError("this execution fails")
            if what == -2:
                os._exit(3)
            if what == -3:
                time.sleep(0.5)
            if what == -4:
                x = np.array([1.0 if request.is_cancelled() else 0.0], np.float32)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x + (what > 0))]))
        return out
"""

Outcome = Sequence[InferenceResponse | None] | ServerError


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[ProcessInstance]:
    folder = write_python_model(tmp_path, "bundled", CONFIG, MODEL)
    config = parse_config_text(CONFIG, "bundled")
    normalize_config(config)
    validate_config(config)
    location = ModelLocation("bundled", 1, folder, folder / "1", {})
    model = PythonBackend().load_model(ModelSpec.from_config(config, 1), location, config)
    assert isinstance(model, ProcessModel) and model.loop_bundle > 1
    created = model.create_instance(InstanceSpec("bundled_0", "CPU", 0))
    assert isinstance(created, ProcessInstance)
    yield created
    if not created._closed:  # the test finalizes it on its loop; this one failed first
        created.finalize()


def _request(value: float) -> InferenceRequest:
    data = np.array([value], np.float32)
    return InferenceRequest(
        "bundled", inputs={"IN": Tensor("IN", types.BY_WIRE_NAME["FP32"], data)}
    )


def _bundle(
    instance: ProcessInstance, values: Sequence[float]
) -> tuple[list[InferenceRequest], list[ComputeTiming], list[asyncio.Future[Outcome]]]:
    """Begin one bundle of one execution per value (on the running loop)."""
    loop = asyncio.get_running_loop()
    requests, timings, outcomes = [], [], []
    executions: list[LoopExecution] = []
    for value in values:
        request, timing = _request(value), ComputeTiming(start_ns=time.monotonic_ns())
        request.loop = loop
        outcome: asyncio.Future[Outcome] = loop.create_future()
        executions.append(([request], timing, outcome.set_result))
        requests.append(request)
        timings.append(timing)
        outcomes.append(outcome)
    instance.begin(executions)
    return requests, timings, outcomes


def _value(outcome: Outcome) -> float:
    assert not isinstance(outcome, ServerError), outcome
    response = outcome[0]
    assert response is not None and response.error is None
    return float(response.outputs[0].data[0])


def test_each_execution_of_a_bundle_keeps_its_own_outcome(instance: ProcessInstance) -> None:
    async def scenario() -> tuple[list[Outcome], list[ComputeTiming]]:
        try:
            _, timings, outcomes = _bundle(instance, [1.0, -1.0, 3.0])
            return [await outcome for outcome in outcomes], timings
        finally:
            await asyncio.to_thread(instance.finalize)

    (first, failed, third), timings = asyncio.run(scenario())
    assert _value(first) == 2.0 and _value(third) == 4.0
    assert isinstance(failed, ServerError)
    assert "ValueError: this execution fails" in failed.message
    # Each execution's end comes from the worker, in the order they ran there.
    ends = [timing.infer_end_ns for timing in timings]
    assert ends[0] < ends[1] < ends[2]
    assert all(t.infer_end_ns >= t.input_end_ns > 0 for t in timings)


def test_a_request_cancelled_while_it_waits_in_the_bundle_sees_it(
    instance: ProcessInstance,
) -> None:
    """The second execution waits in the worker behind the first (which takes 0.5 s) when
    its request is cancelled: the model sees ``is_cancelled()`` true once it starts it."""

    async def scenario() -> list[Outcome]:
        try:
            requests, _, outcomes = _bundle(instance, [-3.0, -4.0])
            await asyncio.sleep(0.1)  # the worker is in the first execution
            requests[1].cancel()
            return [await outcome for outcome in outcomes]
        finally:
            await asyncio.to_thread(instance.finalize)

    slow, cancelled = asyncio.run(scenario())
    assert _value(slow) == -3.0
    assert _value(cancelled) == 1.0


def test_a_worker_dying_mid_bundle_fails_the_whole_bundle_then_serves_again(
    instance: ProcessInstance,
) -> None:
    """The first execution had run, but its answer leaves with the bundle's: every
    execution of the bundle fails with the cause; the restarted worker answers again."""

    async def scenario() -> tuple[list[Outcome], list[Outcome]]:
        try:
            _, _, outcomes = _bundle(instance, [1.0, -2.0, 3.0])
            died = [await outcome for outcome in outcomes]
            deadline = time.monotonic() + 60
            while not instance.up:
                assert time.monotonic() < deadline, "the worker was not restarted"
                await asyncio.sleep(0.05)
            _, _, outcomes = _bundle(instance, [5.0, 6.0])
            return died, [await outcome for outcome in outcomes]
        finally:
            await asyncio.to_thread(instance.finalize)

    died, again = asyncio.run(scenario())
    for outcome in died:
        assert isinstance(outcome, ServerError)
        assert "worker process died (exit code 3)" in outcome.message
        assert "model 'bundled_0'" in outcome.message
    assert [_value(outcome) for outcome in again] == [6.0, 7.0]
