"""The parent's single order of changes for ``--workers N`` (see ``peers.py``).

It listens on ``parent.sock`` in the board's folder. A worker sends it a change it got
from a client (``{"op": "change", "from", "message"}``); the sequencer, one change at a
time, sends the message to every worker that has joined, all at once, waits for every
answer and returns them (``{"ok": true, "answers": {index: answer}}``). A registration
that some worker refused is unregistered again on those that took it, so that none keeps
it. A worker that dies while a change is sent to it is left out of the answers: the one
started in its place joins with the state of the others.

A worker joins (``{"op": "join", "index", "pid"}``) under the same order: the sequencer
answers with a joined worker's state, the last load message of each model loaded by a
change (with its files, so that a ``file:`` override is loaded again as it was) and the
CUDA shared-memory registrations (with their IPC handles, which no status shows), waits
for the joiner's ``{"op": "joined"}``, and adds it to the workers that get every change.

A change that a Python model asks for from its ``execute`` (``pb_utils.load_model`` /
``unload_model``) names that model (``"caller"``): its execution waits in its worker for
the answer, so the change is refused at once while the order is held by a load or unload
of that model (which waits for the model's executions to end), and once it has waited
``change_timeout_s`` for the order, rather than wait on what waits for it.

Each connection runs on a thread of its own with blocking sockets: the parent has no event
loop, and a change may wait minutes for a model to load.

A worker that does not answer in time (a model that hangs in ``execute`` keeps its unload
waiting, one that hangs in ``initialize`` its load) is *hung*: the change's answer names it,
it gets no more changes, and once the asking worker has its answer the hung worker is
killed (``kill``), so that the supervisor starts it again and it joins with the others'
state. Loads and unloads wait ``change_timeout_s`` (``--worker-change-timeout-secs``), the
other changes, which take milliseconds, at most ``_SETTER_TIMEOUT_S``.

In POLL mode (``poll_interval_s``) the parent, not each worker, keeps the poll's clock:
every interval it sends ``{"op": "poll"}`` as one change, in order with the others, and
each worker polls its repositories once (the same folders, so the same decisions), the
loads it makes stamped with that change. A worker joining in POLL mode makes the members
poll first, under the same order, so that what it loaded at start from the folders as
they are now is what they serve; it then takes their stamps (see ``peers.py``). A poll
that a worker does not finish in time (a model hung in ``initialize``) makes it hung,
as for a load.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pytriton_core.errors import ServerError, UnavailableError
from pytriton_core.workers.board import WorkerBoard
from pytriton_core.workers.peers import error_answer, parent_socket_path, socket_path

log = logging.getLogger(__name__)

# A setter (log, trace, shared memory) answers in milliseconds; a worker that takes this
# long is stuck, and the change fails naming it.
_SETTER_TIMEOUT_S = 30.0
DEFAULT_CHANGE_TIMEOUT_S = 600.0  # a load may compile or download for minutes
# Before a hung worker is killed, for the asker (which may be that worker) to read its
# answer, and then to pass it on to its client.
_ANSWER_READ_S = 2.0
_ANSWER_PASS_S = 0.5
_REGISTRATIONS = {"register_system_shm": "system", "register_cuda_shm": "cuda"}


class Sequencer:
    """``alive(index, pid)``: whether that worker process still runs (the supervisor's
    view), to tell a worker that died during a change from one that failed it;
    ``kill(index, pid)``: stop a hung worker (the supervisor starts it again)."""

    def __init__(
        self,
        board: WorkerBoard,
        alive: Callable[[int, int], bool],
        kill: Callable[[int, int], None] | None = None,
        change_timeout_s: float = DEFAULT_CHANGE_TIMEOUT_S,
        poll_interval_s: float | None = None,
    ) -> None:
        self._board = board
        self._poll_interval_s = poll_interval_s
        self._closed = threading.Event()
        self._alive = alive
        self._kill = kill
        self._change_timeout_s = change_timeout_s
        # The order of changes: held by one change, or one join, at a time (``_holding``).
        self._turn = threading.Condition()
        self._holder: dict[str, Any] | None = None
        self._members_lock = threading.Lock()
        self._members: dict[int, int] = {}  # joined worker index -> its pid
        self._loads: dict[str, dict[str, Any]] = {}  # model name -> its last load message
        self._cuda: dict[str, dict[str, Any]] = {}  # CUDA region -> its registration
        self._changes = 0
        self._pending = 0  # changes received, not yet answered
        self._listener: socket.socket | None = None
        self._pool = ThreadPoolExecutor(thread_name_prefix="sequencer-send")

    def start(self) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(parent_socket_path(self._board)))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, name="sequencer", daemon=True).start()
        if self._poll_interval_s is not None:
            threading.Thread(target=self._poll_forever, name="sequencer-poll", daemon=True).start()

    def close(self) -> None:
        self._closed.set()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self._pool.shutdown(wait=False)

    def leave(self, index: int) -> None:
        """Worker ``index`` died: it gets no more changes (its successor joins again)."""
        with self._members_lock:
            self._members.pop(index, None)

    def pending(self) -> int:
        """Changes received and not answered yet (waiting for the order, or being sent)."""
        with self._members_lock:
            return self._pending

    def members(self) -> dict[int, int]:
        with self._members_lock:
            return dict(self._members)

    # -------------------------------------------------------- connections

    def _accept(self) -> None:
        listener = self._listener
        while listener is not None:
            try:
                connection, _ = listener.accept()
            except OSError:
                return  # closed
            threading.Thread(
                target=self._serve, args=(connection,), name="sequencer-conn", daemon=True
            ).start()

    def _serve(self, connection: socket.socket) -> None:
        hung: list[tuple[int, int]] = []
        try:
            with connection, connection.makefile("rwb") as stream:
                self._answer(connection, stream, hung)
        except OSError:  # the asking worker died meanwhile
            log.warning("a worker went away before its answer from the workers' parent")
        finally:
            for index, pid in hung:
                self._stop_hung(index, pid)

    def _stop_hung(self, index: int, pid: int) -> None:
        log.error("worker %d (pid %d) is hung: killed, to be started again", index, pid)
        if self._kill is not None:
            self._kill(index, pid)

    def _answer(self, connection: socket.socket, stream: Any, hung: list[tuple[int, int]]) -> None:
        line = stream.readline()
        if not line:
            return
        request = json.loads(line)
        try:
            if request.get("op") == "join":
                self._join(request, connection, stream, hung)
                return
            if request.get("op") == "change":
                with self._members_lock:
                    self._pending += 1
                try:
                    answer = self.change(request["message"], str(request.get("caller", "")))
                    hung.extend((int(i), int(pid)) for i, pid in answer.pop("hung", []))
                finally:
                    with self._members_lock:
                        self._pending -= 1
            else:
                answer = {"ok": False, "error": f"unknown operation {request.get('op')!r}"}
        except OSError:
            raise
        except ServerError as exc:  # refused (see ``_holding``): the asking model gets it
            log.warning("%s", exc.message)
            answer = error_answer(exc)
        except Exception as exc:  # answered: the worker reports it to its client
            log.exception("a change failed in the workers' parent")
            answer = error_answer(exc)
        _write(stream, answer)
        if hung:  # the asker may be one of them: it reads its answer before the kill
            connection.settimeout(_ANSWER_READ_S)
            with contextlib.suppress(OSError):
                stream.readline()
            time.sleep(_ANSWER_PASS_S)

    # ------------------------------------------------------------ polling

    def _poll_forever(self) -> None:
        interval = self._poll_interval_s
        assert interval is not None
        while not self._closed.wait(interval):
            try:
                self.poll()
            except Exception:  # the next interval polls again
                log.exception("polling the model repositories of the workers failed")

    def poll(self) -> dict[str, Any]:
        """Every joined worker polls its repositories once, as one change; a worker that
        did not finish in time is killed (no worker waits for this answer)."""
        answer = self.change({"op": "poll"})
        for index, pid in answer.pop("hung", []):
            self._stop_hung(index, pid)
        for index, reply in sorted(answer["answers"].items()):
            if not reply.get("ok"):
                log.error("worker %s failed to poll the repositories: %s", index, reply["error"])
        return answer

    # ------------------------------------------------------------ changes

    @contextlib.contextmanager
    def _holding(self, holder: dict[str, Any], caller: str = "") -> Iterator[None]:
        """Hold the order of changes for ``holder`` (a change, or a join), once no other
        change holds it.

        A change that a model asks for from its ``execute`` (``caller``: that model) keeps
        that execution waiting in its worker, so it must not wait on a change that waits
        for it: it is refused at once while the holder is a load or unload of that very
        model (which lets the model's executions end first, this one included), and once
        it has waited ``change_timeout_s`` for the order (a wait through other models'
        calls that is not seen here). Either way the model gets an error, not a hang."""
        deadline = time.monotonic() + self._change_timeout_s
        with self._turn:
            while self._holder is not None:
                if caller:
                    _refuse_nested(holder, caller, self._holder, deadline - time.monotonic())
                    self._turn.wait(max(0.0, deadline - time.monotonic()))
                else:
                    self._turn.wait()
            self._holder = holder
        try:
            yield
        finally:
            with self._turn:
                self._holder = None
                self._turn.notify_all()

    def change(self, message: dict[str, Any], caller: str = "") -> dict[str, Any]:
        """Apply ``message`` on every joined worker, after every change before it
        (``caller``: the model whose ``execute`` asks, see ``_holding``). The answer's
        ``hung`` lists (index, pid) of the workers that did not answer in time: they have
        left, and are to be killed."""
        with self._holding(message, caller):
            self._changes += 1
            message = {**message, "stamp": self._changes}
            hung: list[tuple[int, int]] = []
            answers = self._send_all(message, hung=hung)
            method = message.get("method")
            if method in _REGISTRATIONS and any(not a.get("ok") for a in answers.values()):
                undo = {
                    "op": "call",
                    "method": "unregister_shm",
                    "args": [_REGISTRATIONS[method], message["args"][0]],
                }
                took = [i for i, a in answers.items() if a.get("ok")]
                self._send_all(undo, took, hung)
            if all(a.get("ok") for a in answers.values()):
                self._remember(message)
            answer: dict[str, Any] = {
                "ok": True,
                "answers": {str(i): a for i, a in answers.items()},
            }
            if hung:
                answer["hung"] = hung
            return answer

    def _remember(self, message: dict[str, Any]) -> None:
        """What a joining worker cannot ask the others for: each model's last load (its
        files) and the CUDA registrations (a region's status has no IPC handle)."""
        if message["op"] == "load":
            self._loads[message["name"]] = message
        elif message["op"] == "unload":
            self._loads.pop(message["name"], None)
        elif message.get("method") == "register_cuda_shm":
            self._cuda[message["args"][0]] = message
        elif message.get("method") == "unregister_shm" and message["args"][0] == "cuda":
            region = message["args"][1]
            if region is None:
                self._cuda.clear()
            else:
                self._cuda.pop(region, None)

    def _send_all(
        self,
        message: dict[str, Any],
        only: list[int] | None = None,
        hung: list[tuple[int, int]] | None = None,
    ) -> dict[int, dict[str, Any]]:
        members = self.members()
        targets = {i: pid for i, pid in members.items() if only is None or i in only}
        futures = {i: self._pool.submit(self._send, i, message, pid) for i, pid in targets.items()}
        answers = {}
        for index, future in futures.items():
            answer = future.result()
            if answer.get("lost") and not self._alive(index, targets[index]):
                self.leave(index)  # died during the change: its successor joins again
                continue
            if answer.pop("hung", False):
                self.leave(index)  # no more changes: it is killed and started again
                if hung is not None:
                    hung.append((index, targets[index]))
            answers[index] = answer
        return answers

    def _timeout(self, message: dict[str, Any]) -> float:
        if message["op"] in ("load", "unload", "poll"):
            return self._change_timeout_s
        return min(_SETTER_TIMEOUT_S, self._change_timeout_s)

    def _send(self, index: int, message: dict[str, Any], pid: int = 0) -> dict[str, Any]:
        timeout = self._timeout(message)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(timeout)
                sock.connect(str(socket_path(self._board, index)))
                with sock.makefile("rwb") as stream:
                    _write(stream, message)
                    line = stream.readline()
        except TimeoutError:
            what = message.get("method", message["op"])
            return {
                "ok": False,
                "error": f"no answer to '{what}' within {timeout:g} s from worker {index} "
                f"(pid {pid}): it is hung, and is killed and started again",
                "hung": True,
            }
        except OSError as exc:
            return {"ok": False, "error": f"no answer ({exc})", "lost": True}
        if not line:
            return {"ok": False, "error": "no answer (the worker closed)", "lost": True}
        answer: dict[str, Any] = json.loads(line)
        return answer

    # ------------------------------------------------------------ joining

    def _join(
        self,
        request: dict[str, Any],
        connection: socket.socket,
        stream: Any,
        hung: list[tuple[int, int]],
    ) -> None:
        index, pid = int(request["index"]), int(request["pid"])
        with self._holding({"op": "join", "index": index}):
            if self._poll_interval_s is not None:
                # The joiner loaded from the folders as they are now: the members poll
                # first, so that they serve the same.
                self._changes += 1
                self._send_all({"op": "poll", "stamp": self._changes}, hung=hung)
            state = None
            for member, member_pid in sorted(self.members().items()):
                if member == index:
                    continue
                answer = self._send(member, {"op": "state"}, member_pid)
                if answer.pop("hung", False):
                    self.leave(member)
                    hung.append((member, member_pid))
                if answer.get("ok"):
                    state = answer["result"]
                    break
            if state is not None:
                state = {**state, "cuda_regions": list(self._cuda.values())}
            _write(stream, {"ok": True, "state": state, "loads": self._loads})
            # The joiner loads what the others serve: as long as that many loads may take.
            loads = 1 + (0 if state is None else len(state.get("models", {})))
            join_timeout_s = self._change_timeout_s * loads
            connection.settimeout(join_timeout_s)
            try:
                joined = stream.readline()
            except TimeoutError:
                log.error("worker %d did not join within %g s", index, join_timeout_s)
                hung.append((index, pid))
                return
            if not joined:
                log.warning("worker %d went away while joining", index)
                return
            with self._members_lock:
                self._members[index] = pid
            _write(stream, {"ok": True})


def _refuse_nested(
    change: dict[str, Any], caller: str, holder: dict[str, Any], left_s: float
) -> None:
    """Raise why ``change``, asked by model ``caller``'s ``execute``, cannot wait for
    ``holder`` any longer (see ``Sequencer._holding``); ``left_s``: of its wait."""
    what = f"'{change.get('op')}' of model '{change.get('name')}' from the execute of '{caller}'"
    held = f"'{holder.get('op')}'" + (f" of '{holder['name']}'" if "name" in holder else "")
    if holder.get("op") in ("load", "unload") and holder.get("name") == caller:
        raise UnavailableError(
            f"{what} refused: the workers are making the {held}, which waits for the "
            f"executions of '{caller}' to end, this one included"
        )
    if left_s <= 0:
        raise UnavailableError(
            f"{what} refused: the order of changes stayed held (now by the {held}) for the "
            "whole --worker-change-timeout-secs"
        )


def _write(stream: Any, message: dict[str, Any]) -> None:
    stream.write(json.dumps(message).encode() + b"\n")
    stream.flush()
