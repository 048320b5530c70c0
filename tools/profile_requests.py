"""Per-request cost of one infer path in a running server: CPU µs, instructions, Python calls.

    .venv/bin/python tools/profile_requests.py --path http-binary --requests 4000
    .venv/bin/python tools/profile_requests.py --path grpc --cprofile --top 30
    .venv/bin/python tools/profile_requests.py --path http-binary --model pipe_bls --cprofile
    .venv/bin/python tools/profile_requests.py --path http-binary --model identity_process
    valgrind --tool=callgrind --instr-atstart=no .venv/bin/python tools/profile_requests.py \
        --path http-json --requests 2000 --warmup 300 --rounds 0 --callgrind
    valgrind --tool=callgrind --instr-atstart=no --trace-children=yes \
        --trace-children-skip-by-arg=127.0.0.1 .venv/bin/python tools/profile_requests.py \
        --path http-binary --model identity_process --rounds 0 --callgrind --callgrind-workers

The server runs in this process (``pytriton_core.Server`` with its HTTP and gRPC front ends,
the bench's ``identity_fp32`` repository, with ``--model pipe_ensemble|pipe_bls`` the
two-step pipeline of ``bench.pipelines``, or with ``--model identity_process`` the identity
model of ``bench.python_process_mode`` in process mode); the load comes from a client in
another process (``--concurrency`` keep-alive connections or concurrent gRPC calls, each a
closed loop, the bench's ``[1, 16]`` FP32 request), so the figures are the server's alone:

- CPU µs per request: this process's CPU time (every thread: the loop, grpc's poller) over a
  window of ``--requests`` requests after ``--warmup`` ones, divided by the requests;
- the garbage collector's collections per 1,000 requests over each CPU window, per
  generation (the server runs with the command line's ``--gc-threshold`` unless
  ``--gc-threshold`` is given here; ``--dynamic-batching`` serves the identity model with
  ``dynamic_batching {}``);
- with ``--callgrind`` (run under ``valgrind --tool=callgrind --instr-atstart=no``), one
  more window counted by callgrind, every thread of the server: instructions per request.
  Valgrind runs the server some 50 times slower, so the inline rule's wall-clock budget
  (``runtime.instance.INLINE_BUDGET_NS``) would send a share of the executions that varies
  from run to run (a tenth to two thirds) to the instance's thread, each some 35k
  instructions dearer; the tool lifts that budget under ``--callgrind``, so that every
  execution runs where it runs on a machine at full speed (on the loop) and two runs of
  one build count the same work;
- with ``--cprofile``, a second window profiled on the loop's thread (where the front ends,
  the scheduler and an inline ``execute`` run): Python-level calls per request, and the
  functions with the most calls (``--top``);
- with ``--model identity_process``, also the CPU µs per request of the model's worker
  process (from ``/proc``) over each CPU window.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench import procstats  # noqa: E402
from bench.payloads import http_body, input_array, prepare_repository  # noqa: E402
from bench.pipelines import write_repository  # noqa: E402
from bench.python_process_mode import CONFIG, IDENTITY  # noqa: E402
from pytriton_core import Server  # noqa: E402
from pytriton_core.options import ServerOptions  # noqa: E402

# The client process: reads "go N\n" on stdin, sends N requests over its connections,
# answers "done\n"; closes on EOF. Responses are checked only for their status.
_CLIENT = r"""
import asyncio, sys
import uvloop

MODE, HOST, PORT, CONC = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
PAYLOAD = bytes.fromhex(sys.stdin.readline().strip())

async def http_connection(left):
    reader, writer = await asyncio.open_connection(HOST, PORT)
    while left[0] > 0:
        left[0] -= 1
        writer.write(PAYLOAD)
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise SystemExit(head.decode("latin-1"))
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
    writer.close()

async def grpc_calls(channel, left):
    call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
    while left[0] > 0:
        left[0] -= 1
        await call(PAYLOAD)

async def main():
    channel = None
    if MODE == "grpc":
        import grpc
        channel = grpc.aio.insecure_channel(f"{HOST}:{PORT}")
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        left = [int(line.split()[1])]
        if channel is None:
            await asyncio.gather(*(http_connection(left) for _ in range(CONC)))
        else:
            await asyncio.gather(*(grpc_calls(channel, left) for _ in range(CONC)))
        print("done", flush=True)

uvloop.run(main())
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _payload(path: str, port: int, model: str) -> bytes:
    # The pipelines' models take [16]; identity_fp32 takes [1, 16].
    array = input_array(16) if model == "identity_fp32" else input_array(16).reshape(16)
    if path == "grpc":
        from tritonclient.grpc import service_pb2

        request = service_pb2.ModelInferRequest(model_name=model)
        tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=list(array.shape))
        del tensor
        request.outputs.add(name="OUTPUT0")
        request.raw_input_contents.append(array.tobytes())
        data: bytes = request.SerializeToString()
        return data
    if model == "identity_fp32":
        body = http_body(16, binary=path == "http-binary")
        headers, content = body.headers, body.body
    else:
        headers, content = _pipeline_body(array, binary=path == "http-binary")
    head = f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    head += f"Content-Length: {len(content)}\r\n\r\n"
    return head.encode() + content


def _pipeline_body(array: np.ndarray, binary: bool) -> tuple[dict[str, str], bytes]:
    """A request to one of bench.pipelines' models (INPUT0, FP32 [16])."""
    tensor: dict[str, object] = {"name": "INPUT0", "shape": list(array.shape), "datatype": "FP32"}
    if not binary:
        tensor["data"] = array.tolist()
        return {"Content-Type": "application/json"}, json.dumps({"inputs": [tensor]}).encode()
    tensor["parameters"] = {"binary_data_size": array.nbytes}
    header = json.dumps({"inputs": [tensor], "parameters": {"binary_data_output": True}})
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(header)),
    }
    return headers, header.encode() + array.tobytes()


class _Load:
    def __init__(self, path: str, port: int, concurrency: int, model: str) -> None:
        mode = "grpc" if path == "grpc" else "http"
        self._client = subprocess.Popen(
            [sys.executable, "-c", _CLIENT, mode, "127.0.0.1", str(port), str(concurrency)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._send(_payload(path, port, model).hex())

    @property
    def pid(self) -> int:
        return self._client.pid

    def _send(self, line: str) -> None:
        assert self._client.stdin is not None
        self._client.stdin.write(line + "\n")
        self._client.stdin.flush()

    def run(self, requests: int) -> None:
        self._send(f"go {requests}")
        assert self._client.stdout is not None
        if self._client.stdout.readline().strip() != "done":
            raise SystemExit(f"the client failed (exit {self._client.wait()})")

    def close(self) -> None:
        assert self._client.stdin is not None
        self._client.stdin.close()
        self._client.wait(timeout=30)


def _on_loop(server: Server, function: object) -> None:
    loop = server._loop  # a tool reaching into the server it profiles
    assert loop is not None and callable(function)
    done = threading.Event()

    def call() -> None:
        function()
        done.set()

    loop.call_soon_threadsafe(call)
    done.wait()


PROCESS_MODEL = "identity_process"


def _process_repository(root: Path) -> Path:
    """A repository of one model: bench.python_process_mode's identity in process mode."""
    folder = root / PROCESS_MODEL
    (folder / "1").mkdir(parents=True)
    config = CONFIG.format(name=PROCESS_MODEL, count=1, mode="process")
    (folder / "config.pbtxt").write_text(config)
    (folder / "1" / "model.py").write_text(IDENTITY)
    return root


def _worker_pids(load: _Load) -> list[int]:
    """This process's descendants other than the load's client: process mode's workers."""
    return [pid for pid in procstats.process_tree(os.getpid())[1:] if pid != load.pid]


def _worker_seconds(load: _Load) -> float:
    """CPU seconds so far of the worker processes of process mode."""
    return sum(procstats.cpu_seconds(pid) for pid in _worker_pids(load))


def _callgrind_window(load: _Load, requests: int, workers: bool) -> None:
    """Switch callgrind's counting on around one window (this process runs under
    ``valgrind --tool=callgrind --instr-atstart=no``), then dump and read its totals; with
    ``workers``, also in the model's worker processes (valgrind with ``--trace-children=yes
    --trace-children-skip-by-arg=127.0.0.1``: the load's client, whose arguments name the
    address, runs natively)."""
    own = os.getpid()
    pids = [own] + (_worker_pids(load) if workers else [])
    for pid in pids:
        subprocess.run(["callgrind_control", "-i", "on", str(pid)], check=True, capture_output=True)
    load.run(requests)
    for pid in pids:
        for step in (["-i", "off"], ["-d", "window"]):
            subprocess.run(["callgrind_control", *step, str(pid)], check=True, capture_output=True)
    for pid in pids:
        outputs = sorted(Path.cwd().glob(f"callgrind.out.{pid}*"), key=lambda p: p.stat().st_mtime)
        if not outputs:  # valgrind ran with --callgrind-out-file: the dump is FILE.1
            print(f"callgrind: dumped; its totals (valgrind's Collected) over {requests} requests")
            continue
        total = 0
        for line in outputs[-1].read_text(errors="replace").splitlines():
            if line.startswith(("summary:", "totals:")):
                total = int(line.split()[1])
        who = "server" if pid == own else "worker process"
        print(
            f"callgrind: {who} {total / requests / 1000:.0f}k instructions/request "
            f"({outputs[-1].name})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--path", choices=("http-binary", "http-json", "grpc"), required=True)
    parser.add_argument(
        "--model",
        choices=("identity_fp32", "pipe_ensemble", "pipe_bls", PROCESS_MODEL),
        default="identity_fp32",
        help="the bench's identity model, bench.pipelines' two-step pipeline, or the "
        "identity model in process mode",
    )
    parser.add_argument(
        "--dynamic-batching",
        action="store_true",
        help="identity_fp32 with dynamic_batching {} (the bench's +dyn. batching scenarios)",
    )
    parser.add_argument(
        "--gc-threshold",
        type=int,
        default=ServerOptions.gc_threshold,
        help="the server's --gc-threshold (0: Python's own, 700)",
    )
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3, help="CPU windows; each is printed")
    parser.add_argument("--cprofile", action="store_true")
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="run under valgrind --tool=callgrind --instr-atstart=no: instructions per request",
    )
    parser.add_argument(
        "--callgrind-workers",
        action="store_true",
        help="with --callgrind and --model identity_process: the worker process's too "
        "(valgrind also with --trace-children=yes --trace-children-skip-by-arg=127.0.0.1)",
    )
    parser.add_argument("--top", type=int, default=0, help="with --cprofile: functions to list")
    parser.add_argument("--dump", help="with --cprofile: write the pstats file here")
    parser.add_argument("--sort", default="ncalls", help="pstats sort key for --top")
    args = parser.parse_args()

    if args.callgrind:
        # (see the docstring) a tool reaching into the server it profiles
        from pytriton_core.runtime import instance

        instance.INLINE_BUDGET_NS = 1 << 62
    with tempfile.TemporaryDirectory() as work:
        if args.model == "identity_fp32":
            repository = prepare_repository(Path(work), dynamic_batching=args.dynamic_batching)
        elif args.model == PROCESS_MODEL:
            repository = _process_repository(Path(work) / "process")
        else:
            repository = write_repository(Path(work) / "pipelines")
        http_port, grpc_port = _free_port(), _free_port()
        with Server(
            model_repository=repository,
            # The collector as the command-line server sets it (the API leaves it alone).
            gc_threshold=args.gc_threshold,
            allow_http=True,
            http_port=http_port,
            allow_grpc=True,
            grpc_port=grpc_port,
        ) as server:
            port = grpc_port if args.path == "grpc" else http_port
            load = _Load(args.path, port, args.concurrency, args.model)
            try:
                load.run(args.warmup)
                for _ in range(args.rounds):
                    start, worker_start = os.times(), _worker_seconds(load)
                    collections = [g["collections"] for g in gc.get_stats()]
                    load.run(args.requests)
                    end, worker_end = os.times(), _worker_seconds(load)
                    collections = [
                        g["collections"] - before
                        for g, before in zip(gc.get_stats(), collections, strict=True)
                    ]
                    rate = args.requests / (end.elapsed - start.elapsed)
                    cpu = (end.user - start.user) + (end.system - start.system)
                    print(
                        f"{args.path}: server CPU {cpu / args.requests * 1e6:.1f} µs/request "
                        f"(user {(end.user - start.user) / args.requests * 1e6:.1f}, "
                        f"{args.requests} requests, c{args.concurrency}, {rate:.0f}/s)"
                    )
                    per_thousand = "/".join(f"{n * 1000 / args.requests:.1f}" for n in collections)
                    print(
                        f"{args.path}: GC collections per 1,000 requests {per_thousand} (gen 0/1/2)"
                    )
                    if args.model == PROCESS_MODEL:
                        worker = (worker_end - worker_start) / args.requests * 1e6
                        print(f"{args.path}: worker process CPU {worker:.1f} µs/request")
                if args.callgrind:
                    _callgrind_window(load, args.requests, args.callgrind_workers)
                if args.cprofile:
                    profiler = cProfile.Profile()
                    _on_loop(server, profiler.enable)
                    load.run(args.requests)
                    _on_loop(server, profiler.disable)
                    stats = pstats.Stats(profiler)
                    calls = stats.total_calls  # type: ignore[attr-defined]
                    print(f"{args.path}: {calls / args.requests:.1f} Python-level calls/request")
                    if args.dump:
                        stats.dump_stats(args.dump)
                    if args.top:
                        stats.sort_stats(args.sort).print_stats(args.top)
            finally:
                load.close()


if __name__ == "__main__":
    main()
