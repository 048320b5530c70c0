"""A worker's seat on the board: what ``ServerRuntime`` needs to be one of N workers."""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

from pytriton_core.workers.board import WorkerBoard, WorkerState
from pytriton_core.workers.peers import PeerLink
from pytriton_core.workers.shared_stats import SharedStatisticsFactory


@dataclass(frozen=True)
class WorkerSeat:
    board: WorkerBoard
    index: int
    parent_pid: int = field(default_factory=os.getppid)

    @classmethod
    def take(cls, board_path: Path, index: int) -> WorkerSeat:
        return cls(WorkerBoard.open(board_path), index)

    def watch_parent(self, loop: asyncio.AbstractEventLoop, every_s: float = 1.0) -> None:
        """A worker whose parent died (SIGKILL: it could not drain its workers) drains
        itself, as on SIGTERM, instead of serving on without a supervisor."""
        if os.getppid() != self.parent_pid:
            os.kill(os.getpid(), signal.SIGTERM)
            return
        loop.call_later(every_s, self.watch_parent, loop, every_s)

    def peer_link(self, statistics: SharedStatisticsFactory) -> PeerLink:
        return PeerLink(self.board, self.index, statistics)

    def statistics_factory(self) -> SharedStatisticsFactory:
        return SharedStatisticsFactory(self.board, self.index)

    def set_state(self, state: WorkerState) -> None:
        self.board.slot(self.index).set_state(state, os.getpid())

    def all_serving(self) -> bool:
        """Ready only when every worker is: each has started and none is draining."""
        return self.board.all_serving()
