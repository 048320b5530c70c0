"""HTTP clients that misbehave, through raw sockets and the real client: Upgrade offers,
half-closed connections, a pipelining client that reads nothing, and compressed bodies
large enough to stall the event loop. After each, the server is alive and another
client's answers are exact."""

from __future__ import annotations

import gzip
import json
import re
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from harness import ServerHandle, memory_kib, run_pytriton_server, write_python_model

IDENTITY_CONFIG = """
name: "identity"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
"""
IDENTITY_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses
"""
# A 60 MiB answer that compresses (and takes gzip a while): computed once, returned as is.
LARGE_CONFIG = """
name: "large"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
"""
LARGE_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils

ELEMENTS = 15 << 20


class TritonPythonModel:
    def initialize(self, args):
        self.output = (np.arange(ELEMENTS, dtype=np.float32) % 977) * np.float32(0.5)

    def execute(self, requests):
        output = pb_utils.Tensor("OUTPUT0", self.output)
        return [pb_utils.InferenceResponse([output]) for _ in requests]
"""
LARGE_ELEMENTS = 15 << 20


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("http_security")
    write_python_model(root, "identity", IDENTITY_CONFIG, IDENTITY_MODEL)
    write_python_model(root, "large", LARGE_CONFIG, LARGE_MODEL)
    return root


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[ServerHandle]:
    with run_pytriton_server(repository) as handle:
        yield handle


def address(server: ServerHandle) -> tuple[str, int]:
    host, port = server.http_url.rsplit(":", 1)
    return host, int(port)


def identity_answer_is_exact(server: ServerHandle) -> None:
    values = np.arange(7, dtype=np.float32) * np.float32(1.5)
    with httpclient.InferenceServerClient(server.http_url) as client:
        tensor = httpclient.InferInput("INPUT0", [7], "FP32")
        tensor.set_data_from_numpy(values)
        result = client.infer("identity", [tensor]).as_numpy("OUTPUT0")
        assert result is not None and result.tobytes() == values.tobytes()
        assert client.is_server_live()


def exchange(
    server: ServerHandle, data: bytes, *, half_close: bool, timeout: float = 10.0
) -> bytes:
    """Send ``data``; with ``half_close`` shut the write side (as ``nc -N`` does) and read to
    EOF, else read until ``timeout`` passes quietly."""
    with socket.create_connection(address(server), timeout=timeout) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        received = bytearray()
        try:
            while chunk := sock.recv(1 << 20):
                received += chunk
        except TimeoutError:
            assert not half_close, f"no EOF after the answers; got {bytes(received[:500])!r}"
        return bytes(received)


def final_answers(stream: bytes) -> bytes:
    """``stream`` without interim ``100 Continue`` answers: while an inference runs, the
    server probes a connection that half-closed with one (a client that closed resets;
    docs/streaming.md), and a client that reads on skips it."""
    return stream.replace(b"HTTP/1.1 100 Continue\r\n\r\n", b"")


def statuses(stream: bytes) -> list[bytes]:
    """The status lines of the final answers in ``stream`` (a body need not end with CRLF)."""
    return re.findall(rb"HTTP/1\.1 \d{3} [A-Za-z ]*", final_answers(stream))


READY = b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\n\r\n"
METADATA = b"GET /v2 HTTP/1.1\r\nHost: t\r\n\r\n"
H2C_OFFER = (
    b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\nConnection: Upgrade, HTTP2-Settings\r\n"
    b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"
)
WEBSOCKET_OFFER = (
    b"GET /v2 HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


def test_a_half_closed_connection_is_answered_then_closed(server: ServerHandle) -> None:
    received = exchange(server, READY + METADATA, half_close=True)
    assert statuses(received) == [b"HTTP/1.1 200 OK"] * 2
    assert b'"name":"triton"' in received
    identity_answer_is_exact(server)


@pytest.mark.parametrize("offer", [H2C_OFFER, WEBSOCKET_OFFER], ids=["h2c", "websocket"])
def test_upgrade_offers_are_ignored_and_answered_in_http11(
    server: ServerHandle, offer: bytes
) -> None:
    # What `curl --http2 http://...` and a websocket client send: no 101, an HTTP/1.1 answer,
    # and the connection goes on in HTTP/1.1 (the next pipelined request is answered too).
    received = exchange(server, offer + METADATA, half_close=False, timeout=3.0)
    assert statuses(received) == [b"HTTP/1.1 200 OK"] * 2, received
    assert b"101" not in received.split(b"\r\n", 1)[0]
    identity_answer_is_exact(server)


def test_an_upgrade_offer_with_a_body_is_answered(server: ServerHandle) -> None:
    values = np.arange(4, dtype=np.float32)
    body = json.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": values.tolist()}]}
    ).encode()
    request = (
        b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\n"
        b"Upgrade: h2c\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    received = final_answers(exchange(server, request, half_close=True))
    assert statuses(received) == [b"HTTP/1.1 200 OK"]
    answer = json.loads(received.split(b"\r\n\r\n", 1)[1])
    assert answer["outputs"][0]["data"] == values.tolist()


# ------------------------------------------------------------- flow control


def binary_infer_request(values: np.ndarray, *, gzip_body: bool) -> bytes:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [values.size],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": values.nbytes},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    body = header + values.tobytes()
    headers = b"Inference-Header-Content-Length: %d\r\n" % len(header)
    if gzip_body:
        body = gzip.compress(body, compresslevel=1)
        headers += b"Content-Encoding: gzip\r\n"
    return (
        b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: t\r\n%sContent-Length: %d\r\n\r\n%s"
        % (headers, len(body), body)
    )


PIPELINED = 30
REQUEST_ELEMENTS = 6 << 20  # 24 MiB of FP32 per request once inflated
# The stated bound: while the client reads nothing, the server holds about one request's
# input, the model's output and that answer in the transport; 8 x 24 MiB leaves room for the
# allocator. Without flow control it decodes, runs and buffers all 30 answers (720 MiB).
RSS_BOUND_KIB = 8 * (REQUEST_ELEMENTS * 4) // 1024


def test_a_pipelining_client_that_reads_nothing_stays_within_the_rss_bound(
    repository: Path,
) -> None:
    values = np.zeros(REQUEST_ELEMENTS, dtype=np.float32)
    values[::4096] = 1.0
    request = binary_infer_request(values, gzip_body=True)
    with run_pytriton_server(repository) as server:
        pid = server.process.pid
        identity_answer_is_exact(server)
        baseline = memory_kib(pid)
        with socket.create_connection(address(server), timeout=60) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
            sock.sendall(request * PIPELINED)  # about 24 KiB each: all of it is sent
            time.sleep(3.0)  # the server does what it will while nothing is read
            identity_answer_is_exact(server)  # other clients are served meanwhile
            peak = memory_kib(pid, "VmHWM")
            print(f"RSS: baseline {baseline} KiB, peak {peak} KiB, bound +{RSS_BOUND_KIB} KiB")
            assert peak - baseline < RSS_BOUND_KIB
            # Once the client reads, every answer comes, exact and in order.
            expected_body = values.tobytes()
            buffer = bytearray()
            for _ in range(PIPELINED):
                while b"\r\n\r\n" not in buffer:
                    buffer += sock.recv(1 << 20)
                head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 200 OK"), head
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                header_length = int(
                    head.lower().split(b"inference-header-content-length: ")[1].split(b"\r\n")[0]
                )
                while len(rest) < length:
                    rest += sock.recv(1 << 22)
                assert rest[header_length:length] == expected_body
                buffer = bytearray(rest[length:])
        identity_answer_is_exact(server)


# -------------------------------------------------------------- compression


class HealthProbe:
    """Calls /v2/health/live in a loop on its own connection; keeps the slowest answer."""

    def __init__(self, server: ServerHandle) -> None:
        self._sock = socket.create_connection(address(server), timeout=30)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.slowest_s = 0.0
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        request = b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n"
        while not self._stop.is_set():
            start = time.perf_counter()
            self._sock.sendall(request)
            answer = b""
            while not answer.endswith(b"\r\n\r\n"):
                answer += self._sock.recv(4096)
            assert answer.startswith(b"HTTP/1.1 200 OK"), answer
            self.slowest_s = max(self.slowest_s, time.perf_counter() - start)
            self.count += 1
            time.sleep(0.005)

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._sock.close()


# Generous, for a loaded 2-core machine: the design target is 50 ms (see the report / bench).
HEALTH_DELAY_BOUND_S = 0.5


def test_a_60_mib_compressed_answer_does_not_stall_a_health_check(server: ServerHandle) -> None:
    expected = (np.arange(LARGE_ELEMENTS, dtype=np.float32) % 977) * np.float32(0.5)
    with httpclient.InferenceServerClient(server.http_url, connection_timeout=120) as client:
        tensor = httpclient.InferInput("INPUT0", [1], "FP32")
        tensor.set_data_from_numpy(np.zeros(1, np.float32))
        client.infer("large", [tensor])  # warm: the first answer allocates
        with HealthProbe(server) as probe:
            time.sleep(0.1)
            start = time.perf_counter()
            result = client.infer(
                "large",
                [tensor],
                response_compression_algorithm="gzip",
            )
            elapsed = time.perf_counter() - start
            time.sleep(0.1)
        output = result.as_numpy("OUTPUT0")
        assert output is not None and output.tobytes() == expected.tobytes()
    print(
        f"60 MiB gzip answer in {elapsed:.2f} s; slowest of {probe.count} health checks "
        f"meanwhile: {probe.slowest_s * 1000:.1f} ms"
    )
    assert probe.count > 3
    assert probe.slowest_s < HEALTH_DELAY_BOUND_S
    identity_answer_is_exact(server)


def test_a_large_compressed_request_does_not_stall_a_health_check(server: ServerHandle) -> None:
    values = (np.arange(LARGE_ELEMENTS, dtype=np.float32) % 977) * np.float32(0.5)
    request = binary_infer_request(values, gzip_body=True)
    with HealthProbe(server) as probe:
        time.sleep(0.1)
        received = exchange(server, request, half_close=True, timeout=120)
        time.sleep(0.1)
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK"), head[:200]
    assert body.endswith(values.tobytes())
    print(f"slowest of {probe.count} health checks meanwhile: {probe.slowest_s * 1000:.1f} ms")
    assert probe.slowest_s < HEALTH_DELAY_BOUND_S
    identity_answer_is_exact(server)


def test_a_deflate_request_that_inflates_past_the_limit_is_refused(server: ServerHandle) -> None:
    bomb = zlib.compress(bytes(80 << 20), 9)  # 80 MiB of zeros in about 80 KiB
    request = (
        b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: t\r\nContent-Encoding: deflate\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(bomb), bomb)
    )
    received = exchange(server, request, half_close=True)
    assert statuses(received) == [b"HTTP/1.1 400 Bad Request"]
    assert b"exceeds the maximum input size" in received
    identity_answer_is_exact(server)
