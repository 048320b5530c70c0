"""``python -m bench.stages``: the CPU cost of each stage of a ``[16]`` HTTP infer request.

Each stage of pytriton-core's request path is called on its own, in a loop, in this process
(the identity model loaded from a fresh repository, no sockets): parse (httptools and the
compiled framing), model lookup, decode, validate, execute (the Python backend with the
model's own code), encode, response head, statistics; a gRPC ModelInfer's decode and
encode; then the thread hand-off (a queue to a
worker thread and ``call_soon_threadsafe`` back, one or eight in flight) and an asyncio task.
Thread CPU time, best of 5 rounds, so the load of a shared machine moves the figures less
than wall-clock ones (it still moves them by some 10-20 %: compare builds in one sitting).
"""

from __future__ import annotations

import argparse
import asyncio
import queue
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httptools
import numpy as np

from bench.payloads import HttpBody, http_body, prepare_repository
from pytriton_core import proto
from pytriton_core._native.http_framing import RequestAssembler, build_response_head
from pytriton_core.frontends.grpc import infer_codec as grpc_codec
from pytriton_core.frontends.http.infer_codec import decode_infer_request, encode_infer_response
from pytriton_core.inference.statistics import ComputeTiming
from pytriton_core.options import ServerOptions
from pytriton_core.runtime.validation import validate_request
from pytriton_core.server import ServerRuntime

ROUNDS = 5


def cost_us(function: Callable[[], object], calls: int) -> float:
    """Thread CPU µs per call of ``function``: the best of ROUNDS rounds of ``calls``."""
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.thread_time_ns()
        for _ in range(calls):
            function()
        best = min(best, (time.thread_time_ns() - start) / calls)
    return best / 1000


def raw_request(body: HttpBody) -> bytes:
    head = (
        "POST /v2/models/identity_fp32/infer HTTP/1.1\r\nHost: bench\r\n"
        f"Content-Type: {body.content_type}\r\n"
    )
    if body.header_length is not None:
        head += f"Inference-Header-Content-Length: {body.header_length}\r\n"
    return (head + f"Content-Length: {len(body.body)}\r\n\r\n").encode() + body.body


async def measure(calls: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        repository = prepare_repository(Path(folder), dynamic_batching=False)
        options = ServerOptions(
            allow_http=False,
            allow_grpc=False,
            allow_metrics=False,
            model_repositories=(repository,),
        )
        runtime = ServerRuntime(options)
        await runtime.start()
        try:
            service = runtime.service
            model = service.model("identity_fp32", None)
            instance = model._backend_model.create_instance(model._instances[0].spec)
            for binary in (True, False):
                kind = "binary" if binary else "JSON"
                for stage, function in _stages(service, model, instance, binary).items():
                    figures[f"{kind}: {stage}"] = cost_us(function, calls)
            for stage, function in _grpc_stages(service, model, instance).items():
                figures[f"gRPC: {stage}"] = cost_us(function, calls)
            figures.update(await hand_off(calls // 4))
        finally:
            await runtime.stop()
    return figures


def _stages(
    service: Any, model: Any, instance: Any, binary: bool
) -> dict[str, Callable[[], object]]:
    """Each stage of one request, ready to be called again and again."""
    body = http_body(16, binary=binary)
    data = raw_request(body)
    assembler = RequestAssembler(1 << 26)
    parser = httptools.HttpRequestParser(assembler)
    assembler.attach(parser)

    def parse() -> list[object]:
        parser.feed_data(data)
        return assembler.drain()

    request = parse()[0]
    length = body.header_length
    decoded = decode_infer_request(model, request.body, length, service)
    validate_request(decoded.request, model.spec)
    response = instance.execute([decoded.request], ComputeTiming())[0]
    answer = encode_infer_response(model, decoded, response)
    timing = ComputeTiming(1, 2, 3, 4)
    stats = model.stats

    def statistics() -> None:
        stats.record_execution(1, timing)
        stats.record_request_success(0, 1, timing, 5)

    def head() -> bytes:
        return build_response_head(
            answer.status, answer.content_type, answer.content_length, True, answer.headers
        )

    return {
        "parse (httptools + framing)": parse,
        "model lookup": lambda: service.model("identity_fp32", None),
        "decode": lambda: decode_infer_request(model, request.body, length, service),
        "validate": lambda: validate_request(decoded.request, model.spec),
        "execute (Python backend + model.py)": lambda: instance.execute(
            [decoded.request], ComputeTiming()
        ),
        "encode": lambda: encode_infer_response(model, decoded, response),
        "response head": head,
        "statistics": statistics,
    }


def _grpc_stages(service: Any, model: Any, instance: Any) -> dict[str, Callable[[], object]]:
    """A ``[16]`` ModelInfer's own stages: the message to a core request, and back."""
    message: Any = proto.inference("ModelInferRequest")(model_name="identity_fp32")
    message.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    message.raw_input_contents.append(np.arange(16, dtype=np.float32).tobytes())
    data = message.SerializeToString()

    def decode() -> object:
        return grpc_codec.decode_infer_request(service, data, unary=True)

    decoded = decode()
    response = instance.execute([decoded.request], ComputeTiming())[0]
    return {
        "decode (compiled walk, core request)": decode,
        "encode": lambda: grpc_codec.encode_infer_response(decoded, response),
    }


async def hand_off(count: int) -> dict[str, float]:
    """Process CPU per round trip loop -> worker thread -> loop, and per asyncio task."""
    loop = asyncio.get_running_loop()
    work: queue.SimpleQueue[asyncio.Future[None] | None] = queue.SimpleQueue()

    def worker() -> None:
        while (future := work.get()) is not None:
            loop.call_soon_threadsafe(future.set_result, None)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    figures = {}

    async def one() -> None:
        future = loop.create_future()
        work.put(future)
        await future

    for in_flight in (1, 8):
        start = time.process_time_ns()
        for _ in range(count // in_flight):
            await asyncio.gather(*(one() for _ in range(in_flight)))
        spent = (time.process_time_ns() - start) / (count // in_flight * in_flight) / 1000
        figures[f"thread hand-off, {in_flight} in flight (process CPU)"] = spent
    work.put(None)

    async def nothing() -> None:
        return None

    start = time.thread_time_ns()
    for _ in range(count):
        await loop.create_task(nothing())
    figures["an asyncio task"] = (time.thread_time_ns() - start) / count / 1000
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.stages", description=__doc__)
    parser.add_argument("--calls", type=int, default=5000, help="calls per round (default 5000)")
    args = parser.parse_args()
    import uvloop

    uvloop.install()
    for stage, us in asyncio.run(measure(args.calls)).items():
        print(f"{us:8.2f} µs  {stage}")


if __name__ == "__main__":
    main()
