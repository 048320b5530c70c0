"""A loaded model version (``runtime.Model``) driven on its own event loop with a backend
written here: submit, answer, a stop that outlasts its exit timeout, and batches started on
the loop (``loop_dispatch``): up to the backend's depth, several executions handed over in
one bundle once they are known to be short, shared among instances."""

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
from pytriton_core.backends.base import (
    BackendInstance,
    BackendModel,
    DeferredResponses,
    InstanceSpec,
    LoopExecution,
)
from pytriton_core.config import ModelSpec, normalize_config, parse_config_text, validate_config
from pytriton_core.errors import InternalError
from pytriton_core.inference.request import SEQUENCE_START, InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.statistics import ComputeTiming
from pytriton_core.inference.tensor import Tensor
from pytriton_core.runtime import instance as instance_module
from pytriton_core.runtime.instance import INLINE_AFTER
from pytriton_core.runtime.model import Model, ModelState

CONFIG = """
name: "slow" backend: "python" max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""
SEQUENCE_CONFIG = """
name: "slow" backend: "python" max_batch_size: 0
sequence_batching { }
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


def _model(
    backend: BackendModel,
    loop: asyncio.AbstractEventLoop,
    instances: int = 1,
    config_text: str = CONFIG,
) -> Model:
    config = parse_config_text(config_text, "test")
    normalize_config(config)
    validate_config(config)
    model = Model(ModelSpec.from_config(config, 1), config, Path("/nonexistent"), backend, loop)
    model.start([InstanceSpec(f"slow_{i}", "CPU", 0) for i in range(instances)])
    return model


def _request(answers: list[InferenceResponse], **fields: Any) -> InferenceRequest:
    x = Tensor("X", types.BY_WIRE_NAME["FP32"], np.ones(1, np.float32))
    return InferenceRequest(
        "slow",
        inputs={"X": x},
        on_response=lambda response, final: answers.append(response),
        **fields,
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
    """Starts batches on the loop (as process mode does) and keeps each bundle until the
    test finishes it, oldest first."""

    loop_dispatch = True

    def __init__(self, depth: int, bundle: int = 1) -> None:
        self.loop_depth = depth
        self.loop_bundle = bundle
        self.begun: list[Sequence[LoopExecution]] = []  # bundles, oldest first

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        return self

    def execute(
        self, requests: Sequence[InferenceRequest], timing: ComputeTiming
    ) -> Sequence[InferenceResponse | None]:
        raise AssertionError("batches start on the loop")

    def begin(self, executions: Sequence[LoopExecution], alone: bool = False) -> None:
        for _requests, timing, _finished in executions:
            timing.mark_input_done()
        self.begun.append(executions)

    def finish_oldest(self, failing: int | None = None) -> None:
        """Answer the oldest bundle; its execution at index ``failing`` fails."""
        for index, (requests, timing, finished) in enumerate(self.begun.pop(0)):
            timing.mark_infer_done()
            if index == failing:
                finished(InternalError("execution failed"))
            else:
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
        await asyncio.sleep(0)  # the turn ends: what it brought is handed over
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


async def _short_streak(model: Model, backend: _OnLoop, instances: int = 1) -> None:
    """Enough short executions on every instance for bundles (``INLINE_AFTER`` each)."""
    answers: list[InferenceResponse] = []
    for _ in range(INLINE_AFTER):
        for _ in range(instances):
            model.submit(_request(answers))
        await asyncio.sleep(0)
        while backend.begun:
            backend.finish_oldest()
    assert len(answers) == INLINE_AFTER * instances


def test_a_turns_requests_go_in_one_bundle_once_executions_are_short() -> None:
    """Before the instance's executions are known to be short, each goes alone; then the
    requests of one turn go in one hand-over (up to ``loop_bundle``), each an execution of
    its own in the statistics, and the next bundle waits behind it up to the depth."""

    async def scenario() -> tuple[list[list[int]], Model, list[InferenceResponse]]:
        backend = _OnLoop(depth=2, bundle=4)
        model = _model(backend, asyncio.get_running_loop())
        answers: list[InferenceResponse] = []
        for _ in range(3):
            model.submit(_request(answers))
        await asyncio.sleep(0)
        sizes = [[len(bundle) for bundle in backend.begun]]
        while backend.begun:
            backend.finish_oldest()
        await _short_streak(model, backend)
        for _ in range(7):
            model.submit(_request(answers))
        await asyncio.sleep(0)
        sizes.append([len(bundle) for bundle in backend.begun])
        backend.finish_oldest()  # the third bundle goes once the first is answered
        sizes.append([len(bundle) for bundle in backend.begun])
        while backend.begun:
            backend.finish_oldest()
        await model.stop(5.0)
        return sizes, model, answers

    sizes, model, answers = asyncio.run(scenario())
    assert sizes == [[1, 1], [4, 3], [3]]  # the third of the first three: after the first
    assert len(answers) == 3 + 7
    assert all(a.error is None and a.outputs[0].data.tolist() == [1.0] for a in answers)
    stats = model.stats
    assert stats.execution_count == stats.success.count == 3 + INLINE_AFTER + 7


def test_an_execution_failing_in_a_bundle_fails_only_its_request() -> None:
    async def scenario() -> tuple[list[InferenceResponse], Model]:
        backend = _OnLoop(depth=1, bundle=8)
        model = _model(backend, asyncio.get_running_loop())
        await _short_streak(model, backend)
        answers: list[InferenceResponse] = []
        for _ in range(3):
            model.submit(_request(answers))
        await asyncio.sleep(0)
        assert [len(bundle) for bundle in backend.begun] == [3]
        backend.finish_oldest(failing=1)
        await model.stop(5.0)
        return answers, model

    answers, model = asyncio.run(scenario())
    assert [a.error is None for a in answers] == [True, False, True]
    assert "execution failed" in str(answers[1].error)
    stats = model.stats
    assert stats.success.count == INLINE_AFTER + 2 and stats.fail.count == 1


def test_several_instances_share_what_is_held() -> None:
    async def scenario() -> list[list[int]]:
        backend = _OnLoop(depth=2, bundle=8)
        model = _model(backend, asyncio.get_running_loop(), instances=2)
        await _short_streak(model, backend, instances=2)
        answers: list[InferenceResponse] = []
        for _ in range(5):
            model.submit(_request(answers))
        await asyncio.sleep(0)
        sizes = [len(bundle) for bundle in backend.begun]
        while backend.begun:
            backend.finish_oldest()
        await model.stop(5.0)
        assert len(answers) == 5
        return [sizes]

    assert asyncio.run(scenario()) == [[3, 2]]


class _Timed(BackendModel, BackendInstance):
    """Holds the GIL as it executes (so short executions may run on the loop); each takes
    the next of ``durations_s`` (then none), and tells where it ran."""

    loop_execution = True

    def __init__(self, durations_s: list[float]) -> None:
        self.durations_s = durations_s
        self.ran_on: list[str] = []

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        return self

    def execute(
        self, requests: Sequence[InferenceRequest], timing: ComputeTiming
    ) -> Sequence[InferenceResponse | None]:
        self.ran_on.append(threading.current_thread().name)
        if self.durations_s:
            time.sleep(self.durations_s.pop(0))
        return [InferenceResponse(outputs=list(r.inputs.values())) for r in requests]


def _where_lone_requests_run(durations_s: list[float], count: int) -> list[str]:
    """Where each of ``count`` requests, sent one at a time, executed: "loop" or "thread"."""

    async def scenario() -> list[str]:
        backend = _Timed(durations_s)
        model = _model(backend, asyncio.get_running_loop())
        for _ in range(count):
            answers: list[InferenceResponse] = []
            model.submit(_request(answers))
            while not answers:  # (sleeping, so an execution in the thread gets the GIL)
                await asyncio.sleep(0.001)
        await model.stop(5.0)
        loop_thread = threading.current_thread().name
        return ["loop" if name == loop_thread else "thread" for name in backend.ran_on]

    return asyncio.run(scenario())


# The inline budget raised far above what a loaded machine's preemptions add to a short
# execution, and a long one far above it.
BUDGET_NS = 50_000_000
LONG_S = 0.2


@pytest.fixture
def wide_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(instance_module, "INLINE_BUDGET_NS", BUDGET_NS)


@pytest.mark.usefixtures("wide_budget")
def test_short_executions_move_to_the_loop_and_a_long_one_sends_them_back() -> None:
    # INLINE_AFTER short ones in the thread; then on the loop, until one takes long.
    durations = [0.0] * (INLINE_AFTER + 2) + [LONG_S]
    where = _where_lone_requests_run(durations, INLINE_AFTER + 5)
    assert where[:INLINE_AFTER] == ["thread"] * INLINE_AFTER
    assert where[INLINE_AFTER : INLINE_AFTER + 3] == ["loop"] * 3  # the third is the long one
    assert where[INLINE_AFTER + 3 :] == ["thread"] * 2


@pytest.mark.usefixtures("wide_budget")
def test_a_lone_long_execution_after_a_long_run_of_short_ones_is_forgiven_once() -> None:
    # After twice INLINE_AFTER short ones, one long execution (a preemption, most likely)
    # keeps the executions on the loop; a second within INLINE_AFTER sends them away.
    shorts = 2 * INLINE_AFTER
    durations = [0.0] * shorts + [LONG_S] + [0.0] * 3 + [LONG_S]
    where = _where_lone_requests_run(durations, shorts + 7)
    assert where[INLINE_AFTER:shorts] == ["loop"] * INLINE_AFTER
    assert where[shorts : shorts + 5] == ["loop"] * 5  # the long one, 3 short, the 2nd long
    assert where[shorts + 5 :] == ["thread"] * 2


class _Deferring(BackendModel, BackendInstance):
    """Answers through ``DeferredResponses`` (as the framework backends' batch runner does),
    noting the thread each batch executes on and the one its responses are built on; a
    build fails while ``failing`` is set."""

    def __init__(self) -> None:
        self.executed_on: list[threading.Thread] = []
        self.built_on: list[threading.Thread] = []
        self.failing = False

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        return self

    def execute(
        self, requests: Sequence[InferenceRequest], timing: ComputeTiming
    ) -> Sequence[InferenceResponse | None]:
        self.executed_on.append(threading.current_thread())
        failing = self.failing

        def build() -> list[InferenceResponse]:
            self.built_on.append(threading.current_thread())
            if failing:
                raise InternalError("output 'X' is malformed")
            return [InferenceResponse(outputs=list(r.inputs.values())) for r in requests]

        return DeferredResponses(len(requests), build)


def _serve_one_by_one(
    backend: _Deferring, config: str, failing_second: bool = False, **request: Any
) -> list[InferenceResponse]:
    async def scenario() -> list[InferenceResponse]:
        model = _model(backend, asyncio.get_running_loop(), config_text=config)
        answers: list[InferenceResponse] = []
        for index in range(3):
            backend.failing = failing_second and index == 1
            model.submit(_request(answers, **request))
            deadline = time.monotonic() + 10
            while len(answers) <= index:
                assert time.monotonic() < deadline, f"request {index} was not answered"
                await asyncio.sleep(0.001)
        await model.stop(5.0)
        return answers

    return asyncio.run(scenario())


def test_deferred_responses_are_built_on_the_loop() -> None:
    backend = _Deferring()
    answers = _serve_one_by_one(backend, CONFIG, failing_second=True)
    loop_thread = threading.current_thread()  # asyncio.run's loop runs on this thread
    assert len(backend.executed_on) == 3
    assert all(thread is not loop_thread for thread in backend.executed_on)
    assert backend.built_on == [loop_thread] * 3
    # A build that fails fails its batch with its error; the model serves on.
    assert [a.error is None for a in answers] == [True, False, True]
    assert "output 'X' is malformed" in str(answers[1].error)
    assert answers[2].outputs[0].data.tolist() == [1.0]


def test_deferred_responses_a_sequence_scheduler_reads_are_built_on_the_thread() -> None:
    backend = _Deferring()
    answers = _serve_one_by_one(
        backend, SEQUENCE_CONFIG, failing_second=True, correlation_id=7, flags=SEQUENCE_START
    )
    assert backend.built_on == backend.executed_on
    assert all(thread is not threading.current_thread() for thread in backend.built_on)
    assert [a.error is None for a in answers] == [True, False, True]
    assert "output 'X' is malformed" in str(answers[1].error)
