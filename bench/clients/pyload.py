"""A small asyncio HTTP/1.1 load generator: the common client where wrk is not installed.

Like wrk: ``concurrency`` keep-alive connections, each a closed loop with one request in flight,
the same prebuilt request bytes on every one. It runs in the bench's own process (uvloop when
installed); being Python, it spends more CPU per request than wrk, which on a 2-core machine
takes CPU from the server: compare its rows with each other, not with wrk's.
"""

from __future__ import annotations

import asyncio
import platform
import time
from pathlib import Path
from types import ModuleType

import numpy as np

from bench.clients.base import ClientError, Window
from bench.clients.http_target import HttpTarget

MAX_REQUESTS_PER_WINDOW = 2_000_000

uvloop: ModuleType | None
try:
    import uvloop
except ImportError:  # plain asyncio then; the settings say which
    uvloop = None


class PythonLoad:
    name = "python-asyncio"

    def __init__(self) -> None:
        loop = "uvloop" if uvloop is not None else "asyncio"
        self.version = f"Python {platform.python_version()} {loop}"

    def settings(self, seconds: int) -> str:
        return (
            f"bench.clients.pyload ({self.version}) {seconds}s, 1 request in flight per connection"
        )

    def measure(self, target: HttpTarget, concurrency: int, seconds: int, log_path: Path) -> Window:
        loop = uvloop.new_event_loop() if uvloop is not None else asyncio.new_event_loop()
        try:
            window = loop.run_until_complete(
                asyncio.wait_for(_measure(target, concurrency, seconds), timeout=seconds + 60)
            )
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as error:
            log_path.write_text(f"{type(error).__name__}: {error}\n")
            raise ClientError(f"python load generator: {type(error).__name__}: {error}") from None
        finally:
            loop.close()
        log_path.write_text(f"{window}\n")
        return window


def _request_bytes(target: HttpTarget) -> bytes:
    payload = target.payload
    headers = {
        "Host": f"{target.host}:{target.port}",
        **payload.headers,
        "Content-Length": str(len(payload.body)),
    }
    head = f"POST {target.path} HTTP/1.1\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return (head + "\r\n").encode() + payload.body


async def _measure(target: HttpTarget, concurrency: int, seconds: int) -> Window:
    request = _request_bytes(target)
    latencies: list[float] = []
    errors = [0]
    start = time.perf_counter()
    deadline = start + seconds
    await asyncio.gather(
        *(_connection(target, request, deadline, latencies, errors) for _ in range(concurrency))
    )
    elapsed = time.perf_counter() - start
    if not latencies:
        raise ClientError("no response completed in the window")
    micros = np.asarray(latencies) * 1e6
    p50, p90, p95, p99 = np.percentile(micros, [50, 90, 95, 99])
    return Window(
        throughput=(len(latencies) - errors[0]) / elapsed,
        p50_us=float(p50),
        p90_us=float(p90),
        p95_us=float(p95),
        p99_us=float(p99),
        mean_us=float(micros.mean()),
        duration_s=elapsed,
        requests=len(latencies),
        errors=errors[0],
    )


async def _connection(
    target: HttpTarget, request: bytes, deadline: float, latencies: list[float], errors: list[int]
) -> None:
    reader, writer = await asyncio.open_connection(target.host, target.port)
    try:
        while time.perf_counter() < deadline and len(latencies) < MAX_REQUESTS_PER_WINDOW:
            sent = time.perf_counter()
            writer.write(request)
            status = await _read_response(reader)
            latencies.append(time.perf_counter() - sent)
            if status != 200:
                errors[0] += 1
    finally:
        writer.close()


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length, chunked = None, False
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "transfer-encoding":
            chunked = value.strip().lower() == "chunked"
    if chunked:
        await _read_chunks(reader)
    elif length is not None:
        await reader.readexactly(length)
    else:
        raise ValueError("response with neither Content-Length nor chunked encoding")
    return status


async def _read_chunks(reader: asyncio.StreamReader) -> None:
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, then the end
                pass
            return
        await reader.readexactly(size + 2)
