"""The parent of ``--workers N``: starts N worker processes, each a whole server, that
listen on the same ports (SO_REUSEPORT), restarts one that dies, and drains them all on
SIGINT/SIGTERM.

The parent serves nothing itself and never starts an event loop, gRPC or a model: it
holds the board (``board.py``) and the summaries file (``summary_board.py``) that the
workers share, orders the changes every worker
applies (``sequencer.py``), and watches them.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from pytriton_core.workers.board import WorkerBoard, WorkerState
from pytriton_core.workers.sequencer import DEFAULT_CHANGE_TIMEOUT_S, Sequencer
from pytriton_core.workers.summary_board import SummaryBoard

log = logging.getLogger(__name__)

# A worker that dies before it ever served, this many times in a row, stops the server:
# it would only fail again (a model that cannot load, a port taken by another program).
MAX_FAILED_STARTS = 3
_POLL_S = 0.05
_DYING_S = 2.0  # from a dying worker's closed sockets to its exit


@dataclass(slots=True)
class _Worker:
    index: int
    process: subprocess.Popen[bytes]
    served: bool = False  # reached SERVING at least once


def board_folder() -> Path:
    """A private folder for the board, in memory where the system has /dev/shm."""
    shm = Path("/dev/shm")
    return Path(tempfile.mkdtemp(prefix="pytriton-workers-", dir=shm if shm.is_dir() else None))


class Supervisor:
    """Runs ``count`` workers; ``command(index, board_path)`` is one worker's argv."""

    def __init__(
        self,
        count: int,
        command: Callable[[int, Path], Sequence[str]],
        exit_timeout_s: float,
        change_timeout_s: float = DEFAULT_CHANGE_TIMEOUT_S,
        poll_interval_s: float | None = None,
    ) -> None:
        self._count = count
        self._poll_interval_s = poll_interval_s  # POLL mode: the parent keeps the clock
        self._command = command
        self._change_timeout_s = change_timeout_s
        # The workers' own drain takes up to --exit-timeout-secs; past that and a margin
        # for unloading models, a worker still running is killed.
        self._kill_after_s = exit_timeout_s + 15.0
        self._stopping = False
        self._workers: dict[int, _Worker] = {}
        self._failed_starts: dict[int, int] = {}

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True

    def run(self) -> int:
        """Serve until signalled (0 when every worker stopped cleanly) or until a worker
        cannot start (1)."""
        folder = board_folder()
        board = WorkerBoard.create(folder, self._count)
        # Beside it, the latency summaries' windows (sparse: nothing until a worker with
        # summary_latencies claims a block).
        summaries = SummaryBoard.create(folder, self._count)
        sequencer = Sequencer(
            board, self._alive, self._kill_hung, self._change_timeout_s, self._poll_interval_s
        )
        sequencer.start()
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            for index in range(self._count):
                self._spawn(board, index)
            status = self._watch(board, sequencer)
            return self._drain() or status
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            sequencer.close()
            board.close()
            summaries.close()
            shutil.rmtree(folder, ignore_errors=True)

    def _alive(self, index: int, pid: int) -> bool:
        """Whether worker ``index`` (process ``pid``) still runs, for the sequencer, which
        lost its connection to it: a dying process closes its sockets a moment before it
        exits, so that moment is waited for."""
        worker = self._workers.get(index)
        if worker is None or worker.process.pid != pid:
            return False
        try:
            worker.process.wait(_DYING_S)
        except subprocess.TimeoutExpired:
            return True
        return False

    def _kill_hung(self, index: int, pid: int) -> None:
        """A hung worker (from the sequencer's thread): killed if it is still that
        process; ``_watch`` sees it exit and starts it again."""
        worker = self._workers.get(index)
        if worker is not None and worker.process.pid == pid and worker.process.poll() is None:
            worker.process.kill()

    def _spawn(self, board: WorkerBoard, index: int) -> None:
        argv = list(self._command(index, board.path))
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
        self._workers[index] = _Worker(index, process)
        log.info("worker %d started (pid %d)", index, process.pid)

    def _watch(self, board: WorkerBoard, sequencer: Sequencer) -> int:
        announced = False
        while not self._stopping:
            for worker in list(self._workers.values()):
                slot = board.slot(worker.index)
                if not worker.served and slot.state() is WorkerState.SERVING:
                    worker.served = True
                    self._failed_starts[worker.index] = 0
                status = worker.process.poll()
                if status is None:
                    continue
                slot.mark_down()  # not ready; its counters stay
                sequencer.leave(worker.index)
                if self._stopping:
                    break
                if not worker.served:
                    failures = self._failed_starts.get(worker.index, 0) + 1
                    self._failed_starts[worker.index] = failures
                    if failures >= MAX_FAILED_STARTS or not announced:
                        log.error(
                            "worker %d exited with status %d before serving; stopping",
                            worker.index,
                            status,
                        )
                        del self._workers[worker.index]
                        return 1
                log.warning(
                    "worker %d (pid %d) exited with status %d; starting it again",
                    worker.index,
                    worker.process.pid,
                    status,
                )
                self._spawn(board, worker.index)
            if not announced and board.all_serving():
                announced = True
                log.info("all %d workers are serving", self._count)
            time.sleep(_POLL_S)
        return 0

    def _drain(self) -> int:
        """SIGTERM to every worker, then wait: each finishes its in-flight requests."""
        for worker in self._workers.values():
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self._kill_after_s
        status = 0
        for worker in self._workers.values():
            try:
                code = worker.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("worker %d did not stop in time: killed", worker.index)
                worker.process.kill()
                code = worker.process.wait()
            status = status or (1 if code else 0)
        return status


def available_cores() -> int:
    """The cores this process may run on (``--workers auto``)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
