"""Per model-version counters: the one source for the statistics extension and metrics.

Updated only on the event loop (once per executed batch), so no locking is needed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns


@dataclass(slots=True)
class BatchDurations:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass(slots=True)
class ComputeTiming:
    """Monotonic ns timestamps of one execution, marked by the instance and its backend."""

    start_ns: int = 0
    input_end_ns: int = 0
    infer_end_ns: int = 0
    end_ns: int = 0

    def mark_input_done(self) -> None:
        self.input_end_ns = time.monotonic_ns()

    def mark_infer_done(self) -> None:
        self.infer_end_ns = time.monotonic_ns()

    def close(self) -> None:
        """Fill any mark the backend did not set, so the three spans add up."""
        self.end_ns = self.end_ns or time.monotonic_ns()
        self.input_end_ns = self.input_end_ns or self.start_ns
        self.infer_end_ns = self.infer_end_ns or self.end_ns


@dataclass(slots=True)
class ModelStatistics:
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    cache_hit: Duration = field(default_factory=Duration)
    cache_miss: Duration = field(default_factory=Duration)
    inference_count: int = 0
    execution_count: int = 0
    last_inference_ms: int = 0
    batch_stats: dict[int, BatchDurations] = field(default_factory=dict)
    pending_requests: int = 0

    def record_execution(self, batch_size: int, timing: ComputeTiming) -> None:
        self.execution_count += 1
        self.inference_count += batch_size
        self.last_inference_ms = time.time_ns() // 1_000_000
        per_batch = self.batch_stats.get(batch_size)
        if per_batch is None:
            per_batch = self.batch_stats[batch_size] = BatchDurations()
        per_batch.compute_input.add(timing.input_end_ns - timing.start_ns)
        per_batch.compute_infer.add(timing.infer_end_ns - timing.input_end_ns)
        per_batch.compute_output.add(timing.end_ns - timing.infer_end_ns)

    def record_request_success(
        self, arrival_ns: int, queue_start_ns: int, timing: ComputeTiming, end_ns: int
    ) -> None:
        # Every request of a batch is charged the batch's compute time, as Triton does.
        self.success.add(end_ns - arrival_ns)
        self.queue.add(timing.start_ns - queue_start_ns)
        self.compute_input.add(timing.input_end_ns - timing.start_ns)
        self.compute_infer.add(timing.infer_end_ns - timing.input_end_ns)
        self.compute_output.add(timing.end_ns - timing.infer_end_ns)

    def record_request_failure(self, arrival_ns: int, end_ns: int) -> None:
        self.fail.add(end_ns - arrival_ns)
