"""End to end: the dynamic batcher behaves as Triton's (scheduling.md §4, model-config.md §2.5).

The server serves tests/integration/batching_models, where every model runs
``batching_models/batching_recorder.py``: besides its answer, each response tells which
``execute`` call the request was part of (sequence number, position, request count, total
batch size, distinct shapes, instance, wall-clock start and end), and request parameters make
a call sleep (``sleep_ms``) or announce that it started (``start_file``). Scenarios have
their own models, so counters and statistics belong to one test (where two tests share a model,
neither relies on its totals).

Timing: this runs on a small shared machine, so a test holds an instance busy with a long
sleep, waits until that request is executing, queues the requests under test (in order, a
short gap apart) well within the sleep, and then asserts orderings and lower bounds. The few
upper bounds are a batcher's delay (2 s) that a batch must *not* have waited for, or a busy
instance's remaining sleep (1.5-2.5 s) that something must happen within.

``DYNAMIC_BATCHING_SELF_CHECK=1`` runs the same tests against the real Triton
(../shared/tools/real-triton), which checks the tests themselves.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from harness import ServerHandle, run_pytriton_server, run_real_triton
from tritonclient.utils import InferenceServerException

BATCHING_MODELS = Path(__file__).resolve().parent / "batching_models"
SELF_CHECK = os.environ.get("DYNAMIC_BATCHING_SELF_CHECK") == "1"

GAP_S = 0.1  # between requests whose arrival order matters
HOLD_MS = 1500  # how long a holding request keeps its instance busy
START_TIMEOUT_S = 30.0  # how long a holding request may take to start executing

RECORDED = (
    "BATCH_REQUESTS",
    "BATCH_SIZE",
    "BATCH_SHAPES",
    "EXEC_SEQ",
    "POSITION",
    "INSTANCE",
    "START_NS",
    "END_NS",
)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerHandle]:
    if SELF_CHECK:
        with run_real_triton(BATCHING_MODELS) as handle:
            yield handle
    else:
        # The harness adds --allow-metrics=false.
        with run_pytriton_server(BATCHING_MODELS, "--allow-grpc=false") as handle:
            yield handle


# ---------------------------------------------------------------------------------------------
# Sending requests and reading what the model recorded


def answer(values: np.ndarray) -> np.ndarray:
    """The unbatched answer the recording model gives for INPUT0 ``values``."""
    values = values.astype(np.float32)
    return (values * 2 + values.sum(axis=-1, keepdims=True)).astype(np.float32)


@dataclass
class Outcome:
    """One request: when it was sent and answered, and what the model recorded (or the error)."""

    tag: str
    batch: int
    sent_s: float  # time.monotonic()
    sent_ns: int  # time.time_ns()
    received_s: float  # time.monotonic()
    received_ns: int  # time.time_ns(), comparable with the model's START_NS / END_NS
    recorded: dict[str, Any]
    error: InferenceServerException | None

    @property
    def elapsed_s(self) -> float:
        return self.received_s - self.sent_s

    @property
    def ok(self) -> bool:
        return self.error is None

    def __getitem__(self, name: str) -> Any:
        assert self.error is None, f"{self.tag} failed: {self.error}"
        return self.recorded[name]

    @property
    def order(self) -> tuple[int, int]:
        """Execution order on its instance: (execution sequence, position in the call)."""
        return self["EXEC_SEQ"], self["POSITION"]


async def infer(
    client: aioclient.InferenceServerClient,
    model: str,
    tag: str,
    *,
    batch: int = 1,
    width: int = 4,
    values: np.ndarray | None = None,
    priority: int = 0,
    timeout_us: int | None = None,
    sleep_ms: int = 0,
    start_file: Path | None = None,
    input1: str = "",
) -> Outcome:
    """Send one request; check its answer; return what the model recorded about its batch.

    ``input1`` "first" or "last" also sends an INPUT1 (FP32 [batch, 2]), listed before or after
    INPUT0.
    """
    if values is None:
        values = np.random.default_rng().uniform(-100, 100, (batch, width)).astype(np.float32)
    tensor = httpclient.InferInput("INPUT0", list(values.shape), "FP32")
    tensor.set_data_from_numpy(values)
    tensors = [tensor]
    if input1:
        other = httpclient.InferInput("INPUT1", [len(values), 2], "FP32")
        other.set_data_from_numpy(np.ones((len(values), 2), dtype=np.float32))
        tensors.insert(0 if input1 == "first" else 1, other)
    parameters: dict[str, Any] = {}
    if sleep_ms:
        parameters["sleep_ms"] = sleep_ms
    if start_file is not None:
        parameters["start_file"] = str(start_file)
    sent, sent_ns = time.monotonic(), time.time_ns()
    try:
        result = await client.infer(
            model,
            tensors,
            priority=priority,
            timeout=timeout_us,
            parameters=parameters or None,
        )
    except InferenceServerException as exc:
        return Outcome(tag, len(values), sent, sent_ns, time.monotonic(), time.time_ns(), {}, exc)
    received, received_ns = time.monotonic(), time.time_ns()
    np.testing.assert_allclose(
        result.as_numpy("OUTPUT0"), answer(values), rtol=1e-6, err_msg=f"{tag}: wrong answer"
    )
    recorded: dict[str, Any] = {}
    for name in RECORDED:
        column = result.as_numpy(name)
        assert column.shape == (len(values), 1), f"{tag}: {name} has shape {column.shape}"
        assert (column == column[0, 0]).all(), f"{tag}: {name} differs between rows"
        value = column[0, 0]
        recorded[name] = value.decode() if isinstance(value, bytes) else int(value)
    return Outcome(tag, len(values), sent, sent_ns, received, received_ns, recorded, None)


@dataclass
class Session:
    client: aioclient.InferenceServerClient
    scratch: Path

    def send(self, model: str, tag: str, **kwargs: Any) -> asyncio.Task[Outcome]:
        return asyncio.create_task(infer(self.client, model, tag, **kwargs))

    async def send_in_order(
        self, model: str, requests: list[tuple[str, dict[str, Any]]]
    ) -> list[asyncio.Task[Outcome]]:
        """Send requests one after another, GAP_S apart, so they arrive in this order."""
        tasks = []
        for tag, kwargs in requests:
            tasks.append(self.send(model, tag, **kwargs))
            await asyncio.sleep(GAP_S)
        return tasks

    async def hold(
        self, model: str, sleep_ms: int = HOLD_MS, **kwargs: Any
    ) -> asyncio.Task[Outcome]:
        """Send a request that keeps an instance busy; return once it is executing."""
        start_file = self.scratch / f"{uuid.uuid4().hex}.started"
        task = self.send(model, "holder", sleep_ms=sleep_ms, start_file=start_file, **kwargs)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not start_file.exists():
            if task.done():
                pytest.fail(f"the holding request ended before it started: {task.result()}")
            assert time.monotonic() < deadline, "the holding request did not start executing"
            await asyncio.sleep(0.01)
        return task


def run(server: ServerHandle, tmp_path: Path, scenario: Any) -> Any:
    """Run ``await scenario(session)`` with a fresh aio client."""

    async def main() -> Any:
        client = aioclient.InferenceServerClient(server.http_url, conn_limit=128)
        try:
            return await scenario(Session(client, tmp_path))
        finally:
            await client.close()

    return asyncio.run(main())


def executions(outcomes: list[Outcome]) -> list[list[Outcome]]:
    """The requests of each ``execute`` call, in execution order (by start time across
    instances), each call's in the order the model got them."""
    calls: dict[tuple[str, int], list[Outcome]] = defaultdict(list)
    for outcome in outcomes:
        calls[outcome["INSTANCE"], outcome["EXEC_SEQ"]].append(outcome)
    ordered = sorted(calls, key=lambda key: (calls[key][0]["START_NS"], key))
    return [sorted(calls[key], key=lambda o: o["POSITION"]) for key in ordered]


def tags(calls: list[list[Outcome]]) -> list[list[str]]:
    return [[o.tag for o in call] for call in calls]


def timeline(*outcomes: Outcome) -> str:
    """What happened when, for assertion messages (ms after the first request was sent)."""
    zero = min(o.sent_ns for o in outcomes)
    lines = []
    for o in sorted(outcomes, key=lambda o: o.sent_ns):
        line = f"  {o.tag}: sent +{(o.sent_ns - zero) / 1e6:.0f}"
        if o.ok:
            line += (
                f", executed +{(o['START_NS'] - zero) / 1e6:.0f}..+{(o['END_NS'] - zero) / 1e6:.0f}"
                f" (call {o['EXEC_SEQ']} on {o['INSTANCE']}, position {o['POSITION']},"
                f" {o['BATCH_REQUESTS']} requests, batch size {o['BATCH_SIZE']})"
            )
        else:
            line += f", error {o.error}"
        lines.append(f"{line}, answered +{(o.received_ns - zero) / 1e6:.0f}")
    return "timeline (ms):\n" + "\n".join(lines)


def assert_rejected(outcome: Outcome, message: str) -> None:
    assert outcome.error is not None, f"{outcome.tag} succeeded: {outcome.recorded}"
    assert outcome.error.status() == "503", f"{outcome.tag}: {outcome.error}"
    assert message in outcome.error.message(), f"{outcome.tag}: {outcome.error}"


def model_statistics(server: ServerHandle, model: str) -> dict[str, Any]:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        (stats,) = client.get_inference_statistics(model)["model_stats"]
    finally:
        client.close()
    return stats


# ---------------------------------------------------------------------------------------------
# Batch formation


def test_batches_grow_up_to_max_batch_size(server: ServerHandle, tmp_path: Path) -> None:
    """max_batch 4, no delay: a free instance takes as many queued requests as fit."""

    async def scenario(s: Session) -> tuple[list[Outcome], list[Outcome]]:
        holder = await s.hold("max_batch")
        burst = await asyncio.gather(*(s.send("max_batch", f"r{i}") for i in range(10)))
        first = [await holder, *burst]
        # Requests carrying a batch of N count N: 3 | 2+1 | 2 (3+2 and 3+2 exceed 4).
        holder = await s.hold("max_batch")
        sized = [(f"b{n}_{i}", {"batch": n}) for i, n in enumerate([3, 2, 1, 2])]
        tasks = await s.send_in_order("max_batch", sized)
        return first, [await holder, *await asyncio.gather(*tasks)]

    burst, sized = run(server, tmp_path, scenario)
    calls = executions(burst[1:])
    sizes = [sum(o.batch for o in call) for call in calls]
    assert sizes == [4, 4, 2], timeline(*burst)
    for call in calls:
        assert all(o["BATCH_SIZE"] == sum(x.batch for x in call) for o in call)
    assert tags(executions(sized[1:])) == [["b3_0"], ["b2_1", "b1_2"], ["b2_3"]], timeline(*sized)
    assert [o["BATCH_SIZE"] for o in sized[1:]] == [3, 3, 3, 2]


def test_preferred_batch_size_leaves_at_once(server: ServerHandle, tmp_path: Path) -> None:
    """preferred [4, 6], delay 2 s: a batch that reaches a preferred size does not wait."""

    async def scenario(s: Session) -> list[list[Outcome]]:
        phases = []
        for first, second in ((3, 1), (5, 1)):
            tasks = await s.send_in_order(
                "preferred", [("first", {"batch": first}), ("second", {"batch": second})]
            )
            phases.append(list(await asyncio.gather(*tasks)))
        return phases

    for first, second in run(server, tmp_path, scenario):
        size, story = first.batch + second.batch, timeline(first, second)
        # The first waited for the second (no preferred size alone, delay not over) ...
        assert first["EXEC_SEQ"] == second["EXEC_SEQ"], story
        assert first["BATCH_SIZE"] == second["BATCH_SIZE"] == size, story
        # ... and they left as soon as together they made a preferred size, not after 2 s.
        assert first.elapsed_s < 2.0, f"the batch of {size} waited for the delay\n{story}"


def test_batch_stops_at_largest_preferred_size(server: ServerHandle, tmp_path: Path) -> None:
    """preferred [4, 6], max 8: a request of 5 queued, then one of 3. 5 + 3 = 8 fits
    max_batch_size but exceeds the largest preferred size, so the batcher keeps 5 as the best
    batch (scheduling.md §4.1 step 2, first bullet) and sends it at once; the 3 waits for the
    queue delay on its own."""

    async def scenario(s: Session) -> list[Outcome]:
        tasks = await s.send_in_order(
            "preferred", [("five", {"batch": 5}), ("three", {"batch": 3})]
        )
        return list(await asyncio.gather(*tasks))

    five, three = run(server, tmp_path, scenario)
    story = timeline(five, three)
    assert five["BATCH_SIZE"] == 5, story
    assert five.elapsed_s < 2.0, f"the batch of 5 waited for the delay\n{story}"
    assert three["BATCH_SIZE"] == 3, story
    assert three.elapsed_s >= 2.0, f"the 3 left before the delay\n{story}"


def test_preferred_size_is_kept_without_queue_delay(server: ServerHandle, tmp_path: Path) -> None:
    """preferred [2], no delay: five requests queued behind a busy instance leave as 2, 2, 1
    (a delay of 0 is never "exceeded", so the largest preferred prefix still wins)."""

    async def scenario(s: Session) -> list[Outcome]:
        holder = await s.hold("preferred_no_delay")
        burst = await asyncio.gather(*(s.send("preferred_no_delay", f"r{i}") for i in range(5)))
        return [await holder, *burst]

    outcomes = run(server, tmp_path, scenario)
    sizes = [sum(o.batch for o in call) for call in executions(outcomes[1:])]
    assert sizes == [2, 2, 1], timeline(*outcomes)


def test_input_order_does_not_prevent_batching(server: ServerHandle, tmp_path: Path) -> None:
    """Two fixed-shape inputs: only shapes (and the set of optional inputs) must match for
    requests to share a batch, not the order in which a request lists its inputs."""

    async def scenario(s: Session) -> list[Outcome]:
        holder = await s.hold("two_inputs", input1="last")
        tasks = await s.send_in_order(
            "two_inputs",
            [
                ("input1_last", {"input1": "last"}),
                ("input1_first", {"input1": "first"}),
                ("input1_last_again", {"input1": "last"}),
            ],
        )
        return [await holder, *await asyncio.gather(*tasks)]

    outcomes = run(server, tmp_path, scenario)
    expected = [["input1_last", "input1_first", "input1_last_again"]]
    assert tags(executions(outcomes[1:])) == expected, timeline(*outcomes)


def test_lone_request_leaves_after_max_queue_delay(server: ServerHandle, tmp_path: Path) -> None:
    """delay 400 ms, preferred [8]: a batch below every preferred size waits for the delay,
    collecting what arrives meanwhile, then leaves as it is."""

    async def scenario(s: Session) -> tuple[Outcome, list[Outcome]]:
        lone = await s.send("queue_delay", "lone")
        together = await asyncio.gather(*(s.send("queue_delay", f"r{i}") for i in range(3)))
        return lone, list(together)

    lone, together = run(server, tmp_path, scenario)
    assert lone["BATCH_REQUESTS"] == 1 and lone["BATCH_SIZE"] == 1
    assert lone.elapsed_s >= 0.4, f"the lone request left after {lone.elapsed_s:.3f} s"
    assert len({o["EXEC_SEQ"] for o in together}) == 1, [o.recorded for o in together]
    assert all(o["BATCH_SIZE"] == 3 for o in together)
    # The delay counts from the oldest request of the batch; the others waited less.
    assert max(o.elapsed_s for o in together) >= 0.4
    # The server counted the waits as queue time: the lone request's, the oldest of the three.
    queue = model_statistics(server, "queue_delay")["inference_stats"]["queue"]
    assert queue["count"] == 4
    assert queue["ns"] >= 2 * 400_000_000, queue


# ---------------------------------------------------------------------------------------------
# preserve_ordering


def _out_of_order_run(
    server: ServerHandle, tmp_path: Path, model: str
) -> tuple[Outcome, list[Outcome]]:
    """A slow request on one instance, then three quick ones that the other instance
    finishes first."""

    async def scenario(s: Session) -> tuple[Outcome, list[Outcome]]:
        holder = await s.hold(model, sleep_ms=2000)
        quick = await s.send_in_order(model, [(f"q{i}", {}) for i in range(3)])
        return await holder, list(await asyncio.gather(*quick))

    slow, quick = run(server, tmp_path, scenario)
    story = timeline(slow, *quick)
    for outcome in quick:
        assert outcome["INSTANCE"] != slow["INSTANCE"], f"one instance ran both\n{story}"
        assert outcome["END_NS"] < slow["END_NS"], f"{outcome.tag} did not finish first\n{story}"
    return slow, quick


def test_preserve_ordering_holds_back_later_responses(server: ServerHandle, tmp_path: Path) -> None:
    slow, quick = _out_of_order_run(server, tmp_path, "preserve_ordering")
    for outcome in quick:
        assert outcome.received_ns > slow["END_NS"], (
            f"{outcome.tag} was answered before the earlier request had finished\n"
            + timeline(slow, *quick)
        )


def test_without_preserve_ordering_responses_leave_when_done(
    server: ServerHandle, tmp_path: Path
) -> None:
    """Control for the test above: the same run on the same model without preserve_ordering."""
    slow, quick = _out_of_order_run(server, tmp_path, "unordered")
    assert all(o.received_ns < slow["END_NS"] for o in quick), timeline(slow, *quick)


# ---------------------------------------------------------------------------------------------
# Priorities and queue policies


def test_higher_priority_requests_are_served_first(server: ServerHandle, tmp_path: Path) -> None:
    """levels 1..3, default 2: priority 0 or out of range (99) means the default level."""

    async def scenario(s: Session) -> tuple[Outcome, list[Outcome]]:
        holder = await s.hold("priority")
        tasks = await s.send_in_order(
            "priority",
            [
                ("low1", {"priority": 3}),
                ("low2", {"priority": 3}),
                ("default1", {}),
                ("high1", {"priority": 1}),
                ("default2", {"priority": 99}),
                ("high2", {"priority": 1}),
            ],
        )
        return await holder, list(await asyncio.gather(*tasks))

    holder, outcomes = run(server, tmp_path, scenario)
    order = [o.tag for o in sorted(outcomes, key=lambda o: o.order)]
    expected = ["high1", "high2", "default1", "default2", "low1", "low2"]
    assert order == expected, timeline(holder, *outcomes)
    # max_batch_size 4: the first four (by priority) went together.
    assert tags(executions(outcomes)) == [expected[:4], expected[4:]], timeline(holder, *outcomes)


def test_queue_policy_per_priority_level(server: ServerHandle, tmp_path: Path) -> None:
    """Level 1 rejects after 200 ms, level 2 (default) delays after 200 ms, level 3 holds at
    most one queued request."""

    async def scenario(s: Session) -> tuple[Outcome, list[Outcome]]:
        holder = await s.hold("priority_policy")
        tasks = await s.send_in_order(
            "priority_policy",
            [
                ("level2", {}),
                ("level3", {"priority": 3}),
                ("level3_full", {"priority": 3}),
                ("level1", {"priority": 1}),
            ],
        )
        return await holder, list(await asyncio.gather(*tasks))

    holder, outcomes = run(server, tmp_path, scenario)
    level2, level3, level3_full, level1 = outcomes
    story = timeline(holder, *outcomes)
    assert_rejected(level3_full, "Exceeds maximum queue size")
    assert level3_full.received_ns < holder["END_NS"], f"not rejected at once\n{story}"
    assert_rejected(level1, "Request timeout expired")
    assert level1.elapsed_s >= 0.2, story
    # Timed out too, but DELAY: still served, and ahead of the lower level.
    assert level2.ok and level3.ok, story
    assert level2.order < level3.order, story


def test_queue_timeout_rejects(server: ServerHandle, tmp_path: Path) -> None:
    """default_timeout 300 ms, REJECT, no override: a request's own `timeout` changes
    nothing (neither shorter nor longer)."""

    async def scenario(s: Session) -> tuple[list[Outcome], Outcome]:
        holder = await s.hold("timeout_reject")
        tasks = await s.send_in_order(
            "timeout_reject",
            [
                ("default", {}),
                ("shorter", {"timeout_us": 100_000}),
                ("longer", {"timeout_us": 60_000_000}),
            ],
        )
        outcomes = list(await asyncio.gather(*tasks))
        await holder
        return outcomes, await s.send("timeout_reject", "after")

    failures_before = model_statistics(server, "timeout_reject")["inference_stats"]["fail"]
    outcomes, after = run(server, tmp_path, scenario)
    for outcome in outcomes:
        assert_rejected(outcome, "Request timeout expired")
        assert outcome.elapsed_s >= 0.3, f"{outcome.tag} rejected after {outcome.elapsed_s:.3f} s"
    assert after.ok
    failures = model_statistics(server, "timeout_reject")["inference_stats"]["fail"]
    assert failures["count"] == failures_before["count"] + 3


def test_queue_timeout_rejects_while_instance_busy(server: ServerHandle, tmp_path: Path) -> None:
    """The rejection comes when the timeout expires, not when an instance next gets free."""

    async def scenario(s: Session) -> tuple[Outcome, Outcome]:
        holder = await s.hold("timeout_reject", sleep_ms=2500)
        rejected = await s.send("timeout_reject", "queued")
        return await holder, rejected

    holder, rejected = run(server, tmp_path, scenario)
    assert_rejected(rejected, "Request timeout expired")
    assert rejected.received_ns < holder["END_NS"], (
        "the timed-out request was rejected only once the busy instance had finished\n"
        + timeline(holder, rejected)
    )


def test_request_timeout_may_only_shorten_the_default(server: ServerHandle, tmp_path: Path) -> None:
    """default 30 s, REJECT, allow_timeout_override: `timeout` 200 ms applies, 60 s does not
    lengthen anything (the request is served either way here)."""

    async def scenario(s: Session) -> list[Outcome]:
        holder = await s.hold("timeout_override")
        tasks = await s.send_in_order(
            "timeout_override",
            [
                ("shorter", {"timeout_us": 200_000}),
                ("longer", {"timeout_us": 60_000_000}),
                ("none", {}),
            ],
        )
        await holder
        return list(await asyncio.gather(*tasks))

    shorter, longer, none = run(server, tmp_path, scenario)
    assert_rejected(shorter, "Request timeout expired")
    assert shorter.elapsed_s >= 0.2
    assert longer.ok and none.ok, timeline(shorter, longer, none)


def test_request_timeout_without_default_is_ignored(server: ServerHandle, tmp_path: Path) -> None:
    """allow_timeout_override with no default timeout: a request's `timeout` has no effect."""

    async def scenario(s: Session) -> tuple[Outcome, Outcome]:
        holder = await s.hold("timeout_override_no_default", sleep_ms=800)
        queued = await s.send("timeout_override_no_default", "queued", timeout_us=100_000)
        return await holder, queued

    holder, queued = run(server, tmp_path, scenario)
    assert queued.ok, timeline(holder, queued)
    # It was served although it waited in the queue longer than its `timeout`.
    assert queued["START_NS"] - queued.sent_ns >= 100_000_000, timeline(holder, queued)


def test_queue_timeout_delay_serves_after_the_others(server: ServerHandle, tmp_path: Path) -> None:
    """DELAY: a request whose timeout expired still succeeds, behind the requests that did not
    time out, although it arrived first."""

    async def scenario(s: Session) -> tuple[Outcome, list[Outcome]]:
        holder = await s.hold("timeout_delay")
        tasks = await s.send_in_order(
            "timeout_delay",
            [("expired", {"timeout_us": 200_000}), ("on_time1", {}), ("on_time2", {})],
        )
        return await holder, list(await asyncio.gather(*tasks))

    holder, outcomes = run(server, tmp_path, scenario)
    assert all(o.ok for o in outcomes), timeline(holder, *outcomes)
    order = [o.tag for o in sorted(outcomes, key=lambda o: o.order)]
    assert order == ["on_time1", "on_time2", "expired"], timeline(holder, *outcomes)


def test_max_queue_size_rejects(server: ServerHandle, tmp_path: Path) -> None:
    """max_queue_size 2: with an instance busy and two requests queued, a third is rejected
    at once; the queued ones are served."""

    async def scenario(s: Session) -> tuple[Outcome, list[Outcome], Outcome]:
        holder = await s.hold("max_queue_size")
        tasks = await s.send_in_order("max_queue_size", [("q1", {}), ("q2", {}), ("q3", {})])
        outcomes = list(await asyncio.gather(*tasks))
        return await holder, outcomes, await s.send("max_queue_size", "after")

    holder, (q1, q2, q3), after = run(server, tmp_path, scenario)
    story = timeline(holder, q1, q2, q3, after)
    assert_rejected(q3, "Exceeds maximum queue size")
    assert q3.received_ns < holder["END_NS"], f"the third was not rejected at once\n{story}"
    assert q1.ok and q2.ok and after.ok, story
    assert q1.order < q2.order, story


# ---------------------------------------------------------------------------------------------
# Shapes and correctness under load


def test_mixed_shapes_are_never_merged(server: ServerHandle, tmp_path: Path) -> None:
    """INPUT0 dims [-1], delay 2 s: a batch leaves when the next request's shape differs."""

    async def scenario(s: Session) -> list[Outcome]:
        tasks = await s.send_in_order(
            "mixed_shapes",
            [
                ("a_w3", {"width": 3}),
                ("b_w3", {"width": 3}),
                ("c_w5", {"width": 5}),
                ("d_w3", {"width": 3, "batch": 2}),
                ("e_w5", {"width": 5}),
            ],
        )
        return list(await asyncio.gather(*tasks))

    outcomes = run(server, tmp_path, scenario)
    assert all(o["BATCH_SHAPES"] == 1 for o in outcomes), timeline(*outcomes)
    expected = [["a_w3", "b_w3"], ["c_w5"], ["d_w3"], ["e_w5"]]
    assert tags(executions(outcomes)) == expected, timeline(*outcomes)


def _random_load(
    server: ServerHandle, tmp_path: Path, model: str, count: int, widths: tuple[int, ...]
) -> list[Outcome]:
    """``count`` concurrent requests, random batch size 1..4, width and values."""
    rng = np.random.default_rng(20240601)
    requests = []
    for i in range(count):
        batch, width = int(rng.integers(1, 5)), int(rng.choice(widths))
        values = rng.uniform(-1000, 1000, (batch, width)).astype(np.float32)
        requests.append((f"r{i}", values))

    async def scenario(s: Session) -> list[Outcome]:
        limit = asyncio.Semaphore(64)

        async def one(tag: str, values: np.ndarray) -> Outcome:
            async with limit:
                return await infer(s.client, model, tag, values=values)

        return list(
            await asyncio.wait_for(asyncio.gather(*(one(*r) for r in requests)), timeout=120)
        )

    outcomes = run(server, tmp_path, scenario)  # infer() checked every answer
    failed = [f"{o.tag}: {o.error}" for o in outcomes if not o.ok]
    assert not failed, failed[:5]
    return outcomes


def test_every_response_equals_the_unbatched_answer(server: ServerHandle, tmp_path: Path) -> None:
    outcomes = _random_load(server, tmp_path, "random_load", 1000, (4,))
    assert max(o["BATCH_REQUESTS"] for o in outcomes) > 1, "nothing was batched"
    for outcome in outcomes:
        assert outcome["BATCH_SIZE"] <= 8
    stats = model_statistics(server, "random_load")
    assert stats["inference_stats"]["success"]["count"] == 1000
    assert stats["inference_count"] == sum(o.batch for o in outcomes)
    assert stats["execution_count"] < 1000
    per_size = {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]}
    assert max(per_size) > 1, per_size
    assert sum(size * count for size, count in per_size.items()) == stats["inference_count"]
    assert sum(per_size.values()) == stats["execution_count"]


def test_mixed_shapes_under_load(server: ServerHandle, tmp_path: Path) -> None:
    outcomes = _random_load(server, tmp_path, "mixed_shapes_load", 300, (1, 2, 3))
    assert all(o["BATCH_SHAPES"] == 1 for o in outcomes)
    assert max(o["BATCH_REQUESTS"] for o in outcomes) > 1, "nothing was batched"


# ---------------------------------------------------------------------------------------------
# Statistics


def test_statistics_show_the_batching(server: ServerHandle, tmp_path: Path) -> None:
    """A holder, then ten requests of 1 behind it: executions of 1, 4, 4 and 2."""

    async def scenario(s: Session) -> list[Outcome]:
        holder = await s.hold("statistics")
        burst = await asyncio.gather(*(s.send("statistics", f"r{i}") for i in range(10)))
        return [await holder, *burst]

    outcomes = run(server, tmp_path, scenario)
    # Sorted: the real Triton may prefetch the last two batches in either order.
    sizes = sorted(sum(o.batch for o in call) for call in executions(outcomes))
    assert sizes == [1, 2, 4, 4], timeline(*outcomes)
    stats = model_statistics(server, "statistics")
    assert stats["execution_count"] == 4
    assert stats["inference_count"] == 11
    inference = stats["inference_stats"]
    assert inference["success"]["count"] == 11
    assert inference["queue"]["count"] == 11
    assert inference["compute_infer"]["count"] == 11
    per_size = {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]}
    assert per_size == {1: 1, 2: 1, 4: 2}
    for entry in stats["batch_stats"]:
        assert entry["compute_input"]["count"] == entry["compute_infer"]["count"]
        assert entry["compute_output"]["count"] == entry["compute_infer"]["count"]
