"""The gRPC transport's rules, over a real socket: keepalive pings and their watchdog, the
client's ping strikes, connection age, the server's own deadline, and shutdown. A raw
HTTP/2 client (python-hyper's ``h2``) sees what gRPC clients hide; ``tritonclient``
checks that the calls of a well-behaved client go on."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from harness import ServerHandle, run_pytriton_server, write_python_model

SLOW_CONFIG = """
name: "slow"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 1 ] } ]
"""
SLOW_MODEL = """
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            seconds = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            time.sleep(float(seconds[0]))
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", seconds)]))
        return responses
"""
LIVE = "/inference.GRPCInferenceService/ServerLive"


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("transport")
    write_python_model(root, "slow", SLOW_CONFIG, SLOW_MODEL)
    return root


class RawClient:
    """One HTTP/2 connection to the server's gRPC port, driven by hand."""

    def __init__(self, server: ServerHandle, answer_pings: bool = True) -> None:
        host, port = server.grpc_url.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        config = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self.h2 = h2.connection.H2Connection(config)
        self.h2.initiate_connection()
        self.answer_pings = answer_pings
        self.events: list[Any] = []
        self.closed = False
        self.flush()

    def flush(self) -> None:
        data = self.h2.data_to_send()
        if data and not self.closed:
            self.sock.sendall(data)

    def read(self, seconds: float) -> list[Any]:
        """What the server sends within ``seconds`` (or until it closes)."""
        deadline = time.monotonic() + seconds
        new: list[Any] = []
        while not self.closed and (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                break
            except ConnectionResetError:
                data = b""
            if not data:
                self.closed = True
                break
            new += self.h2.receive_data(data)
            if self.answer_pings:
                self.flush()
        self.events += new
        return new

    def call(self, path: str, message: bytes, **headers: str) -> int:
        stream_id = self.h2.get_next_available_stream_id()
        head = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", "x"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            *headers.items(),
        ]
        self.h2.send_headers(stream_id, head)
        self.h2.send_data(stream_id, struct.pack(">BI", 0, len(message)) + message, end_stream=True)
        self.flush()
        return stream_id

    def close(self) -> None:
        self.sock.close()


def of(events: list[Any], kind: type) -> list[Any]:
    return [event for event in events if isinstance(event, kind)]


def _slow_request(seconds: float) -> bytes:
    """A ModelInferRequest for "slow" sleeping ``seconds``, serialized."""
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name="slow")
    tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=[1])
    del tensor
    request.raw_input_contents.append(np.array([seconds], np.float32).tobytes())
    return bytes(request.SerializeToString())


def test_keepalive_pings_and_their_watchdog(repository: Path) -> None:
    flags = (
        "--grpc-keepalive-time=200",
        "--grpc-keepalive-timeout=300",
        "--grpc-keepalive-permit-without-calls=true",
        "--grpc-http2-max-pings-without-data=0",
    )
    with run_pytriton_server(repository, *flags) as server:
        answering = RawClient(server)
        silent = RawClient(server, answer_pings=False)
        answering.read(1.2)
        silent.read(1.2)
        assert len(of(answering.events, h2.events.PingReceived)) >= 3
        assert not answering.closed  # it answered each one
        assert silent.closed  # no answer within the timeout: the server closed it
        answering.close()


def test_pings_past_the_strikes_end_the_connection(repository: Path) -> None:
    flags = (
        "--grpc-keepalive-permit-without-calls=true",
        "--grpc-http2-min-recv-ping-interval-without-data=60000",
        "--grpc-http2-max-ping-strikes=2",
    )
    with run_pytriton_server(repository, *flags) as server:
        client = RawClient(server)
        for opaque in (b"pingping", b"pingpong", b"pongping", b"pongpong"):
            client.h2.ping(opaque)
            client.flush()
            client.read(0.1)
        (goaway,) = of(client.events, h2.events.ConnectionTerminated)
        assert goaway.error_code == 0xB and goaway.additional_data == b"too_many_pings"
        client.close()
        # Calls in between would have cleared the strikes; other clients are unaffected.
        assert grpcclient.InferenceServerClient(server.grpc_url).is_server_live()


def test_connection_age_sends_goaway_then_closes_after_the_grace(repository: Path) -> None:
    flags = ("--grpc-max-connection-age=300", "--grpc-max-connection-age-grace=300")
    with run_pytriton_server(repository, *flags) as server:
        client = RawClient(server)
        stream_id = client.call("/inference.GRPCInferenceService/ModelInfer", _slow_request(2.0))
        client.read(1.0)
        assert of(client.events, h2.events.ConnectionTerminated)  # the GOAWAY, in time
        assert client.closed  # the call outlived the grace: the connection was cut
        assert not [
            e
            for e in client.events
            if getattr(e, "stream_id", None) == stream_id and isinstance(e, h2.events.StreamEnded)
        ]
        client.close()
        # A client reconnects and goes on.
        tc = grpcclient.InferenceServerClient(server.grpc_url)
        for _ in range(3):
            assert tc.is_server_live()
            time.sleep(0.2)
        tc.close()


def test_the_servers_own_deadline_ends_a_call(repository: Path) -> None:
    with run_pytriton_server(repository) as server:
        client = RawClient(server)
        stream_id = client.call(
            "/inference.GRPCInferenceService/ModelInfer",
            _slow_request(1.0),
            **{"grpc-timeout": "200m"},
        )
        started = time.monotonic()
        while not of(client.events, h2.events.StreamEnded) and time.monotonic() - started < 5:
            client.read(0.1)
        elapsed = time.monotonic() - started
        headers = [e for e in client.events if isinstance(e, h2.events.ResponseReceived)]
        assert headers and headers[0].stream_id == stream_id
        assert (b"grpc-status", b"4") in headers[0].headers  # DEADLINE_EXCEEDED
        assert elapsed < 0.9  # answered at the deadline, not when the model finished
        client.close()
        # The server goes on serving.
        tc = grpcclient.InferenceServerClient(server.grpc_url)
        tensor = grpcclient.InferInput("INPUT0", [1], "FP32")
        tensor.set_data_from_numpy(np.array([0.0], np.float32))
        assert tc.infer("slow", [tensor]).as_numpy("OUTPUT0").tolist() == [0.0]
        tc.close()


def test_a_stop_answers_calls_in_flight_within_the_grace(repository: Path) -> None:
    with run_pytriton_server(repository, "--exit-timeout-secs=10") as server:
        client = RawClient(server)
        stream_id = client.call("/inference.GRPCInferenceService/ModelInfer", _slow_request(0.5))
        client.read(0.1)
        server.process.terminate()
        client.read(3.0)
        assert of(client.events, h2.events.ConnectionTerminated)  # told: no new calls
        ended = [e.stream_id for e in of(client.events, h2.events.StreamEnded)]
        assert stream_id in ended  # the call in flight was answered
        trailers = of(client.events, h2.events.TrailersReceived)
        assert (b"grpc-status", b"0") in trailers[0].headers
        client.close()
