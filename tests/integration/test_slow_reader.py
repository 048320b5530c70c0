"""A client that reads slowly costs the server what it is sent, not more, and does not hold
others up: a 64 MiB answer read at 1 MiB/s raises the server's RSS by about the answer
itself; a stream of 64 responses of 1 MiB read at that pace holds a few MiB, because the
model's sender waits for the client (the response window); and another client's requests
are answered meanwhile. The server's RSS is sampled from /proc while the reader is slow.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from harness import ServerHandle, run_pytriton_server
from streaming_models import raw_post, write_blob, write_chunks
from test_cancellation import read_all

MIB = 1 << 20
RESPONSE_MIB = 64
SLOW_READ_S = 4.0  # long enough to see the memory a slow reader holds; then read fast
# What the server may hold beyond what it was asked to send: the transport's and the
# encoder's buffers, the response window, allocator slack.
SLACK_MIB = 12


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    root = tmp_path_factory.mktemp("slow-reader")
    write_blob(root, "blob")
    write_chunks(root, "chunks")
    with run_pytriton_server(root) as handle:
        yield handle


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def slow_socket(server: ServerHandle) -> socket.socket:
    host, port = server.http_url.rsplit(":", 1)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)  # before connect
    sock.settimeout(60)
    sock.connect((host, int(port)))
    return sock


def read_slowly(sock: socket.socket, seconds: float) -> int:
    """Read at about 1 MiB/s for ``seconds``; the bytes read."""
    received = 0
    step = 64 << 10
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        received += len(sock.recv(step))
        time.sleep(step / MIB)
    return received


class Sampler:
    """The server's largest RSS while the slow read lasts, and another client's answers."""

    def __init__(self, server: ServerHandle) -> None:
        self._server = server
        self._pid = server.process.pid
        self.peak_mib = 0.0
        self.served = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with httpclient.InferenceServerClient(self._server.http_url) as client:
            tensor = httpclient.InferInput("INPUT0", [1], "FP32")
            tensor.set_data_from_numpy(np.ones(1, np.float32))
            while not self._stop.is_set():
                self.peak_mib = max(self.peak_mib, rss_mib(self._pid))
                answer = client.infer("blob", [tensor], parameters={"mib": 0})
                assert answer.as_numpy("OUT").size == 0
                self.served += 1
                time.sleep(0.02)


def warm_up(server: ServerHandle) -> float:
    """Serve each path once (imports, pools), then the RSS to compare with."""
    with httpclient.InferenceServerClient(server.http_url) as client:
        tensor = httpclient.InferInput("INPUT0", [1], "FP32")
        tensor.set_data_from_numpy(np.ones(1, np.float32))
        output = httpclient.InferRequestedOutput("OUT", binary_data=True)
        client.infer("blob", [tensor], outputs=[output], parameters={"mib": 1})
    time.sleep(0.2)
    return rss_mib(server.process.pid)


def blob_request() -> bytes:
    document = {
        "inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [0.0]}],
        "outputs": [{"name": "OUT", "parameters": {"binary_data": True}}],
        "parameters": {"mib": RESPONSE_MIB},
    }
    return raw_post("/v2/models/blob/infer", document, close=True)


def test_a_slow_reader_of_a_large_answer_holds_only_the_answer(server: ServerHandle) -> None:
    baseline = warm_up(server)
    with slow_socket(server) as sock, Sampler(server) as sampler:
        sock.sendall(blob_request())
        slow = read_slowly(sock, SLOW_READ_S)
        rest = read_all(sock)
    total = slow + len(rest)
    assert total > RESPONSE_MIB * MIB  # all of it arrived, head included
    growth = sampler.peak_mib - baseline
    print(f"\n64 MiB answer, slow reader: server RSS +{growth:.1f} MiB; {sampler.served} served")
    assert growth < RESPONSE_MIB + SLACK_MIB
    assert sampler.served >= 10  # the other client was answered all along


def stream_request(chunks: int) -> bytes:
    document = {"text_input": "x", "chunks": chunks}
    return raw_post("/v2/models/chunks/generate_stream", document, close=True)


def test_a_slow_reader_of_a_stream_holds_the_model_back(server: ServerHandle) -> None:
    baseline = warm_up(server)
    with slow_socket(server) as sock, Sampler(server) as sampler:
        sock.sendall(stream_request(RESPONSE_MIB))
        slow = read_slowly(sock, SLOW_READ_S)
        rest = read_all(sock)
    events = rest.count(b"data: ")
    assert slow + len(rest) > RESPONSE_MIB * MIB
    assert events > RESPONSE_MIB // 2  # the rest came once the reader sped up
    growth = sampler.peak_mib - baseline
    print(
        f"\n64 x 1 MiB stream, slow reader: server RSS +{growth:.1f} MiB; {sampler.served} served"
    )
    assert growth < SLACK_MIB  # far less than the 64 MiB the model would have sent
    assert sampler.served >= 10
