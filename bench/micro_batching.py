"""Micro-benchmark of the batching gather: GB/s against np.concatenate, pooled and unpooled.

Gathers the FP32 inputs of 8 requests into one batch, the way the dynamic batcher does,
and reports bytes gathered per second (input bytes = output bytes) and time per batch:

    python bench/micro_batching.py [--seconds 0.5]

``gather (pool)`` takes its destination from a BufferPool and drops it after each batch,
which returns the buffer, so in steady state it reuses one warm buffer; ``np.concatenate``
and ``gather`` allocate the destination each time.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from pytriton_core._native.batching import BufferPool, gather_batch

CASES = [("8 x [1, 16]", 8, (1, 16)), ("8 x [1, 1Mi]", 8, (1, 1 << 20))]
ROUNDS = 10


def calls_for(fn: Callable[[], object], seconds: float) -> int:
    """How many calls of fn take about `seconds`."""
    calls = 1
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed > seconds / 10 or calls >= 1 << 24:
            return max(1, int(calls * seconds / max(elapsed, 1e-9)))
        calls *= 4


def best_seconds_per_call(fns: list[Callable[[], object]], budget: float) -> list[float]:
    """Each fn's fastest mean over ROUNDS timed runs, the fns interleaved round by round so
    that a noisy neighbour slows them alike."""
    counts = [calls_for(fn, budget / ROUNDS) for fn in fns]
    best = [float("inf")] * len(fns)
    for _ in range(ROUNDS):
        for i, (fn, calls) in enumerate(zip(fns, counts, strict=True)):
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            best[i] = min(best[i], (time.perf_counter() - start) / calls)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="seconds per method and batch")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    pool = BufferPool()
    print(f"{'batch (FP32)':<14}{'method':<18}{'GB/s':>9}{'us/batch':>11}{'vs concat':>11}")
    for label, count, shape in CASES:
        parts = [rng.standard_normal(shape).astype(np.float32) for _ in range(count)]
        nbytes = sum(part.nbytes for part in parts)
        expected = np.concatenate(parts)
        for result in (gather_batch(parts), gather_batch(parts, pool=pool)):
            assert np.array_equal(result, expected)
        del result  # hand the pooled buffer back before timing
        methods: list[tuple[str, Callable[[], object]]] = [
            ("np.concatenate", lambda parts=parts: np.concatenate(parts)),
            ("gather", lambda parts=parts: gather_batch(parts)),
            ("gather (pool)", lambda parts=parts: gather_batch(parts, pool=pool)),
        ]
        timings = best_seconds_per_call([fn for _, fn in methods], args.seconds)
        for (name, _), seconds in zip(methods, timings, strict=True):
            print(
                f"{label:<14}{name:<18}{nbytes / seconds / 1e9:>9.2f}{seconds * 1e6:>11.2f}"
                f"{timings[0] / seconds:>10.2f}x"
            )
    stats = pool.stats()
    print(
        f"pool: {stats['allocations']} allocations, {stats['reuses']} reuses, "
        f"memory_kind={stats['memory_kind']}"
    )


if __name__ == "__main__":
    main()
