"""The workers' board: one memory-mapped file that every worker of ``--workers N`` and
their parent map, with one slot per worker.

A slot is written by its worker only (and cleared by the parent when that worker died), so
no lock is needed: each record carries a sequence number that is odd while it is being
written (a seqlock), and readers retry until they read an even, unchanged one.

A slot holds the worker's state (starting, serving, draining), its pid, and one entry per
loaded model version with that worker's statistics counters: the scalars of Triton's
statistics extension, the failure reasons, and up to ``BATCH_SIZES`` distinct batch sizes.
Each entry names the load its counters count from (its *stamp*: the number the parent gave
the load change, 0 for the models loaded at start), so that a dead worker's counters of an
earlier load of the same model version are never added to a later one. A reader sums the
entries of every worker, live or dead, with the same name, version and stamp; nobody
scrapes anybody.
"""

from __future__ import annotations

import enum
import mmap
import os
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SLOT_BYTES = 1 << 22  # per worker: the header and ENTRY_CAPACITY model-version entries
NAME_BYTES = 256  # a model name, UTF-8, NUL-padded
BATCH_SIZES = 32  # distinct batch sizes kept per model version and worker
RESPONSE_INDEXES = 32  # response_stats of a decoupled model: its first response indexes
HISTOGRAMS = 6  # the 5 latency histograms and the first-response histogram
HISTOGRAM_BUCKETS = 32  # bounds of one histogram (the +Inf bucket comes on top)
SCALARS = 23  # see ``SharedStatistics``: 8 durations (count, ns), 3 counts, 4 failures
_HEADER = struct.Struct("<qqqq")  # sequence, state, pid, entry count
# After the header: sequence, then the worker's pinned pool: its size and the bytes in use
_PINNED = struct.Struct("<qqq")
_PINNED_AT = 40
# sequence, name, version, in use, and the load the counters belong to (``claim_entry``)
_ENTRY_HEAD = struct.Struct(f"<q{NAME_BYTES}sqqq")
_SCALARS = struct.Struct(f"<{SCALARS}q")
_BATCH = struct.Struct("<7q")  # batch size, then compute input/infer/output (count, ns)
_COUNT = struct.Struct("<q")
# response index, then compute infer/output, success, fail, empty, cancel (count, ns)
_RESPONSE = struct.Struct("<13q")
# buckets in use (0: none), observations, sum, then the count of each bucket
_HISTOGRAM = struct.Struct(f"<qqd{HISTOGRAM_BUCKETS + 1}q")
_SCALARS_AT = _ENTRY_HEAD.size
_BATCH_COUNT_AT = _SCALARS_AT + _SCALARS.size
_BATCHES_AT = _BATCH_COUNT_AT + _COUNT.size
_RESPONSE_COUNT_AT = _BATCHES_AT + BATCH_SIZES * _BATCH.size
_RESPONSES_AT = _RESPONSE_COUNT_AT + _COUNT.size
_HISTOGRAMS_AT = _RESPONSES_AT + RESPONSE_INDEXES * _RESPONSE.size
ENTRY_BYTES = _HISTOGRAMS_AT + HISTOGRAMS * _HISTOGRAM.size + 40  # a multiple of 8
ENTRY_CAPACITY = (SLOT_BYTES - 64) // ENTRY_BYTES

# One histogram as the board keeps it: (buckets in use, observations, sum, bucket counts).
HistogramCounts = tuple[int, int, float, tuple[int, ...]]


class WorkerState(enum.IntEnum):
    DOWN = 0  # not started yet, or died (its counters stay on the board)
    STARTING = 1
    SERVING = 2  # started: its startup models are loaded and its front ends listen
    DRAINING = 3  # stopping: it finishes what is in flight


@dataclass(frozen=True, slots=True)
class EntryCounters:
    """One worker's counters for one model version, as read from its slot."""

    scalars: tuple[int, ...]
    batches: tuple[tuple[int, ...], ...]  # (batch size, 6 values) per batch size seen
    responses: tuple[tuple[int, ...], ...] = ()  # (response index, 12 values) per index
    histograms: tuple[HistogramCounts | None, ...] = ()  # HISTOGRAMS of them, None: unused


class WorkerBoard:
    """The mapped board file: ``create`` in the parent, ``open`` in each worker."""

    def __init__(self, path: Path, workers: int, buffer: mmap.mmap) -> None:
        self.path = path
        self.workers = workers
        self._buffer = buffer
        self._view = memoryview(buffer)
        # A worker claims entries from its model-load threads and sets its state on the
        # event loop: writes of a slot's header and entry table go one at a time.
        self._lock = threading.Lock()

    @classmethod
    def create(cls, folder: Path, workers: int) -> WorkerBoard:
        path = folder / "board"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, workers * SLOT_BYTES)  # sparse: zeros cost nothing until used
            buffer = mmap.mmap(fd, workers * SLOT_BYTES)
        finally:
            os.close(fd)
        return cls(path, workers, buffer)

    @classmethod
    def open(cls, path: Path) -> WorkerBoard:
        fd = os.open(path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            buffer = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        return cls(path, size // SLOT_BYTES, buffer)

    def slot(self, index: int) -> WorkerSlot:
        if not 0 <= index < self.workers:
            raise ValueError(f"worker index {index} outside 0..{self.workers - 1}")
        return WorkerSlot(self._view, index * SLOT_BYTES, self._lock)

    def slots(self) -> Iterator[WorkerSlot]:
        return (self.slot(i) for i in range(self.workers))

    def pinned_totals(self) -> tuple[int, int]:
        """The pinned pools of every worker that is not down: (size, bytes in use)."""
        pools = [slot.pinned() for slot in self.slots() if slot.state() is not WorkerState.DOWN]
        return sum(size for size, _ in pools), sum(used for _, used in pools)

    def all_serving(self) -> bool:
        return all(slot.state() is WorkerState.SERVING for slot in self.slots())

    def close(self) -> None:
        self._view.release()
        self._buffer.close()


class WorkerSlot:
    """One worker's part of the board."""

    __slots__ = ("_base", "_lock", "_view")

    def __init__(self, view: memoryview, base: int, lock: threading.Lock) -> None:
        self._view = view
        self._base = base
        self._lock = lock

    # ---------------------------------------------------------------- header

    def _header(self) -> tuple[int, int, int, int]:
        while True:
            values: tuple[int, int, int, int] = _HEADER.unpack_from(self._view, self._base)
            if values[0] % 2 == 0 and _HEADER.unpack_from(self._view, self._base)[0] == values[0]:
                return values

    def _write_header(self, state: int, pid: int, entries: int) -> None:
        sequence = _HEADER.unpack_from(self._view, self._base)[0]
        struct.pack_into("<q", self._view, self._base, sequence + 1)
        _HEADER.pack_into(self._view, self._base, sequence + 1, state, pid, entries)
        struct.pack_into("<q", self._view, self._base, sequence + 2)

    def state(self) -> WorkerState:
        return WorkerState(self._header()[1])

    def pid(self) -> int:
        return self._header()[2]

    def set_state(self, state: WorkerState, pid: int | None = None) -> None:
        with self._lock:
            _, _, old_pid, entries = self._header()
            self._write_header(state, old_pid if pid is None else pid, entries)

    def mark_down(self) -> None:
        """The parent, after this slot's worker died. Its counters stay: they are
        requests it completed, and the worker started in its place continues them. Its
        pinned memory went with it."""
        self.set_state(WorkerState.DOWN, 0)
        self.set_pinned(0, 0)

    def set_pinned(self, size: int, in_use: int) -> None:
        """The worker's pinned pool (written from its loop only, or by the parent for a
        dead worker)."""
        at = self._base + _PINNED_AT
        sequence = _PINNED.unpack_from(self._view, at)[0]
        struct.pack_into("<q", self._view, at, sequence + 1)
        _PINNED.pack_into(self._view, at, sequence + 1, size, in_use)
        struct.pack_into("<q", self._view, at, sequence + 2)

    def pinned(self) -> tuple[int, int]:
        """(pool size, bytes in use) as the worker last wrote them."""
        at = self._base + _PINNED_AT
        while True:
            sequence, size, in_use = _PINNED.unpack_from(self._view, at)
            if sequence % 2 == 0 and struct.unpack_from("<q", self._view, at)[0] == sequence:
                return size, in_use

    # --------------------------------------------------------------- entries

    def _entry_base(self, index: int) -> int:
        return self._base + 64 + index * ENTRY_BYTES

    def claim_entry(
        self, name: str, version: int, stamp: int, inherit: bool
    ) -> tuple[int, EntryCounters, bool]:
        """The entry for a model version this worker loads, the counters it starts from,
        and whether they are inherited: with ``inherit``, those of a predecessor in this
        slot for the same load (a worker that died and was started again keeps counting
        where it stopped); otherwise zeros."""
        encoded = name.encode()
        if len(encoded) > NAME_BYTES:
            raise ValueError(f"model name longer than {NAME_BYTES} bytes: '{name}'")
        with self._lock:
            if inherit:
                found = self._find(name, version, stamp)
                if found is not None:
                    return (*found, True)
            state, pid, count = self._header()[1:]
            index = next((i for i in range(count) if not self._entry_in_use(i)), count)
            if index >= ENTRY_CAPACITY:
                raise RuntimeError(f"more than {ENTRY_CAPACITY} model versions loaded at once")
            base = self._entry_base(index)
            sequence = _ENTRY_HEAD.unpack_from(self._view, base)[0] if index < count else 0
            self._view[base : base + ENTRY_BYTES] = bytes(ENTRY_BYTES)
            _ENTRY_HEAD.pack_into(self._view, base, sequence + 2, encoded, version, 1, stamp)
            if index == count:
                self._write_header(state, pid, count + 1)
            return index, EntryCounters((0,) * SCALARS, ()), False

    def release_entry(self, index: int) -> None:
        """A model version this worker unloaded: its entry is free for another."""
        with self._lock:
            base = self._entry_base(index)
            sequence, name, version, _, stamp = _ENTRY_HEAD.unpack_from(self._view, base)
            _ENTRY_HEAD.pack_into(self._view, base, sequence + 2, name, version, 0, stamp)

    def _entry_in_use(self, index: int) -> bool:
        return bool(_ENTRY_HEAD.unpack_from(self._view, self._entry_base(index))[3])

    def begin_write(self, index: int) -> int:
        """Mark entry ``index`` as being written; returns the base for ``end_write``."""
        base = self._entry_base(index)
        sequence = struct.unpack_from("<q", self._view, base)[0]
        struct.pack_into("<q", self._view, base, sequence + 1)
        return base

    def end_write(self, base: int) -> None:
        sequence = struct.unpack_from("<q", self._view, base)[0]
        struct.pack_into("<q", self._view, base, sequence + 1)

    def write_scalars(self, base: int, scalars: tuple[int, ...]) -> None:
        _SCALARS.pack_into(self._view, base + _SCALARS_AT, *scalars)

    def write_batch(self, base: int, position: int, values: tuple[int, ...]) -> None:
        _BATCH.pack_into(self._view, base + _BATCHES_AT + position * _BATCH.size, *values)
        self._grow(base + _BATCH_COUNT_AT, position)

    def write_response(self, base: int, position: int, values: tuple[int, ...]) -> None:
        at = base + _RESPONSES_AT + position * _RESPONSE.size
        _RESPONSE.pack_into(self._view, at, *values)
        self._grow(base + _RESPONSE_COUNT_AT, position)

    def write_histogram(self, base: int, which: int, counts: HistogramCounts) -> None:
        used, observations, total, buckets = counts
        padded = (*buckets, *(0,) * (HISTOGRAM_BUCKETS + 1 - len(buckets)))
        at = base + _HISTOGRAMS_AT + which * _HISTOGRAM.size
        _HISTOGRAM.pack_into(self._view, at, used, observations, total, *padded)

    def _grow(self, at: int, position: int) -> None:
        if position >= _COUNT.unpack_from(self._view, at)[0]:
            _COUNT.pack_into(self._view, at, position + 1)

    def find(self, name: str, version: int, stamp: int) -> tuple[int, EntryCounters] | None:
        """This worker's entry (its index, its counters) for load ``stamp`` of ``name``
        ``version``; None when it has none."""
        return self._find(name, version, stamp)

    def _find(self, name: str, version: int, stamp: int) -> tuple[int, EntryCounters] | None:
        encoded = name.encode().ljust(NAME_BYTES, b"\0")
        for index in range(self._header()[3]):
            base = self._entry_base(index)
            while True:
                head = _ENTRY_HEAD.unpack_from(self._view, base)
                sequence, entry_name, entry_version, in_use, entry_stamp = head
                if sequence % 2:
                    continue
                if not in_use or (entry_name, entry_version, entry_stamp) != (
                    encoded,
                    version,
                    stamp,
                ):
                    break
                counters = self._read_counters(base)
                if struct.unpack_from("<q", self._view, base)[0] == sequence:
                    return index, counters
        return None

    def _read_counters(self, base: int) -> EntryCounters:
        view = self._view
        scalars = _SCALARS.unpack_from(view, base + _SCALARS_AT)
        count = min(_COUNT.unpack_from(view, base + _BATCH_COUNT_AT)[0], BATCH_SIZES)
        batches = tuple(
            _BATCH.unpack_from(view, base + _BATCHES_AT + i * _BATCH.size) for i in range(count)
        )
        count = min(_COUNT.unpack_from(view, base + _RESPONSE_COUNT_AT)[0], RESPONSE_INDEXES)
        responses = tuple(
            _RESPONSE.unpack_from(view, base + _RESPONSES_AT + i * _RESPONSE.size)
            for i in range(count)
        )
        histograms: list[HistogramCounts | None] = []
        for which in range(HISTOGRAMS):
            used, observations, total, *buckets = _HISTOGRAM.unpack_from(
                view, base + _HISTOGRAMS_AT + which * _HISTOGRAM.size
            )
            histograms.append((used, observations, total, tuple(buckets[:used])) if used else None)
        return EntryCounters(scalars, batches, responses, tuple(histograms))
