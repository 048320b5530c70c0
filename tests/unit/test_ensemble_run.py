"""The ensemble's data flow (``scheduling/ensemble.py``), driven with stand-in steps: the
steps a request issues, what each is given, and the answers the ensemble sends."""

from __future__ import annotations

import numpy as np
import pytest

from pytriton_core import types
from pytriton_core.config import ModelSpec, normalize_config, parse_config_text, validate_config
from pytriton_core.errors import ErrorCode, NotFoundError
from pytriton_core.inference.request import SEQUENCE_START, InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.tensor import Tensor
from pytriton_core.scheduling.ensemble import EnsemblePlan, EnsembleRun, StepCall, reshaped_dims

FP32 = types.BY_WIRE_NAME["FP32"]


def _spec(text: str) -> ModelSpec:
    config = parse_config_text(text, "test")
    normalize_config(config, gpu_ids=[])
    validate_config(config)
    return ModelSpec.from_config(config, 1)


UNARY = _spec(
    'name: "unary" backend: "python" '
    'input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ] '
    'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]'
)
BINARY = _spec(
    'name: "binary" backend: "python" '
    'input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] }, '
    '{ name: "Z" data_type: TYPE_FP32 dims: [ 2 ] } ] '
    'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]'
)


def _map(kind: str, pairs: dict[str, str]) -> str:
    return "".join(f' {kind} {{ key: "{k}" value: "{v}" }}' for k, v in pairs.items())


# A -> left, A -> right (fan-out), (left, right) -> OUT (fan-in); SIDE comes from "left".
FAN = _spec(
    'name: "fan" platform: "ensemble" '
    'input [ { name: "A" data_type: TYPE_FP32 dims: [ 2 ] } ] '
    'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] }, '
    '{ name: "SIDE" data_type: TYPE_FP32 dims: [ 2 ] } ] '
    "ensemble_scheduling { step [ "
    f'{{ model_name: "unary" model_version: -1 {_map("input_map", {"X": "A"})}'
    f"{_map('output_map', {'Y': 'left'})} }}, "
    f'{{ model_name: "unary" model_version: -1 {_map("input_map", {"X": "A"})}'
    f"{_map('output_map', {'Y': 'right'})} }}, "
    f'{{ model_name: "binary" model_version: -1 {_map("input_map", {"X": "left", "Z": "right"})}'
    f"{_map('output_map', {'Y': 'OUT'})} }}, "
    f'{{ model_name: "unary" model_version: -1 {_map("input_map", {"X": "left"})}'
    f"{_map('output_map', {'Y': 'SIDE'})} }} ] }}"
)
TARGETS = [UNARY, UNARY, BINARY, UNARY]


class _Driver:
    """Runs one ensemble request; the test answers its step requests by hand."""

    def __init__(self, spec: ModelSpec, request: InferenceRequest, targets: list[ModelSpec]):
        self.calls: list[StepCall] = []
        self.answers: list[tuple[InferenceResponse | None, bool]] = []
        self.run = EnsembleRun(
            EnsemblePlan(spec),
            request,
            targets,
            self.calls.append,
            lambda response, final: self.answers.append((response, final)),
        )

    def answer(self, call: StepCall, data: np.ndarray, final: bool = True) -> None:
        (output,) = call.step.output_map
        response = InferenceResponse(outputs=[Tensor(output, FP32, data)])
        assert call.request.on_response is not None
        call.request.on_response(response, final)

    def pending(self, index: int) -> StepCall:
        (call,) = [c for c in self.calls if c.step.index == index]
        return call


def _request(**fields: object) -> InferenceRequest:
    a = np.array([1.0, 2.0], np.float32)
    return InferenceRequest(model_name="fan", inputs={"A": Tensor("A", FP32, a)}, **fields)  # type: ignore[arg-type]


def test_fan_out_and_fan_in_pass_the_same_arrays() -> None:
    request = _request(id="r1", priority=2, timeout_us=7, parameters={"k": "v"})
    driver = _Driver(FAN, request, TARGETS)
    driver.run.start()
    # Both readers of A start at once, each given A itself, renamed: no copy.
    assert sorted(c.step.index for c in driver.calls) == [0, 1]
    first = driver.pending(0).request
    assert first.inputs["X"].data is request.inputs["A"].data
    assert (first.id, first.priority, first.timeout_us, first.parameters) == (
        "r1",
        2,
        7,
        {"k": "v"},
    )
    assert list(first.requested_outputs or {}) == ["Y"]
    left = np.array([10.0, 20.0], np.float32)
    driver.answer(driver.pending(0), left)
    # "left" alone starts the SIDE step; the fan-in waits for "right".
    assert sorted(c.step.index for c in driver.calls) == [0, 1, 3]
    driver.answer(driver.pending(1), np.array([3.0, 4.0], np.float32))
    fan_in = driver.pending(2).request
    assert fan_in.inputs["X"].data is left
    driver.answer(driver.pending(3), np.array([5.0, 5.0], np.float32))
    assert driver.answers == []  # OUT is still missing
    out = np.array([13.0, 24.0], np.float32)
    driver.answer(driver.pending(2), out)
    ((response, final),) = driver.answers
    assert final and response is not None and response.error is None
    assert [t.name for t in response.outputs] == ["OUT", "SIDE"]
    assert response.outputs[0].data is out
    assert response.parameters == {
        "sequence_id": 0,
        "sequence_start": False,
        "sequence_end": False,
    }
    assert driver.run.done and driver.run.error is None


def test_only_the_steps_for_the_requested_outputs_run() -> None:
    request = _request(requested_outputs={"SIDE": None})  # type: ignore[dict-item]
    driver = _Driver(FAN, request, TARGETS)
    driver.run.start()
    assert [c.step.index for c in driver.calls] == [0]  # "right" only feeds OUT
    driver.answer(driver.pending(0), np.zeros(2, np.float32))
    driver.answer(driver.pending(3), np.ones(2, np.float32))
    ((response, final),) = driver.answers
    assert final and response is not None and [t.name for t in response.outputs] == ["SIDE"]


def test_a_failed_step_fails_the_ensemble_once_the_others_are_done() -> None:
    driver = _Driver(FAN, _request(id="r9"), TARGETS)
    driver.run.start()
    first = driver.pending(0)
    assert first.request.on_response is not None
    first.request.on_response(InferenceResponse.failed(NotFoundError("no such thing")), True)
    assert driver.answers == []  # step 1 is still in flight
    driver.answer(driver.pending(1), np.zeros(2, np.float32))
    ((response, final),) = driver.answers
    assert final and response is not None and response.error is not None
    assert response.error.code is ErrorCode.NOT_FOUND
    assert response.error.message == "in ensemble 'fan', no such thing"
    assert len(driver.calls) == 2  # nothing more started after the failure


def test_outputs_a_model_leaves_out_are_left_out_of_the_answer() -> None:
    driver = _Driver(FAN, _request(id="r2"), TARGETS)
    driver.run.start()
    for index in (0, 1, 2, 3):
        call = driver.pending(index)
        assert call.request.on_response is not None
        call.request.on_response(InferenceResponse(), True)  # answered without its output
    ((response, final),) = driver.answers
    assert final and response is not None and response.error is None
    assert response.outputs == []


def test_a_default_ensemble_that_gets_no_answer_reports_a_deadlock() -> None:
    driver = _Driver(FAN, _request(id="r3"), TARGETS)
    driver.run.start()
    for index in (0, 1):
        call = driver.pending(index)
        assert call.request.on_response is not None
        call.request.on_response(None, True)  # a final flag and no response
    ((response, final),) = driver.answers
    assert final and response is not None and response.error is not None
    assert response.error.message == (
        "in ensemble 'fan', [request id: r3] unexpected deadlock, at least one output is not "
        "set while no more ensemble steps can be made"
    )


DECOUPLED = _spec(
    'name: "stream" platform: "ensemble" '
    'input [ { name: "A" data_type: TYPE_FP32 dims: [ 2 ] } ] '
    'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ] '
    "model_transaction_policy { decoupled: true } "
    "ensemble_scheduling { step [ "
    f'{{ model_name: "gen" model_version: -1 {_map("input_map", {"X": "A"})}'
    f"{_map('output_map', {'Y': 'piece'})} }}, "
    f'{{ model_name: "unary" model_version: -1 {_map("input_map", {"X": "piece"})}'
    f"{_map('output_map', {'Y': 'OUT'})} }} ] }}"
)


@pytest.mark.parametrize("count", [0, 1, 3])
def test_each_response_of_a_decoupled_step_runs_the_next_step(count: int) -> None:
    request = _request(correlation_id=5, flags=SEQUENCE_START)
    driver = _Driver(DECOUPLED, request, [UNARY, UNARY])
    driver.run.start()
    generator = driver.pending(0)
    for i in range(count):
        driver.answer(generator, np.full(2, i, np.float32), final=False)
    assert generator.request.on_response is not None
    generator.request.on_response(None, True)  # a flag-only final response
    followers = [c for c in driver.calls if c.step.index == 1]
    assert len(followers) == count
    assert all(c.request.correlation_id == 5 for c in followers)
    for i, call in enumerate(followers):
        driver.answer(call, np.full(2, 10 + i, np.float32))
    responses = [r for r, _ in driver.answers if r is not None]
    assert [r.outputs[0].data.tolist() for r in responses] == [[10 + i] * 2 for i in range(count)]
    assert responses == [] or responses[0].parameters["sequence_start"] is True
    assert driver.answers[-1][1] is True and [f for _, f in driver.answers].count(True) == 1


def test_shapes_gain_or_lose_a_batch_dimension_between_batching_and_plain_models() -> None:
    # To a batching model from a non-batching one: a batch of one.
    assert reshaped_dims([4], True, 0, (4,)) == (1, 4)
    # To a non-batching model from a batch of one.
    assert reshaped_dims([4], False, 1, (1, 4)) == (4,)
    # A non-batching model whose dims already take the batch: unchanged.
    assert reshaped_dims([-1, 4], False, 3, (3, 4)) == (3, 4)
    assert reshaped_dims([4], True, 2, (2, 4)) == (2, 4)
