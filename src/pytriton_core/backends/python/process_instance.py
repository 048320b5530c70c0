"""Process mode: each instance of a Python model runs in a worker process of its own.

Asked for with the model config parameter ``EXECUTION_MODE: "process"`` (in-process stays
the default), or implied by ``EXECUTION_ENV_PATH``. The server side of one instance:

* spawns the worker (``process_worker``) with the model's own interpreter when it has an
  environment (``process_env``), hands it the model's config and the input arena;
* per batch, writes the inputs into an arena, sends their offsets and waits for the
  worker's answer; decoupled responses stream back as they are sent. Batches started from
  the loop may be two in flight (``PIPELINE_DEPTH``): while the worker executes one, the
  next waits in its socket, with its inputs in the other of two input arenas;
* a reader thread notices the worker's death at once (its socket closes): the in-flight
  requests answer an error naming the model, the model is not ready, and the worker is
  started again with backoff. A watchdog kills a worker whose execute runs past
  ``PROCESS_EXECUTE_TIMEOUT_SECONDS`` or whose memory passes
  ``PROCESS_MEMORY_LIMIT_BYTES``, which then takes the same path.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from pytriton_core import clock, loop_polling
from pytriton_core.backends.base import (
    BackendInstance,
    BackendModel,
    Finished,
    InstanceSpec,
    LoopExecution,
    ModelLocation,
)
from pytriton_core.backends.custom_metrics import (
    MetricFamilySnapshot,
    MetricKindConflict,
    MetricRegistry,
)
from pytriton_core.backends.python.bls import Caller, InstanceWaits
from pytriton_core.backends.python.process_calls import ServedCalls
from pytriton_core.backends.python.process_transport import (
    ALIGN,
    Arena,
    BatchItem,
    ChannelClosed,
    ExecutionAnswer,
    channel_pair,
    read_responses,
    request_header,
    take_responses,
    take_tensors,
)
from pytriton_core.config import ModelSpec
from pytriton_core.errors import InternalError, ModelConfigError, ServerError, UnavailableError
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.statistics import ComputeTiming

log = logging.getLogger(__name__)

MODE_PARAMETER = "EXECUTION_MODE"
TIMEOUT_PARAMETER = "PROCESS_EXECUTE_TIMEOUT_SECONDS"
MEMORY_PARAMETER = "PROCESS_MEMORY_LIMIT_BYTES"
HEARTBEAT_PARAMETER = "PROCESS_HEARTBEAT_TIMEOUT_SECONDS"
POLL_PARAMETER = "PROCESS_POLL_MICROSECONDS"
# How long a worker that has answered polls its socket for the next bundle before it
# sleeps (yielding its core between looks): a lone client's next request, some 100-200 µs
# after the answer on this machine, then finds it awake. Measured in docs/benchmarks.md,
# "A worker that polls for its next bundle".
DEFAULT_POLL_US = 200.0
_DEFAULT_HEARTBEAT_TIMEOUT_S = 1.0
_START_TIMEOUT_S = 120.0
_WATCH_INTERVAL_S = 0.05
_MAX_BACKOFF_S = 5.0
_DEATH_REPORT_S = 2.0  # how long the loop waits for a dead worker's cause
# Bundles started from the loop that may be in flight on one instance: one executing, the
# next waiting in the worker's socket (docs/architecture.md, "Where executions run"); one
# input arena each (``_place``).
PIPELINE_DEPTH = 2
# Executions the loop may hand over in one bundle (one message, one answer): enough for
# the requests a busy loop reads in a turn; each is short (the loop bundles only those),
# so the first one's response waits at most a few of them.
BUNDLE_LIMIT = 8

_BOOTSTRAP = (
    "import sys, json; sys.path.extend(json.loads(sys.argv[2])); "
    "from pytriton_core.backends.python.process_worker import main; "
    "main(json.loads(sys.argv[1]))"
)


_AUTO_COMPLETE_BOOTSTRAP = (
    "import sys, json; sys.path.extend(json.loads(sys.argv[3])); "
    "from pytriton_core.backends.python.process_worker import auto_complete; "
    "auto_complete(sys.argv[1], sys.argv[2])"
)


def location_fields(location: ModelLocation) -> dict[str, Any]:
    """What a worker process needs of the model's location (its ``_location``)."""
    return {
        "name": location.name,
        "version": location.version,
        "model_dir": str(location.model_dir),
        "version_dir": str(location.version_dir),
        "backend_config": dict(location.backend_config),
    }


def auto_complete_in_worker(interpreter: str, config_json: str, location: ModelLocation) -> str:
    """The model's ``auto_complete_config`` run in a process of its own (with the model's
    interpreter): the completed config's JSON, or the hook's error raised here."""
    request = {"config": config_json, **location_fields(location)}
    with tempfile.TemporaryDirectory(prefix="pytriton-auto-complete-") as folder:
        asked, answer = Path(folder, "request.pickle"), Path(folder, "answer.pickle")
        asked.write_bytes(pickle.dumps(request))
        paths = json.dumps([p for p in sys.path if p])
        try:
            process = subprocess.run(
                [interpreter, "-c", _AUTO_COMPLETE_BOOTSTRAP, str(asked), str(answer), paths],
                env={**os.environ, "PYTHONNOUSERSITE": "1"},
                timeout=_START_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise InternalError(
                f"model '{location.name}': auto_complete_config did not finish within "
                f"{_START_TIMEOUT_S:g} s"
            ) from None
        if not answer.is_file():
            raise InternalError(
                f"model '{location.name}': the process running its auto_complete_config "
                f"exited ({_exit_text(process.returncode)})"
            )
        result = pickle.loads(answer.read_bytes())
    if "error" in result:
        raise ServerError.from_code(*result["error"])
    completed: str = result["config"]
    return completed


def process_mode(spec: ModelSpec) -> bool:
    """Whether the model asked for process mode; a value other than the two fails the load."""
    value = spec.parameters.get(MODE_PARAMETER, "")
    if value in ("", "in_process"):
        return "EXECUTION_ENV_PATH" in spec.parameters
    if value == "process":
        return True
    raise ModelConfigError(
        f"model '{spec.name}': parameter {MODE_PARAMETER} must be 'process' or 'in_process', "
        f"not '{value}'"
    )


def _number(spec: ModelSpec, key: str) -> float:
    value = spec.parameters.get(key, "")
    if not value:
        return 0.0
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if number < 0:
        raise ModelConfigError(f"model '{spec.name}': parameter {key} must be a number >= 0")
    return number


class ProcessModel(BackendModel):
    def __init__(
        self,
        spec: ModelSpec,
        model_config: str,
        location: ModelLocation,
        interpreter: str,
        waits: InstanceWaits,
        *,
        calls_server: bool = False,
    ) -> None:
        """``waits``: the server's record of Python-model instances waiting on BLS.
        ``calls_server``: the model's file names a call of the server (BLS)."""
        self.spec = spec
        self.waits = waits
        self.key = (location.name, location.version)
        self.server = location.server
        self.decoupled = spec.decoupled
        self.state_outputs = spec.state_outputs
        self._model_config = model_config
        self._location = location
        self.interpreter = interpreter
        self.execute_timeout_s = _number(spec, TIMEOUT_PARAMETER)
        self.memory_limit = int(_number(spec, MEMORY_PARAMETER))
        heartbeat = spec.parameters.get(HEARTBEAT_PARAMETER)
        self.heartbeat_timeout_s = (
            _DEFAULT_HEARTBEAT_TIMEOUT_S
            if heartbeat is None
            else _number(spec, HEARTBEAT_PARAMETER)
        )
        poll = spec.parameters.get(POLL_PARAMETER)
        self.poll_us = DEFAULT_POLL_US if poll is None else _number(spec, POLL_PARAMETER)
        self.custom_metrics = location.custom_metrics
        # Batches start and finish on the server's loop (``ProcessInstance.begin``); a
        # decoupled model's batches stay on the instance's thread.
        self.loop_dispatch = not spec.decoupled
        # A batch waiting behind one that calls the server (BLS) could be the very request
        # that call waits for, through a model calling back: such models keep one batch in
        # flight, alone in its bundle (also from the first call on, ``server_called``, when
        # the file hid it).
        self.loop_depth = 1 if calls_server else PIPELINE_DEPTH
        self.loop_bundle = 1 if calls_server else BUNDLE_LIMIT
        # Replaced whole under the lock, never changed in place: ``healthy`` (asked on
        # each request) reads it without taking the lock.
        self._instances: tuple[ProcessInstance, ...] = ()
        self._lock = threading.Lock()

    def healthy(self) -> bool:
        # Asked on each request: a plain loop, no generator.
        for instance in self._instances:
            if not instance.up:
                return False
        return True

    def server_called(self) -> None:
        """A worker called the server: one batch in flight per instance from now on."""
        self.loop_depth = 1
        self.loop_bundle = 1

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        init = {
            "config": self._model_config,
            **location_fields(self._location),
            "instance": {"name": spec.name, "kind": spec.kind, "device_id": spec.device_id},
            "poll_us": self.poll_us,
        }
        instance = ProcessInstance(self, spec, init)
        with self._lock:
            self._instances = (*self._instances, instance)
        return instance

    def forget(self, instance: ProcessInstance) -> None:
        with self._lock:
            self._instances = tuple(i for i in self._instances if i is not instance)


class _Worker:
    """One worker process and what is in flight on it.

    Two connections: ``channel`` carries batches and their answers only, between the
    instance's thread and the worker's main thread, which each wait on it directly (no
    other thread on a request's path); ``events`` carries the rest (responses sent from
    model code, BLS, cancellations, heartbeats), read by a thread on each side, which also
    sees the worker's death at once. Each direction of each connection has its own arena
    (the batches' inputs two: one per batch in flight, ``_place``).
    """

    def __init__(self, model: ProcessModel, name: str, init: Mapping[str, Any]) -> None:
        self.name = name
        self.channel, theirs = channel_pair()
        self.events, their_events = channel_pair()
        # The batches' inputs: the arena of each slot (``_place``). Two batches in flight
        # use the two slots, so the next one's inputs never overwrite those the worker is
        # reading; the second arena is made when first needed.
        self.inputs = [Arena.create(0)]
        self.calls = ServedCalls(self.events, model.server, model.waits, Caller(model.key, name))
        paths = [p for p in sys.path if p]
        fds = [sock.fileno() for sock in (*theirs, *their_events)]
        self.process = subprocess.Popen(
            [model.interpreter, "-c", _BOOTSTRAP, json.dumps(fds), json.dumps(paths)],
            pass_fds=fds,
            env={**os.environ, "PYTHONNOUSERSITE": "1"},
        )
        for sock in (*theirs, *their_events):
            sock.close()
        self.outputs: Arena | None = None  # the worker's answers to batches
        self.event_outputs: Arena | None = None  # the tensors of its other messages
        self.lock = threading.Lock()
        self.in_flight: dict[int, InferenceRequest] = {}
        self.death_text = ""  # what the requests of a dead worker are answered
        self.executing_since = 0.0
        self.death: str | None = None  # why it was killed, when the server killed it
        self.last_heard = clock.now_s()
        self.metrics = _MetricsMirror(model.custom_metrics, name)
        self.dead = threading.Event()
        # The loop that reads ``channel`` once a batch was started there (``begin``): it
        # then owns the socket, and closes it when the worker is gone.
        self.watched: asyncio.AbstractEventLoop | None = None
        # The bundles started on the loop and not answered yet, oldest (executing) first.
        self.pending: deque[_Begun] = deque()
        answers = self.calls.writer.arena
        self.channel.send(
            {**init, "arena_size": self.inputs[0].size, "answers_size": answers.size},
            [self.inputs[0].fd, answers.fd],
        )

    def handshake(self) -> None:
        message, fds = _recv_with_timeout(self, _START_TIMEOUT_S)
        if message["kind"] == "failed":
            code, text = message["error"]
            raise ServerError.from_code(code, text)
        self.outputs = Arena(fds[0], message["arena_size"])
        self.event_outputs = Arena(fds[1], message["events_arena_size"])
        self.last_heard = clock.now_s()  # heartbeats start now

    def kill(self, reason: str) -> None:
        self.death = self.death or reason
        try:
            self.process.send_signal(signal.SIGKILL)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        self.calls.close()
        with self.lock:
            if self.watched is None:  # else the loop closes it once it has read the end
                self.channel.close()
        self.events.close()
        for arena in (*self.inputs, self.outputs, self.event_outputs):
            if arena is not None:
                arena.close()


def _recv_with_timeout(worker: _Worker, timeout_s: float) -> tuple[Any, list[int]]:
    timer = threading.Timer(timeout_s, worker.kill, ("did not start in time",))
    timer.start()
    try:
        return worker.channel.recv()
    except ChannelClosed:
        code = worker.process.wait()
        raise InternalError(
            f"the worker process of model instance '{worker.name}' exited "
            f"({_exit_text(code)}) while loading{_reason(worker)}"
        ) from None
    finally:
        timer.cancel()


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _reason(worker: _Worker) -> str:
    return f": {worker.death}" if worker.death else ""


class ProcessInstance(BackendInstance):
    def __init__(self, model: ProcessModel, spec: InstanceSpec, init: Mapping[str, Any]) -> None:
        self._model = model
        self._spec = spec
        self._init = init
        self._output_names = list(model.spec.outputs)
        self._closed = False
        self._next_key = 0
        self.up = False
        model.waits.register(model.key, spec.name)
        self._worker = self._start_worker()  # the load fails if the first start fails
        self._watchdog = threading.Thread(
            target=self._watch, name=f"watchdog-{spec.name}", daemon=True
        )
        self._watchdog.start()

    # --------------------------------------------------------------- lifecycle

    def _start_worker(self) -> _Worker:
        worker = _Worker(self._model, self._spec.name, self._init)
        try:
            worker.handshake()
        except BaseException:
            worker.kill("failed to start")
            worker.process.wait()
            worker.close()
            raise
        threading.Thread(
            target=self._read, args=(worker,), name=f"reader-{self._spec.name}", daemon=True
        ).start()
        self.up = True
        return worker

    def _restart(self) -> None:
        """Start workers with backoff until one is up (or the instance is finalized)."""
        backoff = 0.1
        while not self._closed:
            try:
                self._worker = self._start_worker()
                log.warning("model instance '%s': worker process restarted", self._spec.name)
                return
            except Exception as exc:
                log.error("model instance '%s': restart failed: %s", self._spec.name, exc)
            time.sleep(backoff)
            backoff = min(backoff * 2, _MAX_BACKOFF_S)

    def finalize(self) -> None:
        self._closed = True
        worker = self._worker
        if self.up:
            try:
                worker.channel.send({"kind": "stop"})
                worker.process.wait(10)
            except (ChannelClosed, subprocess.TimeoutExpired):
                worker.kill("did not stop")
        else:
            worker.kill("finalized")
        worker.dead.wait(10)
        self._model.forget(self)
        self._model.waits.unregister(self._model.key, self._spec.name)

    def _watch(self) -> None:
        model = self._model
        while not self._closed:
            time.sleep(_WATCH_INTERVAL_S)
            worker = self._worker
            if not self.up:
                continue
            since = worker.executing_since
            if (
                model.execute_timeout_s
                and since
                and clock.now_s() - since > (model.execute_timeout_s)
            ):
                worker.kill(f"execute ran past {TIMEOUT_PARAMETER}={model.execute_timeout_s:g}")
            if (
                model.heartbeat_timeout_s
                and not since
                and clock.now_s() - worker.last_heard > model.heartbeat_timeout_s
            ):
                worker.kill(
                    f"it stopped answering (no heartbeat for {HEARTBEAT_PARAMETER}="
                    f"{model.heartbeat_timeout_s:g} s while idle)"
                )
            if model.memory_limit and _resident_bytes(worker.process.pid) > model.memory_limit:
                worker.kill(f"its memory passed {MEMORY_PARAMETER}={model.memory_limit}")

    # ---------------------------------------------------------------- messages

    def _read(self, worker: _Worker) -> None:
        """The worker's ``events`` connection, until it closes (the worker died)."""
        try:
            while True:
                message, fds = worker.events.recv()
                assert worker.event_outputs is not None  # set by the handshake
                if fds:
                    worker.event_outputs = _regrown(worker.event_outputs, fds[0])
                worker.last_heard = clock.now_s()
                kind = message["kind"]
                if "metrics" in message:
                    worker.metrics.apply(message["metrics"])
                if kind == "heartbeat":
                    continue
                if kind == "send":
                    responses = take_responses(worker.event_outputs, [message["response"]], message)
                    self._stream(worker, message, responses)
                else:
                    self._model.server_called()
                    tensors = (
                        take_tensors(worker.event_outputs, message) if kind == "bls_submit" else []
                    )
                    worker.calls.handle(message, tensors)
        except ChannelClosed:
            pass
        self._died(worker)

    def _stream(
        self, worker: _Worker, message: dict[str, Any], responses: list[InferenceResponse | None]
    ) -> None:
        with worker.lock:
            request = worker.in_flight.get(message["key"])
            if request is not None and message["final"]:
                del worker.in_flight[message["key"]]
        if request is not None:
            request.send_threadsafe(responses[0], message["final"])

    def _died(self, worker: _Worker) -> None:
        code = worker.process.wait()
        self.up = False
        text = (
            f"Failed to process the request(s) for model '{self._spec.name}', message: the "
            f"model's worker process died ({_exit_text(code)}){_reason(worker)}; it is being "
            "restarted"
        )
        if not self._closed:
            log.error("%s", text)
        with worker.lock:
            stranded = list(worker.in_flight.values()) if self._model.decoupled else []
            worker.in_flight.clear()
        for request in stranded:
            request.send_threadsafe(InferenceResponse.failed(InternalError(text)), True)
        worker.death_text = text
        worker.dead.set()
        worker.close()
        if not self._closed:
            threading.Thread(
                target=self._restart, name=f"restart-{self._spec.name}", daemon=True
            ).start()

    # ---------------------------------------------------------------- execute

    def execute(
        self, requests: Sequence[InferenceRequest], timing: ComputeTiming
    ) -> Sequence[InferenceResponse | None]:
        """On the instance's thread (decoupled and rate-limited models): one batch, sent
        as a bundle of one, and its answer waited for."""
        worker = self._worker
        if not self.up:
            raise UnavailableError(
                f"model instance '{self._spec.name}': its worker process is restarting"
            )
        (batch,), fds, self._next_key = _place(worker, [requests], 0, self._next_key)
        if self._model.decoupled:
            with worker.lock:
                for item, request in zip(batch, requests, strict=True):
                    worker.in_flight[item[1]] = request
        for item, request in zip(batch, requests, strict=True):
            if request.loop is not None:  # cancellation hooks are kept on the loop
                hook = partial(_send_cancel, worker.events.send, item[1])
                request.loop.call_soon_threadsafe(request.on_cancel, hook)
        worker.executing_since = clock.now_s()
        timing.mark_input_done()  # the inputs are placed; the worker's time is after this
        try:
            worker.channel.send(_execute_message(worker, [batch], 0), fds)
            done, fds = worker.channel.recv()
        except ChannelClosed:
            # The reader thread finds out why, answers the streams and restarts it.
            worker.dead.wait(_START_TIMEOUT_S)
            raise InternalError(worker.death_text or "the model's worker process died") from None
        finally:
            worker.executing_since = 0.0
        (outcome,) = _answered(worker, [(requests, timing)], done, fds)
        if isinstance(outcome, ServerError):
            raise outcome
        return outcome

    def begin(self, executions: Sequence[LoopExecution], alone: bool = False) -> None:
        """Send the bundle from the loop, in one message; the loop reads the worker's
        answer to all of it when it comes (``_on_answer``), so neither waits on the other.
        With a bundle in flight already (``loop_depth``), this one waits in the worker's
        socket, its inputs in the other slot's arena, and the worker starts it once it has
        answered the one before."""
        worker = self._worker
        if not self.up:
            raise UnavailableError(
                f"model instance '{self._spec.name}': its worker process is restarting"
            )
        if worker.watched is None:
            loop = asyncio.get_running_loop()
            with worker.lock:
                worker.watched = loop
            loop.add_reader(worker.channel.fileno(), self._on_answer, worker)
        pending = worker.pending
        slot = 1 - pending[0][1] if pending else 0  # the one the bundle in flight leaves
        batches, fds, self._next_key = _place(
            worker, [execution[0] for execution in executions], slot, self._next_key
        )
        send_event = worker.events.send
        placed_ns = clock.now_ns()  # the inputs are placed; the worker's times follow
        # Plain zips (of lists ``_place`` made one for one): ``strict=`` is a keyword call.
        for batch, (requests, timing, _finished) in zip(batches, executions):  # noqa: B905
            timing.input_end_ns = placed_ns
            for item, request in zip(batch, requests):  # noqa: B905
                request.on_cancel(partial(_send_cancel, send_event, item[1]))
        if not pending:  # else it starts when the one before is answered (``_on_answer``)
            worker.executing_since = clock.now_s()
        pending.append((executions, slot))
        message = {
            "kind": "execute",
            "executions": batches,
            "slot": slot,
            "arena_size": worker.inputs[slot].size,
            "alone": alone,
        }  # as ``_execute_message``, without the call
        try:
            worker.channel.send(message, fds)
        except ChannelClosed:
            return  # the loop reads the connection's end and fails the bundle there
        loop_polling.poll_for_worker(worker.watched)  # for the answer (loop_polling.py)
        if len(pending) == 1:
            # The worker was idle: woken on this CPU, it mostly runs the bundle and answers
            # before the send returns. Take the answer now, not after the loop's next poll
            # (as the loop would: what goes wrong is logged, the bundle is not failed twice).
            try:
                if worker.channel.arrived():
                    self._on_answer(worker)
            except Exception:
                log.exception("model instance '%s': taking an answer failed", self._spec.name)

    def _on_answer(self, worker: _Worker) -> None:
        """On the loop: the worker's answers to the bundles ``begin`` sent, or its end.
        Two answers may come in one read: the second is taken before the loop waits on the
        socket again, which would not wake it for that one.

        Each answer is to the oldest bundle in flight; the next one, if any, is executing
        from then on (its execute timeout counts from there)."""
        channel = worker.channel
        pending = worker.pending
        while True:
            try:
                done, fds = channel.recv()
            except ChannelClosed:
                self._unwatch(worker)
                return
            begun = pending.popleft() if pending else None
            worker.executing_since = clock.now_s() if pending else 0.0
            if begun is not None:
                executions = begun[0]
                timings = [(requests, timing) for requests, timing, _finished in executions]
                outcomes = _answered(worker, timings, done, fds)
                for execution, outcome in zip(executions, outcomes):  # noqa: B905 (one each)
                    execution[2](outcome)
            if not channel.buffered():
                loop_polling.poll_for_worker(worker.watched)  # for the next request
                return

    def _unwatch(self, worker: _Worker) -> None:
        """The worker's batch connection ended: stop reading it, fail the bundles in flight
        with the reason its death is reported with."""
        assert worker.watched is not None
        worker.watched.remove_reader(worker.channel.fileno())
        worker.channel.close()
        stranded = [execution[2] for begun in worker.pending for execution in begun[0]]
        worker.pending.clear()
        worker.executing_since = 0.0
        if stranded:
            # The events reader sees the same end at once and names the cause; the loop
            # looks again shortly rather than wait for it (other models keep being served).
            _fail_once_reported(worker, stranded, clock.now_s() + _DEATH_REPORT_S)


# A bundle started on the loop (``begin``) and not answered yet: its executions and its
# slot (which input arena holds its inputs). A plain tuple: one is made per bundle.
_Begun = tuple[Sequence[LoopExecution], int]


def _place(
    worker: _Worker, batches: Sequence[Sequence[InferenceRequest]], slot: int, key: int
) -> tuple[list[list[BatchItem]], list[int], int]:
    """Write a bundle's inputs into the arena of ``slot`` (made, or grown, first if they do
    not fit); per batch, its items: each request's header, key (the next after ``key``)
    and input tensors' places; the descriptors to send with it; the last key given. The
    bundle that used the slot last has been answered: its worker is done with its inputs.
    (A function, typed in process_instance.pxd: every bundle comes here.)"""
    # Two plain loops: the tensors' places, then, once the arena is large enough, their
    # copies.
    placed = []
    end = 0
    for requests in batches:
        for request in requests:
            for tensor in request.inputs.values():
                data, nbytes = Arena.encoded(tensor)
                placed.append((end, tensor, data, nbytes))
                end = (end + nbytes + ALIGN - 1) // ALIGN * ALIGN  # ``aligned``, inline
    fds: list[int] = []
    arenas = worker.inputs
    if slot == len(arenas):
        arenas.append(Arena.create(end))
        fds = [arenas[slot].fd]
    elif end > arenas[slot].size:
        grown = Arena.create(max(end, arenas[slot].size * 2))
        arenas[slot].close()
        arenas[slot] = grown
        fds = [grown.fd]
    arena = arenas[slot]
    items = []
    position = 0
    for requests in batches:
        batch = []
        for request in requests:
            refs = []
            for _name in request.inputs:  # its tensors' places, in the first loop's order
                offset, tensor, data, nbytes = placed[position]
                refs.append(arena.write(offset, tensor, data, nbytes))
                position += 1
            key += 1
            batch.append((request_header(request), key, refs))
        items.append(batch)
    return items, fds, key


def _execute_message(worker: _Worker, batches: list[list[BatchItem]], slot: int) -> dict[str, Any]:
    return {
        "kind": "execute",
        "executions": batches,
        "slot": slot,
        "arena_size": worker.inputs[slot].size,
        # From the instance's thread (a batching scheduler, a decoupled model), which does
        # not know what else is in flight: the worker polls after every such bundle.
        "alone": True,
    }


def _fail_once_reported(worker: _Worker, stranded: list[Finished], deadline: float) -> None:
    """On the loop: fail a dead worker's batches (oldest first) with the cause its death
    is reported with, once the events reader has it (or ``deadline`` has passed)."""
    if not worker.dead.is_set() and clock.now_s() < deadline:
        assert worker.watched is not None
        worker.watched.call_later(
            _WATCH_INTERVAL_S, _fail_once_reported, worker, stranded, deadline
        )
        return
    error = InternalError(worker.death_text or "the model's worker process died")
    for finished in stranded:
        finished(error)


def _answered(
    worker: _Worker,
    executions: Sequence[tuple[Sequence[InferenceRequest], ComputeTiming]],
    done: dict[str, Any],
    fds: list[int],
) -> list[Sequence[InferenceResponse | None] | ServerError]:
    """The outcome of each execution of a bundle from the worker's answer to it (its
    responses, or the failure it reports), their tensors copied out of the arena before
    any is delivered; sets each execution's end of infer to when it ended in the worker."""
    assert worker.outputs is not None  # set by the handshake
    if fds:
        worker.outputs = _regrown(worker.outputs, fds[0])
    worker.last_heard = clock.now_s()
    if done["metrics"]:
        worker.metrics.apply(done["metrics"])
    arena = worker.outputs
    refs = done["outputs"]
    position = 0
    outcomes: list[Sequence[InferenceResponse | None] | ServerError] = []
    answers: list[ExecutionAnswer] = done["answers"]
    for (requests, timing), (failure, headers, reschedule, end_ns) in zip(
        executions, answers, strict=True
    ):
        # The worker's clock is this one (CLOCK_MONOTONIC, system-wide), and it ended the
        # execution after the inputs were placed (``input_end_ns``).
        timing.infer_end_ns = end_ns
        if failure is not None:
            outcomes.append(ServerError.from_code(*failure))
            continue
        built, position = read_responses(arena, headers, refs, position)
        for request, again in zip(requests, reschedule, strict=True):
            request.reschedule = again
        outcomes.append(built)
    arena.add_taken(done["span"])
    return outcomes


def _regrown(arena: Arena, fd: int) -> Arena:
    """The worker's new, larger arena in place of ``arena``."""
    arena.close()
    return Arena(fd, max(os.fstat(fd).st_size, 1))


class _MetricsMirror:
    """Brings one worker's custom metrics into the server's registry (``/metrics``)."""

    def __init__(self, registry: MetricRegistry | None, instance: str) -> None:
        self._registry = registry
        self._instance = instance
        self._lock = threading.Lock()  # batches' answers and heartbeats come on two threads
        self._seen: dict[str, MetricFamilySnapshot] = {}  # what was merged, per family

    def apply(self, families: list[MetricFamilySnapshot]) -> None:
        if self._registry is None or not families:
            return
        with self._lock:
            self._merge(families)

    def _merge(self, families: list[MetricFamilySnapshot]) -> None:
        assert self._registry is not None
        for family in families:
            try:
                self._registry.merge(family, self._seen.get(family.name))
            except MetricKindConflict as exc:
                if family.name not in self._seen:
                    log.warning("model instance '%s': %s", self._instance, exc)
            self._seen[family.name] = family


def _send_cancel(send_event: Callable[[dict[str, Any]], None], key: int) -> None:
    """A request's cancel hook (bound to it with ``partial``: no closure per request)."""
    try:
        send_event({"kind": "cancel", "key": key})
    except ChannelClosed:
        pass


def _resident_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
