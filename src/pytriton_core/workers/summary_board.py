"""The latency summaries' windows that every worker of ``--workers N`` can read: a file
beside the board (``summaries``) with one block per board entry, holding that worker's five
summary windows of that model version.

A summary's quantiles are over its recent observations, so they cannot be added like the
counters: a scrape through any worker takes the union of every worker's in-window
observations and ranks that. Each window is a ring of ``SUMMARY_CAPACITY`` records
(monotonic time, value, the running sum), the newest kept, behind a count of the
observations ever made. Only its worker writes a ring, and it writes a record before the
count that covers it, so a reader needs no lock and no retry loop on a busy ring: it reads
the count, the records, the count again, and keeps the records that no write could have
touched in between (see ``SummaryRing.window``). An observation costs two
``struct.pack_into`` into the mapping: no system call, no lock.

``time.monotonic_ns()`` is ``CLOCK_MONOTONIC``, one clock for every process of the machine,
so the workers' timestamps and the scraping worker's window compare.

The file is sparse: a block costs memory only once its worker writes it. A worker
allocates its block when it claims the board entry (``posix_fallocate``), so a full
``/dev/shm`` fails that model's load with an error instead of a SIGBUS at the first
request.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import mmap
import os
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pytriton_core.inference.statistics import (
    SUMMARY_CAPACITY,
    SUMMARY_MAX_AGE_NS,
    LatencySummaries,
    nearest_ranks,
)
from pytriton_core.workers.board import ENTRY_CAPACITY

SUMMARIES_FILE = "summaries"
# LatencySummaries' fields, in their order: one ring each
FAMILY_NAMES = tuple(f.name for f in dataclasses.fields(LatencySummaries))
_TAG = struct.Struct("<8sqq")  # the model's key digest, its version, its load's stamp
_COUNT = struct.Struct("<q")
_RECORD = struct.Struct("<qdd")  # monotonic ns, value, the sum of every value so far
_RECORD_DTYPE = np.dtype([("ns", "<i8"), ("value", "<f8"), ("sum", "<f8")])
_RING_HEAD = 64  # the count, alone on its cache line
# One record more than the window holds: the one the writer may be writing while a reader
# copies the newest SUMMARY_CAPACITY.
_RECORDS = SUMMARY_CAPACITY + 1
RING_BYTES = _RING_HEAD + _RECORDS * _RECORD.size
_BLOCK_HEAD = 64
BLOCK_BYTES = -(-(_BLOCK_HEAD + len(FAMILY_NAMES) * RING_BYTES) // mmap.PAGESIZE) * mmap.PAGESIZE


def summary_tag(key: str, version: int, stamp: int) -> tuple[bytes, int, int]:
    """What a block names: the board entry it belongs to (a key digest: the board entry
    holds the name itself)."""
    return hashlib.blake2b(key.encode(), digest_size=8).digest(), version, stamp


class SummaryRing:
    """One worker's window of one summary family of one model version.

    Its worker observes into it (``observe``: the ``Summary`` a worker's statistics
    record into); any worker reads it (``totals``, ``window``).
    """

    __slots__ = ("_head", "_records", "_view", "count", "sum")

    def __init__(self, view: memoryview, at: int) -> None:
        self._view = view
        self._head = at
        self._records = at + _RING_HEAD
        # The writer's running totals (``resume``); a reader reads ``totals()``.
        self.count = 0
        self.sum = 0.0

    def resume(self) -> SummaryRing:
        """Make this ring the writer's: its totals continue from what the ring holds (a
        worker started in a dead one's place goes on counting where it stopped)."""
        self.count, self.sum = self.totals()
        return self

    def observe(self, value: float, now_ns: int) -> None:
        count = self.count
        self.sum += value
        at = self._records + (count % _RECORDS) * _RECORD.size
        _RECORD.pack_into(self._view, at, now_ns, value, self.sum)
        self.count = count + 1
        _COUNT.pack_into(self._view, self._head, count + 1)  # after the record: it covers it

    def _count(self) -> int:
        count: int = _COUNT.unpack_from(self._view, self._head)[0]
        return count

    def totals(self) -> tuple[int, float]:
        """(observations, their sum) as of now, from the newest record's running sum."""
        while True:
            count = self._count()
            if count == 0:
                return 0, 0.0
            at = self._records + ((count - 1) % _RECORDS) * _RECORD.size
            total: float = _RECORD.unpack_from(self._view, at)[2]
            # That record is overwritten only by observation count - 1 + _RECORDS.
            if self._count() < count - 1 + _RECORDS:
                return count, total

    def window(self, now_ns: int) -> np.ndarray:
        """The values observed in the last ``SUMMARY_MAX_AGE_NS`` (at most the newest
        ``SUMMARY_CAPACITY``), in no order."""
        before = self._count()
        records = np.frombuffer(
            self._view, _RECORD_DTYPE, count=_RECORDS, offset=self._records
        ).copy()
        first, end = untouched(before, self._count())
        kept = records[np.arange(first, end) % _RECORDS]
        values: np.ndarray = kept["value"][kept["ns"] >= now_ns - SUMMARY_MAX_AGE_NS]
        return values

    def quantiles(self, qs: Sequence[float], now_ns: int) -> list[float]:
        """This worker's own window's quantiles (``WorkersSummary`` ranks the union)."""
        return _ranked(qs, [self.window(now_ns)])


def untouched(before: int, after: int) -> tuple[int, int]:
    """The newest observations, at most ``SUMMARY_CAPACITY``, whose records a reader
    copied whole, as (first, end), given the ring's count before and after the copy: the
    writer wrote observations ``before`` to ``after`` meanwhile (the last perhaps in part),
    each over the record of the observation ``_RECORDS`` earlier."""
    if after < before:  # emptied meanwhile: its entry was claimed again
        return 0, 0
    first = max(0, before - SUMMARY_CAPACITY, after + 1 - _RECORDS)
    return min(first, before), before


class WorkersSummary:
    """One summary family of one model version over every worker: counts and sums added,
    quantiles over the union of the windows. Observations go to this worker's ring."""

    __slots__ = ("_own", "_rings")

    def __init__(self, own: SummaryRing, peers: Sequence[SummaryRing]) -> None:
        self._own = own
        self._rings = (own, *peers)

    @property
    def count(self) -> int:
        return self._own.count + sum(ring.totals()[0] for ring in self._rings[1:])

    @property
    def sum(self) -> float:
        return self._own.sum + sum(ring.totals()[1] for ring in self._rings[1:])

    def observe(self, value: float, now_ns: int) -> None:
        self._own.observe(value, now_ns)

    def quantiles(self, qs: Sequence[float], now_ns: int) -> list[float]:
        return _ranked(qs, [ring.window(now_ns) for ring in self._rings])


def _ranked(qs: Sequence[float], windows: Sequence[np.ndarray]) -> list[float]:
    values = np.sort(np.concatenate(windows))
    if not len(values):
        return [math.nan] * len(qs)
    return [float(values[i]) for i in nearest_ranks(len(values), qs)]


class SummaryBlock:
    """The five rings of one board entry, in ``LatencySummaries``' order."""

    __slots__ = ("_at", "_view")

    def __init__(self, view: memoryview, at: int) -> None:
        self._view = view
        self._at = at

    def tag(self) -> tuple[bytes, int, int]:
        found: tuple[bytes, int, int] = _TAG.unpack_from(self._view, self._at)
        return found

    def rings(self) -> list[SummaryRing]:
        base = self._at + _BLOCK_HEAD
        return [SummaryRing(self._view, base + i * RING_BYTES) for i in range(len(FAMILY_NAMES))]

    def summaries(self) -> LatencySummaries:
        """The rings as the ``LatencySummaries`` a worker's statistics record into."""
        rings = (ring.resume() for ring in self.rings())
        return LatencySummaries(**dict(zip(FAMILY_NAMES, rings, strict=True)))


class SummaryBoard:
    """The mapped summaries file: ``create`` in the parent, ``open`` in each worker."""

    def __init__(self, path: Path, workers: int, fd: int, buffer: mmap.mmap) -> None:
        self.path = path
        self.workers = workers
        self._fd = fd  # kept: claims allocate their blocks through it
        self._buffer = buffer
        self._view = memoryview(buffer)

    @classmethod
    def create(cls, folder: Path, workers: int) -> SummaryBoard:
        path = folder / SUMMARIES_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.ftruncate(fd, workers * ENTRY_CAPACITY * BLOCK_BYTES)  # sparse
        return cls(path, workers, fd, mmap.mmap(fd, workers * ENTRY_CAPACITY * BLOCK_BYTES))

    @classmethod
    def open(cls, path: Path) -> SummaryBoard:
        fd = os.open(path, os.O_RDWR)
        size = os.fstat(fd).st_size
        return cls(path, size // (ENTRY_CAPACITY * BLOCK_BYTES), fd, mmap.mmap(fd, size))

    def _offset(self, worker: int, entry: int) -> int:
        if not (0 <= worker < self.workers and 0 <= entry < ENTRY_CAPACITY):
            raise ValueError(f"no summary block for worker {worker}, entry {entry}")
        return (worker * ENTRY_CAPACITY + entry) * BLOCK_BYTES

    def block(self, worker: int, entry: int) -> SummaryBlock:
        return SummaryBlock(self._view, self._offset(worker, entry))

    def claim(
        self, worker: int, entry: int, tag: tuple[bytes, int, int], inherit: bool
    ) -> SummaryBlock:
        """Worker ``worker``'s block for its board entry ``entry`` (a model version of
        load ``tag``): kept as it is with ``inherit`` when it holds the same load's windows
        (a predecessor's), else emptied and tagged. Before a reader finds the entry on the
        board, so nobody reads a block while it is emptied."""
        at = self._offset(worker, entry)
        try:
            os.posix_fallocate(self._fd, at, BLOCK_BYTES)
        except OSError as error:
            raise RuntimeError(
                f"no room for the latency summaries in {self.path.parent} "
                f"({BLOCK_BYTES} bytes per model version and worker): {error}"
            ) from error
        block = SummaryBlock(self._view, at)
        if not inherit or block.tag() != tag:
            self._view[at : at + BLOCK_BYTES] = bytes(BLOCK_BYTES)
            _TAG.pack_into(self._view, at, *tag)
        return block

    def close(self) -> None:
        self._view.release()
        self._buffer.close()
        os.close(self._fd)
