"""The worker process of a Python model instance in process mode (``process_instance``).

It runs the same in-process machinery the server uses (``PythonModel``/``PythonInstance``)
on requests whose tensors are views over the server's arena, and sends responses back
through its own arena (``process_transport``). Started by the server as
``python -c <bootstrap> <socket fds> <sys.path>``; it exits when the server's end of its
connection closes.
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from pytriton_core import clock
from pytriton_core.backends.base import InstanceSpec, ModelLocation
from pytriton_core.backends.custom_metrics import MetricFamilySnapshot, MetricRegistry
from pytriton_core.backends.python.backend import PythonBackend
from pytriton_core.backends.python.process_calls import WorkerCalls
from pytriton_core.backends.python.process_transport import (
    Arena,
    Channel,
    ChannelClosed,
    ExecutionAnswer,
    ResponseHeader,
    ResponseWriter,
    request_arguments,
    response_header,
)
from pytriton_core.config import ModelSpec, config_from_json, config_to_json_dict
from pytriton_core.errors import InternalError, ServerError
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.statistics import ComputeTiming, ResponseTiming

# How often the worker tells the server it is alive (with its custom metrics' changes).
HEARTBEAT_INTERVAL_S = 0.2


class _WorkerRequest(InferenceRequest):
    """A request whose responses sent from model code go back to the server."""

    __slots__ = ("key", "live", "writer")

    def __init__(
        self,
        key: int,
        writer: ResponseWriter | None,
        live: dict[int, _WorkerRequest] | None,
        *arguments: Any,  # InferenceRequest's, positional (``request_arguments``)
    ) -> None:
        super().__init__(*arguments)
        self.key = key
        self.writer = writer
        self.live = live

    def send_threadsafe(
        self,
        response: InferenceResponse | None,
        final: bool,
        timing: ResponseTiming | None = None,
    ) -> None:
        assert self.writer is not None
        message: dict[str, Any] = {"kind": "send", "key": self.key, "final": final}
        message["response"] = None if response is None else response_header(response)
        self.writer.send(message, [] if response is None else response.outputs)
        if final and self.live is not None:
            self.live.pop(self.key, None)


def _error_of(exc: BaseException) -> tuple[Any, str]:
    if isinstance(exc, ServerError):
        return exc.code, exc.message
    return InternalError("").code, f"{type(exc).__name__}: {exc}"


class _Worker:
    """``channel``: batches in, their answers out, on the main thread only; ``events``:
    the rest (``process_instance._Worker`` says why), read by a thread of its own."""

    def __init__(self, channel: Channel, events: Channel) -> None:
        self._channel = channel
        self._events = events
        self._writer = ResponseWriter(channel)  # the batches' answers
        self._event_writer = ResponseWriter(events)  # responses sent by model code, BLS
        self._live: dict[int, _WorkerRequest] = {}
        # A cancellation can come before its batch is read: the batch waits in the socket
        # behind the one executing (two in flight). Its key is kept until the batch comes.
        self._live_lock = threading.Lock()
        self._newest_key = 0  # the newest request read from a batch
        self._cancelled_early: set[int] = set()
        # The model's custom metrics; the server adds their changes to its own registry.
        self._metrics = MetricRegistry()
        self._metrics_lock = threading.Lock()
        self._metrics_sent: dict[str, MetricFamilySnapshot] = {}

    def run(self) -> None:
        init, fds = self._channel.recv()
        # The server's input arenas, one per slot (``process_instance._place``).
        self._inputs = [Arena(fds[0], init["arena_size"])]
        answers = Arena(fds[1], init["answers_size"])
        self._calls = WorkerCalls(self._events, self._event_writer, answers)
        try:
            instance = self._create(init)
        except BaseException as exc:  # the load fails with the model's own words
            self._channel.send({"kind": "failed", "error": _error_of(exc)})
            return
        ready = {
            "kind": "ready",
            "arena_size": self._writer.arena.size,
            "events_arena_size": self._event_writer.arena.size,
        }
        self._channel.send(ready, [self._writer.arena.fd, self._event_writer.arena.fd])
        threading.Thread(target=self._read, name="worker-reader", daemon=True).start()
        threading.Thread(target=self._beat, name="worker-heartbeat", daemon=True).start()
        poll_ns = int(init["poll_us"] * 1000)
        alone = False  # the last bundle held all its model had in flight
        while True:
            try:
                if poll_ns and alone:
                    self._poll(poll_ns)
                message, fds = self._channel.recv()
            except ChannelClosed:
                os._exit(0)  # the server is gone: nothing to answer to
            if message["kind"] == "stop":
                break
            self._execute(instance, message, fds)
            alone = message["alone"]
        instance.finalize()

    def _poll(self, window_ns: int) -> None:
        """Look for the next bundle for up to ``window_ns`` before ``recv`` sleeps on the
        socket: a next request that comes soon finds this process awake, where waking it
        would cost the request the kernel's wake-up and cold caches (lone requests: about
        twice as many per second). Between looks the process yields its core (and the
        GIL, to its reader and heartbeat threads), so that the client and the server,
        sharing the cores, run first; an idle worker polls once, then sleeps. Only after a
        bundle the server sent ``alone`` (all its model had in flight): with other
        requests in flight the next bundle comes after their answers, and the looks only
        took the cores the client and the server's loop needed (c4: 10,581 against 11,880
        requests/s without them)."""
        channel = self._channel
        if channel.buffered():
            return
        deadline = clock.now_ns() + window_ns
        while not channel.arrived():
            if clock.now_ns() >= deadline:
                return
            os.sched_yield()

    def _create(self, init: dict[str, Any]) -> Any:
        config = config_from_json(init["config"])
        spec = ModelSpec.from_config(config, init["version"])
        location = _location(init, server=self._calls, custom_metrics=self._metrics)
        model = PythonBackend(worker_process=True).load_model(spec, location, config)
        self._decoupled = spec.decoupled
        return model.create_instance(InstanceSpec(**init["instance"]))

    def _metric_changes(self) -> list[MetricFamilySnapshot]:
        """The custom metric families that changed since last sent."""
        if self._metrics.empty():  # most models have none: no snapshot per batch
            return []
        with self._metrics_lock:
            changed = [
                family
                for family in self._metrics.snapshot()
                if self._metrics_sent.get(family.name) != family
            ]
            for family in changed:
                self._metrics_sent[family.name] = family
        return changed

    def _beat(self) -> None:
        while True:
            time.sleep(HEARTBEAT_INTERVAL_S)
            try:
                self._events.send({"kind": "heartbeat", "metrics": self._metric_changes()})
            except ChannelClosed:
                return

    def _read(self) -> None:
        """The ``events`` connection: cancellations, and the answers to BLS calls."""
        try:
            while True:
                message, fds = self._events.recv()
                if self._calls.dispatch(message, fds):
                    continue
                if message["kind"] == "cancel":
                    self._cancel(message["key"])
        except ChannelClosed:
            os._exit(0)  # the server is gone: nothing to answer to

    def _cancel(self, key: int) -> None:
        with self._live_lock:
            request = self._live.get(key)
            if request is None and key > self._newest_key:  # its batch is not read yet
                self._cancelled_early.add(key)
        if request is not None:
            request.cancel()

    def _execute(self, instance: Any, message: dict[str, Any], fds: list[int]) -> None:
        """One bundle: its executions run in turn, each on its own (one failing does not
        fail the others), and one answer carries the outcomes of all."""
        slot = message["slot"]
        if fds:  # the server made the slot's arena, or grew it
            arena = Arena(fds[0], message["arena_size"])
            if slot == len(self._inputs):
                self._inputs.append(arena)
            else:
                self._inputs[slot].close()
                self._inputs[slot] = arena
        inputs_arena = self._inputs[slot]
        copy = self._decoupled  # a decoupled model may read its inputs after execute
        live = self._live if self._decoupled else None
        bundle = []
        read = inputs_arena.read
        for items in message["executions"]:
            requests = []
            for header, key, refs in items:
                inputs = []
                for ref in refs:
                    inputs.append(read(ref, copy))
                requests.append(
                    _WorkerRequest(
                        key, self._event_writer, live, *request_arguments(header, inputs)
                    )
                )
            bundle.append(requests)
        # Every request of the bundle is live from now on: a cancellation of one waiting
        # behind the execution in progress reaches it before it starts.
        cancelled = []
        with self._live_lock:
            for requests in bundle:
                for request in requests:
                    self._live[request.key] = request
                    self._newest_key = request.key
            early = self._cancelled_early
            if early:
                for requests in bundle:
                    for request in requests:
                        if request.key in early:
                            early.discard(request.key)
                            cancelled.append(request)
        for request in cancelled:
            request.cancel()
        answers = []
        outputs: list[Any] = []
        for requests in bundle:
            answers.append(self._run(instance, requests, outputs))
        done: dict[str, Any] = {"kind": "done", "answers": answers}
        done["metrics"] = self._metric_changes()  # counted before the responses are seen
        self._writer.send(done, outputs)

    def _run(
        self, instance: Any, requests: list[_WorkerRequest], outputs: list[Any]
    ) -> ExecutionAnswer:
        """One execution of a bundle: its answer; its responses' tensors are added to
        ``outputs``."""
        headers: list[ResponseHeader | None] = []
        failure = None
        try:
            responses = instance.execute(requests, ComputeTiming(clock.now_ns()))
            tensors = []
            for response in responses:
                if response is None:
                    headers.append(None)
                else:
                    headers.append(response_header(response))
                    tensors.extend(response.outputs)
            outputs.extend(tensors)
        except BaseException as exc:
            failure = _error_of(exc)
            headers = []
            if not isinstance(exc, ServerError):
                traceback.print_exc()
        reschedule = []
        live = None if self._decoupled else self._live
        for request in requests:
            reschedule.append(request.reschedule)
            if live is not None:
                live.pop(request.key, None)
        return (failure, headers, reschedule, clock.now_ns())


def _location(fields: dict[str, Any], **extra: Any) -> ModelLocation:
    """The model's location from what the server sent (``location_fields``)."""
    return ModelLocation(
        name=fields["name"],
        version=fields["version"],
        model_dir=Path(fields["model_dir"]),
        version_dir=Path(fields["version_dir"]),
        backend_config=fields["backend_config"],
        **extra,
    )


def auto_complete(asked: str, answer: str) -> None:
    """Run the model's ``auto_complete_config`` on the config in ``asked`` and write the
    completed config (or the error) to ``answer`` (``auto_complete_in_worker``)."""
    request = pickle.loads(Path(asked).read_bytes())
    location = _location(request)
    result: dict[str, Any]
    try:
        config = config_from_json(request["config"])
        PythonBackend(worker_process=True).auto_complete_config(config, location)
        result = {"config": json.dumps(config_to_json_dict(config))}
    except BaseException as exc:  # the load fails with the hook's own words
        result = {"error": _error_of(exc)}
    Path(answer).write_bytes(pickle.dumps(result))


def main(fds: list[int]) -> None:
    """``fds``: the batch connection's receiving and sending sockets, then the events
    connection's (``process_transport.channel_pair``)."""
    batches, events = (
        Channel(socket.socket(fileno=receiving), socket.socket(fileno=sending))
        for receiving, sending in (fds[:2], fds[2:])
    )
    _Worker(batches, events).run()
