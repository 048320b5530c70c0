"""A worker's seat on the board: what ``ServerRuntime`` needs to be one of N workers."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytriton_core.backends.custom_metrics import MetricRegistry
from pytriton_core.workers.board import WorkerBoard, WorkerState
from pytriton_core.workers.peers import PeerLink
from pytriton_core.workers.shared_metrics import SharedCustomMetrics
from pytriton_core.workers.shared_stats import SharedStatisticsFactory

PoolStats = Callable[[], Mapping[str, Any]]  # a pinned pool's ``stats``


@dataclass(frozen=True)
class WorkerSeat:
    board: WorkerBoard
    index: int
    parent_pid: int = field(default_factory=os.getppid)

    @classmethod
    def take(cls, board_path: Path, index: int) -> WorkerSeat:
        return cls(WorkerBoard.open(board_path), index)

    def watch_parent(
        self,
        loop: asyncio.AbstractEventLoop,
        pinned_pool: PoolStats | None = None,
        custom_metrics: SharedCustomMetrics | None = None,
        every_s: float = 1.0,
    ) -> None:
        """A worker whose parent died (SIGKILL: it could not drain its workers) drains
        itself, as on SIGTERM, instead of serving on without a supervisor. Each second,
        also: the pinned pool's use and the custom metrics, for the other workers'
        scrapes."""
        if os.getppid() != self.parent_pid:
            os.kill(os.getpid(), signal.SIGTERM)
            return
        if pinned_pool is not None:
            self._publish_pinned(pinned_pool)
        if custom_metrics is not None:
            custom_metrics.publish()
        loop.call_later(every_s, self.watch_parent, loop, pinned_pool, custom_metrics, every_s)

    def shared_custom_metrics(self, registry: MetricRegistry) -> SharedCustomMetrics:
        return SharedCustomMetrics(self.board, self.index, registry)

    def summed_pinned_pool(self, own: PoolStats) -> PoolStats:
        """What the metrics read of the pinned pool: every live worker's, added (this
        worker's as of now, the others' as of their last second)."""

        def summed() -> Mapping[str, Any]:
            self._publish_pinned(own)
            size, in_use = self.board.pinned_totals()
            return {"pinned_limit_bytes": size, "pinned_in_use_bytes": in_use}

        return summed

    def _publish_pinned(self, pool: PoolStats) -> None:
        stats = pool()
        self.board.slot(self.index).set_pinned(
            int(stats.get("pinned_limit_bytes", 0)), int(stats.get("pinned_in_use_bytes", 0))
        )

    def peer_link(self, statistics: SharedStatisticsFactory) -> PeerLink:
        return PeerLink(self.board, self.index, statistics)

    def statistics_factory(self) -> SharedStatisticsFactory:
        return SharedStatisticsFactory(self.board, self.index)

    def set_state(self, state: WorkerState) -> None:
        self.board.slot(self.index).set_state(state, os.getpid())

    def all_serving(self) -> bool:
        """Ready only when every worker is: each has started and none is draining."""
        return self.board.all_serving()
