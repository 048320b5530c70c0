"""Decoupled sequence models through the real tritonclient's gRPC stream: implicit state
carried between requests of a model that answers after ``execute`` has returned, and the
oldest strategy's ``preserve_ordering`` (the models: sequence_decoupled_models.py).

Every request of a sequence is sent at once, before any answer: the server holds each
sequence's next request until the final response of the one before has settled the state.

``SEQUENCE_SELF_CHECK=1`` runs the ordering test against the real Triton 2.51
(../shared/tools/real-triton); the state tests are skipped then, since Triton 2.51's
Python backend carries no implicit state.
"""

from __future__ import annotations

import os
import queue
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from harness import ServerHandle, run_pytriton_server, run_real_triton
from sequence_decoupled_models import FAIL, INITIAL_SUM, RAISE, write_repository

SELF_CHECK = os.environ.get("SEQUENCE_SELF_CHECK") == "1"
ours_only = pytest.mark.skipif(SELF_CHECK, reason="Triton 2.51's Python backend keeps no state")
STATE_MODELS = ["dstate_direct", "dstate_oldest", "dstate_process"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    repository = tmp_path_factory.mktemp("sequence_decoupled")
    write_repository(repository, state=not SELF_CHECK)
    if SELF_CHECK:
        with run_real_triton(repository) as handle:
            yield handle
    else:
        with run_pytriton_server(repository) as handle:
            yield handle


Answer = tuple[str, dict[str, Any] | None, str | None, bool]  # id, outputs, error, final


def _stream(
    server: ServerHandle, model: str, requests: list[tuple[int, int, int, int]]
) -> list[Answer]:
    """Send ``requests`` (sequence, index, length, value) on one stream, all before any
    answer, each with its position in ``requests`` as its ID; return every response in
    arrival order until each request's final one."""
    answers: queue.Queue[Answer] = queue.Queue()

    def collect(result: Any, error: Any) -> None:
        if error is not None:  # a stream error names no request; finals only here
            answers.put(("", None, error.message(), True))
            return
        response = result.get_response()
        outputs = {o.name: result.as_numpy(o.name) for o in response.outputs}
        final = response.parameters["triton_final_response"].bool_param
        answers.put((response.id, outputs, None, final))

    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=collect)
        for position, (sequence, index, length, value) in enumerate(requests):
            tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
            tensor.set_data_from_numpy(np.array([[value]], np.int32))
            client.async_stream_infer(
                model,
                [tensor],
                request_id=str(position),
                sequence_id=sequence,
                sequence_start=index == 0,
                sequence_end=index == length - 1,
                enable_empty_final_response=True,
            )
        got = []
        finals = 0
        while finals < len(requests):
            answer = answers.get(timeout=60)
            got.append(answer)
            finals += answer[3]
        client.stop_stream()
    return got


def _interleaved(sequences: dict[int, list[int]]) -> list[tuple[int, int, int, int]]:
    """The sequences' requests, round robin."""
    longest = max(len(values) for values in sequences.values())
    return [
        (sequence, index, len(values), values[index])
        for index in range(longest)
        for sequence, values in sequences.items()
        if index < len(values)
    ]


def _sums_by_request(answers: list[Answer]) -> dict[int, list[int]]:
    """The OUTPUT of each request's responses, in order; no state output reaches a client."""
    sums: dict[int, list[int]] = {}
    for request_id, outputs, error, final in answers:
        assert error is None, error
        assert outputs is not None
        assert "SUM_OUT" not in outputs
        if final:
            assert outputs == {}, "the final response is flag-only"
            continue
        sums.setdefault(int(request_id), []).append(int(outputs["OUTPUT"].reshape(-1)[0]))
    return sums


def _expected(requests: list[tuple[int, int, int, int]]) -> dict[int, list[int]]:
    """Each request's two sums: the running sum of its sequence (a START starts again)."""
    running: dict[int, int] = {}
    expected = {}
    for position, (sequence, index, _, value) in enumerate(requests):
        running[sequence] = (INITIAL_SUM if index == 0 else running[sequence]) + value
        expected[position] = [running[sequence]] * 2
    return expected


@ours_only
@pytest.mark.parametrize("model", STATE_MODELS)
def test_state_of_interleaved_sequences_sent_at_once(server: ServerHandle, model: str) -> None:
    """Six sequences (more than the slots: some wait in the backlog), all their requests
    sent before any answer: each response has the exact running sum, which needs the
    state of the last response that carried it (not the decoy before it)."""
    requests = _interleaved({900 + n: [n + 1, 10 * n, -3, 5, n] for n in range(6)})
    answers = _stream(server, model, requests)
    assert _sums_by_request(answers) == _expected(requests)


@ours_only
@pytest.mark.parametrize("model", STATE_MODELS)
def test_state_resets_at_start(server: ServerHandle, model: str) -> None:
    """The same correlation ID again, right after END on the same stream (the new
    sequence may run beside the end of the old one, in another slot): a new START starts
    from the initial state."""
    first, second = [4, 5, 6], [100, 1]
    requests = [(77, i, len(first), v) for i, v in enumerate(first)]
    requests += [(77, i, len(second), v) for i, v in enumerate(second)]
    sums = _sums_by_request(_stream(server, model, requests))
    assert sums == _expected(requests)
    assert sums[3] == [INITIAL_SUM + 100] * 2


@ours_only
@pytest.mark.parametrize("model", STATE_MODELS)
def test_an_error_response_leaves_the_state(server: ServerHandle, model: str) -> None:
    """A request answered with an error (no state output) leaves the state as it was; the
    sequence goes on from there."""
    values = [3, FAIL, 4]
    got = _stream(server, model, [(81, i, len(values), v) for i, v in enumerate(values)])
    sums = [int(o["OUTPUT"].reshape(-1)[0]) for _, o, e, f in got if e is None and not f and o]
    errors = [error for _, _, error, _ in got if error is not None]
    assert sums == [INITIAL_SUM + 3] * 2 + [INITIAL_SUM + 7] * 2
    assert errors == ["asked to fail"]


@ours_only
@pytest.mark.parametrize("model", STATE_MODELS)
def test_a_failed_execution_does_not_hold_the_sequence(server: ServerHandle, model: str) -> None:
    """``execute`` raising fails its request (no final response will follow): the next
    request of the sequence runs, from the state before."""
    values = [2, RAISE, 5]
    got = _stream(server, model, [(82, i, len(values), v) for i, v in enumerate(values)])
    sums = [int(o["OUTPUT"].reshape(-1)[0]) for _, o, e, f in got if e is None and not f and o]
    errors = [error for _, _, error, _ in got if error is not None]
    assert sums == [INITIAL_SUM + 2] * 2 + [INITIAL_SUM + 7] * 2
    assert len(errors) == 1 and "asked to raise" in errors[0], errors


def test_preserve_ordering_orders_a_decoupled_models_responses(server: ServerHandle) -> None:
    """Three sequences of two requests: each batch of three answers in reverse (the last
    request first), and the second batch executes while the first still answers; with
    preserve_ordering the responses leave in the order the requests left the batcher,
    all of a request's before the next one's, as Triton 2.51's dynamic batcher sends them."""
    requests = [(60 + n, index, 2, n) for index in range(2) for n in range(3)]
    got = _stream(server, "ordered_decoupled", requests)
    where = []
    for _, outputs, error, _ in got:
        assert error is None, error
        assert outputs is not None
        where.append(tuple(int(x) for x in outputs["WHERE"].reshape(-1)))
    assert [count for _, _, count, _ in where] == [3] * 12, where
    executions = sorted({execution for execution, _, _, _ in where})
    assert len(executions) == 2, where
    order = sorted({(execution, position) for execution, position, _, _ in where})
    for index in range(2):  # the first responses, and the finals, in the requests' order
        assert [(e, p) for e, p, _, i in where if i == index] == order, where
    if not SELF_CHECK:
        # All of a request's responses before the next request's. Triton 2.51's gRPC
        # stream may interleave those of requests its batcher releases together
        # (checked: 1.1 then 1.2's first responses, then their finals), though its core
        # hands them over in this order.
        assert where == [(e, p, 3, i) for e, p in order for i in range(2)]


def _where(got: list[Answer]) -> list[tuple[int, ...]]:
    where = []
    for _, outputs, error, _ in got:
        assert error is None, error
        assert outputs is not None
        where.append(tuple(int(x) for x in outputs["WHERE"].reshape(-1)))
    return where


@pytest.mark.parametrize("model", ["ordered_dynamic", "unordered_dynamic"])
def test_dynamic_preserve_ordering_orders_a_decoupled_models_responses(
    server: ServerHandle, model: str
) -> None:
    """Six requests (no sequence) in two batches of three that answer in reverse: with the
    dynamic batcher's preserve_ordering every response of a request leaves before those of
    the next one, in the order the requests came; without it they leave as sent."""
    got = _stream(server, model, [(0, 1, 3, n) for n in range(6)])
    where = _where(got)
    order = sorted({(execution, position, count) for execution, position, count, _ in where})
    assert len(order) == 6, where
    in_request_order = [(e, p, c, i) for e, p, c in order for i in range(2)]
    if model == "ordered_dynamic":
        assert [int(request_id) for request_id, *_ in got] == [n for n in range(6) for _ in "ab"]
        assert where == in_request_order
    else:  # the control: the last request of each batch answers first
        assert where != in_request_order
