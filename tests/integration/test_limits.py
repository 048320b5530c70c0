"""Each per-client limit (docs/security.md, "Limits") with its error, through raw sockets and
the real clients; after each, another client's answers are exact.

One server runs with every limit set low, so that a test reaches each one cheaply.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from harness import ServerHandle, memory_kib, run_pytriton_server
from robustness import (
    Witness,
    connect,
    fp32_input,
    read_response,
    wait_closed,
    write_identity_model,
)
from tritonclient.utils import InferenceServerException

# every test leaves the server as it found it (leaks.py)
pytestmark = pytest.mark.usefixtures("leak_check")

LIMITS = {
    "--http-max-input-size": 1 << 20,
    "--http-max-header-size": 4096,
    "--http-max-connections": 16,
    "--http-max-pipelined-requests": 4,
    "--http-request-timeout": 2,
    "--http-max-json-depth": 16,
    "--http-max-json-elements": 1000,
    "--max-tensor-byte-size": 32768,
    "--max-tensor-element-count": 8192,
    "--max-bytes-element-count": 64,
    "--grpc-max-receive-message-size": 128 << 10,
    "--grpc-max-send-message-size": 16 << 10,
    "--grpc-max-connections": 8,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    root: Path = tmp_path_factory.mktemp("limits")
    write_identity_model(root, "identity")
    write_identity_model(root, "identity_fp64", "TYPE_FP64")
    write_identity_model(root, "identity_bytes", "TYPE_STRING")
    flags = [f"{flag}={value}" for flag, value in LIMITS.items()]
    with run_pytriton_server(root, *flags) as handle:
        yield handle


def _exchange(server: ServerHandle, raw: bytes) -> tuple[int, dict[str, object]]:
    with connect(server) as sock:
        sock.sendall(raw)
        status, _, body = read_response(sock)
    return status, json.loads(body) if body else {}


def _post(path: str, body: bytes, *headers: str) -> bytes:
    extra = "".join(f"{h}\r\n" for h in headers)
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\n{extra}Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


# ------------------------------------------------------------------------------- HTTP


def test_a_head_past_the_limit_is_431(server: ServerHandle, witness: Witness) -> None:
    raw = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 5000 + b"\r\n\r\n"
    status, body = _exchange(server, raw)
    assert status == 431
    assert body == {"error": "request target and headers exceed 4096 bytes"}


def test_a_body_past_the_limit_is_413(server: ServerHandle, witness: Witness) -> None:
    raw = b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n"
    status, body = _exchange(server, raw)
    assert status == 413
    assert "exceeds the limit of 1048576 bytes" in str(body["error"])


def test_json_nested_past_the_limit_is_400(server: ServerHandle, witness: Witness) -> None:
    deep = b"[" * 17 + b"]" * 17
    document = b'{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1],"data":' + deep + b"}]}"
    status, body = _exchange(server, _post("/v2/models/identity/infer", document))
    assert (status, body) == (
        400,
        {
            "error": "the JSON body nests arrays and objects deeper than 16 levels "
            "(--http-max-json-depth)"
        },
    )
    # A million levels (what crashes Triton 2.51) are refused the same way, at once.
    deeper = b"[" * 1_000_000
    status, body = _exchange(server, _post("/v2/repository/index", deeper))
    assert status == 400 and "--http-max-json-depth" in str(body["error"])


def test_json_with_too_many_values_is_refused_before_it_is_built(
    server: ServerHandle, witness: Witness
) -> None:
    """A 1 MiB body of empty arrays would be 350,000 lists once parsed; the scan refuses
    it first, so the server's memory does not move by more than the body."""
    flat = b"[" + b"[]," * 349_000 + b"[]]"
    rss_before = memory_kib(server.process.pid)
    for path in ("/v2/models/identity/infer", "/v2/repository/index", "/v2/logging"):
        status, body = _exchange(server, _post(path, flat))
        assert (status, body) == (
            400,
            {"error": "the JSON body holds more than 1000 values (--http-max-json-elements)"},
        )
    assert memory_kib(server.process.pid) - rss_before < 16 << 10
    # Strings are text: brackets and commas in them count for nothing.
    document = {
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2], "data": [1.5, 2.5]}],
        "id": "[[[[,,,,]]]]" * 500,
    }
    status, answer = _exchange(
        server, _post("/v2/models/identity/infer", json.dumps(document).encode())
    )
    assert status == 200 and answer["outputs"][0]["data"] == [1.5, 2.5]  # type: ignore[index]


def test_tensor_limits_over_http(server: ServerHandle, witness: Witness) -> None:
    with httpclient.InferenceServerClient(server.http_url) as client:
        too_many = np.zeros(8193, np.float32)
        with pytest.raises(InferenceServerException) as info:
            client.infer("identity", [fp32_input(httpclient, too_many)])
        assert info.value.status() == "400"
        assert info.value.message() == (
            "[request id: <id_unknown>] input 'INPUT0' for model 'identity' has 8193 "
            "elements, more than the limit of 8192 (--max-tensor-element-count)"
        )
        wide = httpclient.InferInput("INPUT0", [4097], "FP64")
        wide.set_data_from_numpy(np.zeros(4097, np.float64))
        with pytest.raises(InferenceServerException, match="--max-tensor-byte-size") as info:
            client.infer("identity_fp64", [wide])
        assert "holds 32776 bytes, more than the limit of 32768" in info.value.message()
        fits = np.arange(8192, dtype=np.float32)
        answer = client.infer("identity", [fp32_input(httpclient, fits)]).as_numpy("OUTPUT0")
        assert answer is not None and answer.tolist() == fits.tolist()


@pytest.mark.parametrize("binary", [True, False])
def test_bytes_elements_past_the_limit(
    server: ServerHandle, witness: Witness, binary: bool
) -> None:
    with httpclient.InferenceServerClient(server.http_url) as client:
        strings = httpclient.InferInput("INPUT0", [65], "BYTES")
        strings.set_data_from_numpy(np.array([b"s"] * 65, np.object_), binary_data=binary)
        with pytest.raises(InferenceServerException) as info:
            client.infer("identity_bytes", [strings])
        assert info.value.status() == "400"
        assert (
            "input 'INPUT0' for model 'identity_bytes' has 65 BYTES elements, more than the "
            "limit of 64 (--max-bytes-element-count)"
        ) in info.value.message()


def test_connections_past_the_limit_are_answered_503(
    server: ServerHandle, witness: Witness
) -> None:
    held: list[socket.socket] = []
    try:
        refused = None
        for _ in range(40):  # the witness holds one or two of the 16
            sock = connect(server)
            sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            status, _, body = read_response(sock)
            if status == 503:
                refused = json.loads(body)
                assert wait_closed(sock)
                sock.close()
                break
            assert status == 200
            held.append(sock)
        assert refused == {
            "error": "the server has 16 HTTP connections open, its limit "
            "(--http-max-connections): try again later"
        }
        assert 12 <= len(held) <= 16
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 30
    while True:  # the server sees the closes soon after
        status, _ = _exchange(server, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        if status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert status == 200


def test_pipelined_requests_past_the_limit_wait_their_turn(
    server: ServerHandle, witness: Witness
) -> None:
    """Past --http-max-pipelined-requests the connection is not read until the queue
    drains: every request is still answered, in order."""
    bodies = [
        json.dumps(
            {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [i]}]}
        ).encode()
        for i in range(40)
    ]
    with connect(server) as sock:
        sock.sendall(b"".join(_post("/v2/models/identity/infer", body) for body in bodies))
        for i in range(40):
            status, _, body = read_response(sock)
            assert status == 200
            assert json.loads(body)["outputs"][0]["data"] == [i]


@pytest.mark.parametrize(
    "partial",
    [
        b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n",  # the head, never ended
        b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",
    ],
    ids=["head", "body"],
)
def test_a_request_arriving_too_slowly_is_408(
    server: ServerHandle, witness: Witness, partial: bytes
) -> None:
    with connect(server) as sock:
        started = time.monotonic()
        for byte in partial:  # a byte at a time, slowloris-style, then nothing
            sock.sendall(bytes([byte]))
        status, headers, body = read_response(sock)
        waited = time.monotonic() - started
        assert status == 408
        assert json.loads(body) == {
            "error": "the request did not arrive within 2 s of its first byte "
            "(--http-request-timeout)"
        }
        assert headers["connection"] == "close"
        assert wait_closed(sock)
    assert waited >= 2.0


def test_an_idle_connection_between_requests_is_not_a_slow_request(
    server: ServerHandle,
) -> None:
    with connect(server) as sock:
        for _ in range(2):
            sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(sock)[0] == 200
            time.sleep(3.5)  # past --http-request-timeout, idle: the connection stays


# ------------------------------------------------------------------------------- gRPC


def test_grpc_messages_past_the_limits_are_resource_exhausted(
    server: ServerHandle, witness: Witness
) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        big = np.zeros(40_000, np.float32)  # 160 KB in: past the receive limit
        with pytest.raises(InferenceServerException) as info:
            client.infer("identity", [fp32_input(grpcclient, big)])
        assert info.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
        answer = np.zeros(5000, np.float32)  # 20 KB back: past the send limit
        with pytest.raises(InferenceServerException) as info:
            client.infer("identity", [fp32_input(grpcclient, answer)])
        assert info.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
        fits = np.arange(1000, dtype=np.float32)
        result = client.infer("identity", [fp32_input(grpcclient, fits)]).as_numpy("OUTPUT0")
        assert result is not None and result.tolist() == fits.tolist()


def test_tensor_limits_over_grpc(server: ServerHandle, witness: Witness) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        strings = grpcclient.InferInput("INPUT0", [65], "BYTES")
        strings.set_data_from_numpy(np.array([b"s"] * 65, np.object_))
        with pytest.raises(InferenceServerException) as info:
            client.infer("identity_bytes", [strings])
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert "(--max-bytes-element-count)" in info.value.message()
        wide = grpcclient.InferInput("INPUT0", [4097], "FP64")
        wide.set_data_from_numpy(np.zeros(4097, np.float64))
        with pytest.raises(InferenceServerException) as info:
            client.infer("identity_fp64", [wide])
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert "(--max-tensor-byte-size)" in info.value.message()


def test_grpc_connections_past_the_limit_are_refused(
    server: ServerHandle, witness: Witness
) -> None:
    channels = []
    refused = 0
    try:
        for _ in range(12):
            # A channel of its own each (no subchannel sharing): one connection each.
            channel = grpc.insecure_channel(
                server.grpc_url, options=[("grpc.use_local_subchannel_pool", 1)]
            )
            channels.append(channel)
            live = channel.unary_unary(
                "/inference.GRPCInferenceService/ServerLive",
                request_serializer=lambda _: b"",
                response_deserializer=lambda data: data,
            )
            try:
                live(b"", timeout=5)
            except grpc.RpcError as exc:
                assert exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN)
                refused += 1
        assert 3 <= refused <= 12 - 4  # the witness holds one connection of the 8
    finally:
        for channel in channels:
            channel.close()
