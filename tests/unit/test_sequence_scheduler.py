"""The sequence batcher without a server: which requests each batch holds, and where.

The scheduler is driven the way a model instance drives it (``next_batch`` then
``completed`` from a worker thread; here the test plays the instance); integration tests
run it behind real clients.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytriton_core import types
from pytriton_core.config import ModelSpec, normalize_config, parse_config_text, validate_config
from pytriton_core.errors import InvalidArgumentError, ServerError
from pytriton_core.inference.request import SEQUENCE_END, SEQUENCE_START, InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.tensor import Tensor
from pytriton_core.scheduling import SequenceBatchScheduler

CONTROLS = """
control_input [
  { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
  { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
  { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
]
"""


def _spec(sequence: str, max_batch_size: int = 2, extra: str = "") -> ModelSpec:
    config = parse_config_text(
        f'name: "m"\nbackend: "python"\nmax_batch_size: {max_batch_size}\n{extra}'
        'input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        f"sequence_batching {{ {sequence} }}",
        "config.pbtxt",
    )
    normalize_config(config)
    validate_config(config)
    return ModelSpec.from_config(config, 1)


class Harness:
    def __init__(self, spec: ModelSpec, instances: int = 1, model_dir: Path | None = None):
        self.rejected: list[tuple[InferenceRequest, ServerError]] = []
        self.scheduler = SequenceBatchScheduler(
            spec, lambda r, e: self.rejected.append((r, e)), model_dir
        )
        self.scheduler.start(instances)

    def send(self, correlation_id: int | str, value: int, flags: int = 0) -> InferenceRequest:
        data = np.full([1, 1], value, np.int32)
        request = InferenceRequest(
            model_name="m",
            inputs={"INPUT": Tensor("INPUT", types.BY_WIRE_NAME["INT32"], data)},
            correlation_id=correlation_id,
            flags=flags,
            queue_start_ns=time.monotonic_ns(),
        )
        self.scheduler.enqueue(request)
        return request

    def run(self, instance: int = 0, outputs: Any = None) -> list[InferenceRequest]:
        """One execution on ``instance``: the batch, completed with ``outputs(request)``."""
        batch = self.scheduler.next_batch(instance)
        assert batch is not None
        responses = [InferenceResponse(outputs=outputs(r) if outputs else []) for r in batch]
        self.scheduler.completed(instance, batch, responses)
        return batch

    def stop(self) -> None:
        self.scheduler.stop(1)


def _controls(request: InferenceRequest) -> tuple[int, int, int]:
    def value(name: str) -> int:
        return int(request.inputs[name].data.reshape(-1)[0])

    return value("START"), value("READY"), value("CORRID")


@pytest.fixture
def direct() -> Any:
    harness = Harness(_spec("direct { } " + CONTROLS))
    yield harness
    harness.stop()


def test_direct_fills_an_idle_slot_below_an_active_one(direct: Harness) -> None:
    direct.send(1, 10, SEQUENCE_START)
    assert [_controls(r) for r in direct.run()] == [(1, 1, 1)]
    direct.send(2, 20, SEQUENCE_START)  # slot 1: slot 0 holds sequence 1, with nothing ready
    batch = direct.run()
    assert [_controls(r) for r in batch] == [(0, 0, 0), (1, 1, 2)]
    assert batch[0].padding and batch[0].requested_outputs == {}
    assert batch[0].inputs["INPUT"].data.tolist() == [[0]]
    direct.send(1, 11)
    direct.send(2, 21, SEQUENCE_END)
    batch = direct.run()
    assert [(_controls(r), r.inputs["INPUT"].data.item()) for r in batch] == [
        ((0, 1, 1), 11),
        ((0, 1, 2), 21),
    ]


def test_backlogged_sequences_take_freed_slots_in_order(direct: Harness) -> None:
    for correlation_id in (1, 2, 3, 4):  # two slots: 3 and 4 wait
        direct.send(correlation_id, correlation_id, SEQUENCE_START)
    assert [_controls(r)[2] for r in direct.run()] == [1, 2]
    assert direct.scheduler.pending_count() == 2
    direct.send(2, 0, SEQUENCE_END)
    assert [_controls(r)[2] for r in direct.run()] == [0, 2]  # slot 0: a filler
    # Slot 1 is free again: sequence 3 (the oldest backlog) has it now.
    assert [_controls(r) for r in direct.run()] == [(0, 0, 0), (1, 1, 3)]


def test_errors_for_requests_outside_a_sequence(direct: Harness) -> None:
    with pytest.raises(InvalidArgumentError, match="must specify a non-zero or non-empty"):
        direct.send(0, 1, SEQUENCE_START)
    with pytest.raises(InvalidArgumentError, match="must specify the START flag"):
        direct.send(9, 1)


def test_a_cancelled_queued_request_cancels_its_sequence(direct: Harness) -> None:
    direct.send(1, 10, SEQUENCE_START)
    direct.run()
    queued = direct.send(1, 11)
    later = direct.send(1, 12)
    assert direct.scheduler.cancel(queued)
    assert [r for r, _ in direct.rejected] == [later]
    assert direct.scheduler.pending_count() == 0
    with pytest.raises(InvalidArgumentError, match="must specify the START flag"):
        direct.send(1, 13)


def test_oldest_sends_one_request_per_sequence_at_a_time() -> None:
    harness = Harness(
        _spec("oldest { max_candidate_sequences: 4 max_queue_delay_microseconds: 0 } " + CONTROLS)
    )
    try:
        harness.send(1, 10, SEQUENCE_START)
        harness.send(1, 11)
        harness.send(2, 20, SEQUENCE_START)
        first = harness.run()
        assert sorted(_controls(r)[2] for r in first) == [1, 2]
        assert [r.inputs["INPUT"].data.item() for r in harness.run()] == [11]
    finally:
        harness.stop()


def test_idle_sequence_releases_its_slot() -> None:
    harness = Harness(_spec("max_sequence_idle_microseconds: 50000 direct { } " + CONTROLS, 1))
    try:
        harness.send(1, 10, SEQUENCE_START)
        harness.run()
        harness.send(2, 20, SEQUENCE_START)  # the only slot is taken: backlog
        assert harness.scheduler.pending_count() == 1
        deadline = time.monotonic() + 10
        batch: list[InferenceRequest] = []
        while not batch and time.monotonic() < deadline:
            batch = harness.run()  # blocks until the reaper released sequence 1
        assert [_controls(r) for r in batch] == [(1, 1, 2)]
        with pytest.raises(InvalidArgumentError, match="must specify the START flag"):
            harness.send(1, 11)
    finally:
        harness.stop()


def test_a_backlogged_sequence_times_out() -> None:
    """A request's ``timeout`` bounds how long its sequence waits in the backlog."""
    harness = Harness(_spec("direct { } " + CONTROLS, 1))
    try:
        harness.send(1, 10, SEQUENCE_START)
        harness.run()
        waiting = InferenceRequest(
            model_name="m",
            inputs={
                "INPUT": Tensor("INPUT", types.BY_WIRE_NAME["INT32"], np.ones([1, 1], np.int32))
            },
            correlation_id=2,
            flags=SEQUENCE_START,
            timeout_us=50_000,
        )
        harness.scheduler.enqueue(waiting)
        deadline = time.monotonic() + 10
        while not harness.rejected and time.monotonic() < deadline:
            time.sleep(0.01)
        ((request, error),) = harness.rejected
        assert request is waiting
        assert (error.code.value, error.message) == (
            "UNAVAILABLE",
            "timeout of the corresponding sequence has been expired",
        )
        assert harness.scheduler.pending_count() == 0
    finally:
        harness.stop()


STATE = """
control_input [
  { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] }
]
state [ { input_name: "SUM_IN" output_name: "SUM_OUT" data_type: TYPE_INT32 dims: [ 1 ]
          use_same_buffer_for_input_output: %s } ]
"""


@pytest.mark.parametrize("same_buffer", ["true", "false"])
def test_state_carried_per_slot_and_reset_at_start(same_buffer: str) -> None:
    harness = Harness(_spec("direct { } " + STATE % same_buffer))
    int32 = types.BY_WIRE_NAME["INT32"]

    seen: list[int] = []

    def add(request: InferenceRequest) -> list[Tensor]:
        # Read while executing: with the same buffer, the input is updated in place after.
        if not request.padding:
            seen.append(int(request.inputs["SUM_IN"].data.item()))
        total = request.inputs["SUM_IN"].data + request.inputs["INPUT"].data
        return [Tensor("OUTPUT", int32, total), Tensor("SUM_OUT", int32, total)]

    def sums(batch: list[InferenceRequest]) -> list[int]:
        assert batch
        got = list(seen)
        seen.clear()
        return got

    try:
        harness.send(1, 5, SEQUENCE_START)
        harness.send(2, 7, SEQUENCE_START)
        assert sums(harness.run(outputs=add)) == [0, 0]
        harness.send(1, 1)
        harness.send(2, 1)
        assert sums(harness.run(outputs=add)) == [5, 7]
        harness.send(1, 0, SEQUENCE_START)  # a new sequence in slot 0: back to zero
        harness.send(2, 0)
        assert sums(harness.run(outputs=add)) == [0, 8]
    finally:
        harness.stop()


DECOUPLED = "model_transaction_policy { decoupled: true }\n"


def test_decoupled_state_holds_the_slot_until_the_final_response() -> None:
    """A decoupled model answers through its sender: the state is the last one sent, and
    the sequence's slot is held (a filler in its place) until the final response."""
    harness = Harness(_spec("direct { } " + STATE % "false", extra=DECOUPLED))
    scheduler = harness.scheduler
    int32 = types.BY_WIRE_NAME["INT32"]

    def state(value: int) -> InferenceResponse:
        data = np.full([1, 1], value, np.int32)
        return InferenceResponse(outputs=[Tensor("SUM_OUT", int32, data)])

    def sent(request: InferenceRequest, response: InferenceResponse | None, final: bool) -> None:
        """What the model's response sender does (``send_threadsafe`` calls the hook)."""
        assert request.sent_hook is not None
        request.sent_hook(response, final)

    try:
        first = harness.send(1, 5, SEQUENCE_START)
        other = harness.send(2, 7, SEQUENCE_START)
        batch = scheduler.next_batch(0)
        assert batch == [first, other]
        sent(other, state(7), True)  # sequence 2 answered in full during execute
        scheduler.completed(0, batch, [None, None])
        sent(first, state(99), False)  # after the execution: a first state...
        sent(first, state(5), False)  # ...replaced by the next one
        harness.send(1, 1)
        harness.send(2, 1)
        batch = scheduler.next_batch(0)
        assert batch is not None and batch[0].padding and batch[1].correlation_id == 2
        assert int(batch[1].inputs["SUM_IN"].data.item()) == 7
        scheduler.completed(0, batch, [None, None])
        sent(batch[1], None, True)
        sent(first, None, True)  # the final response: the slot goes on
        batch = scheduler.next_batch(0)
        assert batch is not None and [r.correlation_id for r in batch] == [1]
        assert int(batch[0].inputs["SUM_IN"].data.item()) == 5
    finally:
        harness.stop()


def test_a_failed_decoupled_execution_holds_nothing() -> None:
    harness = Harness(_spec("direct { } " + STATE % "false", extra=DECOUPLED))
    scheduler = harness.scheduler
    try:
        harness.send(1, 5, SEQUENCE_START)
        batch = scheduler.next_batch(0)
        assert batch is not None
        scheduler.completed(0, batch, ServerError("failed"))
        harness.send(1, 1)
        batch = scheduler.next_batch(0)
        assert batch is not None and [r.correlation_id for r in batch] == [1]
        assert int(batch[0].inputs["SUM_IN"].data.item()) == 0
    finally:
        harness.stop()
