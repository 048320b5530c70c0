"""The parent's order of changes for --workers N: real sockets, the real sequencer and
workers' links; the service behind each link is a small stand-in that records what it
applies (the integration tests run the real one)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from pytriton_core.errors import InternalError, InvalidArgumentError, UnavailableError
from pytriton_core.inference.statistics import ModelStatistics
from pytriton_core.workers.board import WorkerBoard
from pytriton_core.workers.peers import PeerLink
from pytriton_core.workers.sequencer import Sequencer
from pytriton_core.workers.shared_stats import SharedStatisticsFactory


class _Service:
    """What a worker's service does for its link: log settings and system regions."""

    def __init__(self) -> None:
        self.log: dict[str, Any] = {"log_verbose_level": 0}
        self.applied: list[Any] = []  # each log change applied, in order
        self.regions: dict[str, tuple[str, int, int]] = {}
        self.cuda: dict[str, tuple[bytes, int, int]] = {}
        self.gate: asyncio.Event | None = None  # holds update_log_settings while unset
        self.at_gate = False
        self.refuse_regions = False
        self.events: list[str] = []  # each poll and log change applied, in order
        self.poll_gate: asyncio.Event | None = None  # holds poll_repository while unset
        self.unload_gate: asyncio.Event | None = None  # holds unload_model while unset
        self.at_unload_gate = False

    async def load_model(
        self,
        name: str,
        config: str | None = None,
        files: Mapping[str, bytes] | None = None,
        *,
        replicate: bool = True,
    ) -> None:
        assert not replicate, "the link applies what the parent sends"
        self.events.append(f"load {name}")

    async def unload_model(
        self, name: str, unload_dependents: bool = False, *, replicate: bool = True
    ) -> None:
        assert not replicate, "the link applies what the parent sends"
        if self.unload_gate is not None:  # as an unload waits for the model's requests
            self.at_unload_gate = True
            await self.unload_gate.wait()
        self.events.append(f"unload {name}")

    async def poll_repository(self) -> None:
        if self.poll_gate is not None:
            await self.poll_gate.wait()
        self.events.append("poll")

    def ready_model_configs(self) -> dict[str, str]:
        return {}

    def ready_model_statistics(self) -> dict[str, ModelStatistics]:
        return {}

    def log_settings(self) -> dict[str, Any]:
        return dict(self.log)

    def trace_settings(self, model: str | None = None) -> dict[str, list[str] | str]:
        return {}

    def trace_overrides(self) -> dict[str, dict[str, list[str] | str]]:
        return {}

    def shm_status(self, kind: str, region: str | None) -> list[dict[str, Any]]:
        return [
            {"name": name, "key": key, "offset": offset, "byte_size": size}
            for name, (key, offset, size) in self.regions.items()
        ]

    async def update_log_settings(
        self, changes: dict[str, Any], *, replicate: bool = True
    ) -> dict[str, Any]:
        if self.gate is not None:
            self.at_gate = True
            await self.gate.wait()
        self.log.update(changes)
        self.applied.append(changes.get("log_verbose_level"))
        self.events.append(f"log {changes.get('log_verbose_level')}")
        return dict(self.log)

    async def update_trace_settings(
        self, model: str | None, changes: Mapping[str, Any], *, replicate: bool = True
    ) -> dict[str, list[str] | str]:
        return {}

    async def register_system_shm(
        self, region: str, key: str, offset: int, byte_size: int, *, replicate: bool = True
    ) -> None:
        if self.refuse_regions:
            raise InvalidArgumentError(f"Unable to open shared memory region: '{key}'")
        self.regions[region] = (key, offset, byte_size)

    async def register_cuda_shm(
        self,
        region: str,
        raw_handle: bytes,
        device_id: int,
        byte_size: int,
        *,
        replicate: bool = True,
    ) -> None:
        self.cuda[region] = (raw_handle, device_id, byte_size)

    async def unregister_shm(
        self, kind: str, region: str | None, *, replicate: bool = True
    ) -> None:
        regions: dict[str, Any] = self.regions if kind == "system" else self.cuda
        if region is None:
            regions.clear()
        regions.pop(region or "", None)


@asynccontextmanager
async def _workers(
    tmp_path: Path, count: int, **sequencer_options: Any
) -> AsyncIterator[tuple[Sequencer, list[PeerLink], list[_Service]]]:
    board = WorkerBoard.create(tmp_path, count)
    sequencer = Sequencer(board, alive=lambda index, pid: True, **sequencer_options)
    sequencer.start()
    links = [PeerLink(board, i, SharedStatisticsFactory(board, i)) for i in range(count)]
    services = [_Service() for _ in range(count)]
    for link, service in zip(links, services, strict=True):
        await link.start(service)
    try:
        yield sequencer, links, services
    finally:
        for link in links:
            await link.stop()
        sequencer.close()
        board.close()


async def _join_all(links: list[PeerLink], services: list[_Service]) -> None:
    for link, service in zip(links, services, strict=True):
        await link.join(service, explicit_models=False)


async def _until(condition: Any) -> None:
    """Wait (at most 10 s) until ``condition()`` holds."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


def test_a_change_made_while_a_worker_joins_reaches_it_after_its_copy(tmp_path: Path) -> None:
    async def run() -> None:
        async with _workers(tmp_path, 2) as (sequencer, links, services):
            await links[0].join(services[0], explicit_models=False)
            await links[0].call("update_log_settings", ({"log_verbose_level": 1},))
            # Worker 1 joins (as one started in a dead one's place): its copy of worker
            # 0's settings is held at the gate...
            services[1].gate = asyncio.Event()
            joining = asyncio.create_task(links[1].join(services[1], explicit_models=False))
            await _until(lambda: services[1].at_gate)
            # ...while a client changes the setting again through worker 0.
            change = asyncio.create_task(
                links[0].call("update_log_settings", ({"log_verbose_level": 2},))
            )
            await _until(lambda: sequencer.pending() == 1)
            assert services[0].applied == [1]  # the change waits for the join
            services[1].gate.set()
            await asyncio.wait_for(asyncio.gather(joining, change), 10)
            assert services[1].applied == [1, 2]  # the copy, then the change
            assert services[0].log == services[1].log == {"log_verbose_level": 2}

    asyncio.run(run())


def test_a_hung_worker_fails_the_change_by_name_leaves_and_is_killed(tmp_path: Path) -> None:
    killed: list[tuple[int, int]] = []

    async def run() -> None:
        options = {"kill": lambda index, pid: killed.append((index, pid)), "change_timeout_s": 0.5}
        async with _workers(tmp_path, 2, **options) as (sequencer, links, services):
            await _join_all(links, services)
            services[1].gate = asyncio.Event()  # worker 1 never answers: hung
            with pytest.raises(InternalError) as caught:
                await asyncio.wait_for(
                    links[0].call("update_log_settings", ({"log_verbose_level": 3},)), 10
                )
            assert "no answer to 'update_log_settings' within 0.5 s from worker 1" in str(
                caught.value
            )
            assert "hung" in str(caught.value)
            assert services[0].log == {"log_verbose_level": 3}  # the others applied it
            await _until(lambda: killed == [(1, os.getpid())])
            assert sorted(sequencer.members()) == [0]  # it gets no more changes
            # The next change is not held up by it.
            await asyncio.wait_for(
                links[0].call("update_log_settings", ({"log_verbose_level": 4},)), 10
            )
            services[1].gate.set()

    asyncio.run(run())


def test_changes_of_one_setting_through_two_workers_land_in_one_order(tmp_path: Path) -> None:
    async def run() -> None:
        async with _workers(tmp_path, 3) as (_, links, services):
            await _join_all(links, services)
            for service in services:
                service.applied.clear()  # the settings copied when joining
            # Through worker 0 and worker 1 at the same moment, again and again: neither
            # waits for the other (no deadlock), and every worker applies them in one order.
            changes = [
                links[i % 2].call("update_log_settings", ({"log_verbose_level": i},))
                for i in range(1, 21)
            ]
            results = await asyncio.wait_for(asyncio.gather(*changes), 10)
            assert sorted(services[0].applied) == list(range(1, 21))
            assert services[0].applied == services[1].applied == services[2].applied
            final = services[0].applied[-1]
            assert [s.log["log_verbose_level"] for s in services] == [final] * 3
            # Each caller got its own worker's settings right after its change.
            assert [r["log_verbose_level"] for r in results] == list(range(1, 21))

    asyncio.run(run())


def test_a_registration_one_worker_refuses_is_kept_by_none(tmp_path: Path) -> None:
    async def run() -> None:
        async with _workers(tmp_path, 3) as (_, links, services):
            await _join_all(links, services)
            services[2].refuse_regions = True
            with pytest.raises(InternalError, match="worker 2: Invalid argument: Unable to open"):
                await links[0].call("register_system_shm", ("r", "/k", 0, 64))
            assert [s.regions for s in services] == [{}, {}, {}]
            # The caller's own refusal is its own error, as one server raises it.
            services[0].refuse_regions = True
            with pytest.raises(InvalidArgumentError, match="Unable to open shared memory"):
                await links[0].call("register_system_shm", ("r", "/k", 0, 64))
            assert [s.regions for s in services] == [{}, {}, {}]

    asyncio.run(run())


def test_a_joining_worker_takes_the_regions_of_the_others(tmp_path: Path) -> None:
    async def run() -> None:
        async with _workers(tmp_path, 3) as (_, links, services):
            await links[0].join(services[0], explicit_models=False)
            await links[0].call("register_system_shm", ("r", "/k", 8, 64))
            handle = bytes(range(64))  # a CUDA IPC handle: only its registration carries it
            await links[0].call("register_cuda_shm", ("c", handle, 0, 128))
            await links[1].join(services[1], explicit_models=False)
            assert services[1].regions == {"r": ("/k", 8, 64)}
            assert services[1].cuda == {"c": (handle, 0, 128)}
            await links[1].call("unregister_shm", ("system", "r"))
            await links[1].call("unregister_shm", ("cuda", None))
            assert [(s.regions, s.cuda) for s in services[:2]] == [({}, {}), ({}, {})]
            await links[2].join(services[2], explicit_models=False)
            assert (services[2].regions, services[2].cuda) == ({}, {})

    asyncio.run(run())


def test_the_parents_poll_reaches_every_worker_in_order_with_the_other_changes(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        async with _workers(tmp_path, 2, poll_interval_s=0.02) as (_sequencer, links, services):
            await _join_all(links, services)
            for level in range(1, 6):
                await links[level % 2].call("update_log_settings", ({"log_verbose_level": level},))
                polls = services[0].events.count("poll")
                await _until(lambda n=polls: services[0].events.count("poll") >= n + 2)
            # From the first change both took (before it: each one's join), one order:
            # the same polls between the same log changes on both workers.
            first, second = (s.events[s.events.index("log 1") :] for s in services)
            shorter = min(len(first), len(second))
            assert first[:shorter] == second[:shorter]
            assert [e for e in first if e.startswith("log")] == [f"log {n}" for n in range(1, 6)]
            assert shorter >= 13

    asyncio.run(run())


def test_a_worker_that_does_not_finish_a_poll_in_time_is_killed(tmp_path: Path) -> None:
    killed: list[tuple[int, int]] = []

    async def run() -> None:
        options = {
            "kill": lambda index, pid: killed.append((index, pid)),
            "change_timeout_s": 0.5,
            "poll_interval_s": 0.05,
        }
        async with _workers(tmp_path, 2, **options) as (sequencer, links, services):
            await _join_all(links, services)
            services[1].poll_gate = asyncio.Event()  # a model hung in initialize
            await _until(lambda: killed == [(1, os.getpid())])
            assert sorted(sequencer.members()) == [0]
            polls = services[0].events.count("poll")
            await _until(lambda: services[0].events.count("poll") > polls)  # polls go on
            services[1].poll_gate.set()

    asyncio.run(run())


def test_a_change_from_an_execute_of_the_model_an_unload_waits_for_is_refused_at_once(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        async with _workers(tmp_path, 2) as (sequencer, links, services):
            await _join_all(links, services)
            for service in services:
                service.events.clear()  # the settings copied when joining
            # A client's unload of "m" holds the order: worker 1 waits for m's executions...
            services[1].unload_gate = asyncio.Event()
            unload = asyncio.create_task(links[0].unload("m", False))
            await _until(lambda: services[1].at_unload_gate)
            # ...one of which asks for a load from its execute (pb_utils.load_model): it
            # would wait for the unload that waits for it, so it is refused at once.
            with pytest.raises(UnavailableError) as refused:
                await asyncio.wait_for(links[1].load("other", None, None, caller="m"), 5)
            assert "'load' of model 'other' from the execute of 'm' refused" in str(refused.value)
            assert "the 'unload' of 'm', which waits for the executions of 'm'" in str(
                refused.value
            )
            # Another model's execute and a client wait their turn, and are made after it.
            other_model = asyncio.create_task(links[1].load("other", None, None, caller="x"))
            client = asyncio.create_task(links[0].load("third", None, None))
            await _until(lambda: sequencer.pending() == 3)
            services[1].unload_gate.set()
            await asyncio.wait_for(asyncio.gather(unload, other_model, client), 10)
            for service in services:
                assert service.events[0] == "unload m"
                assert sorted(service.events[1:]) == ["load other", "load third"]
            assert services[0].events == services[1].events  # one order

    asyncio.run(run())
