"""gRPC streams against clients that misbehave: one that sends and never reads holds the
server to a bounded outbox, and a cancelled stream with unread answers is freed at once,
not at the next full garbage collection."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from harness import ServerHandle, free_port, memory_kib, run_pytriton_server, write_python_model
from tritonclient.grpc import service_pb2

from pytriton_core import Server
from pytriton_core.frontends.grpc import stream

CONFIG = """
name: "big"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
"""
# A 4 MiB answer to every request: INPUT0 + 0, 1, 2, ...
MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.ramp = np.arange(1 << 20, dtype=np.float32)

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", self.ramp + x[0])
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""
ANSWER_BYTES = 4 << 20
STREAM_METHOD = "/inference.GRPCInferenceService/ModelStreamInfer"
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 2**31 - 1)]


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("grpc_security")
    write_python_model(root, "big", CONFIG, MODEL)
    return root


def request_bytes(value: float, request_id: str = "") -> bytes:
    request = service_pb2.ModelInferRequest(model_name="big", id=request_id)
    tensor = request.inputs.add(name="INPUT0", datatype="FP32")
    tensor.shape.append(1)
    request.raw_input_contents.append(np.array([value], np.float32).tobytes())
    return request.SerializeToString()


def open_stream(url: str, count: int) -> tuple[grpc.Channel, Iterator[bytes], threading.Event]:
    """A raw stream that sends ``count`` requests (values 0, 1, ...) and reads nothing
    until the caller iterates the answers; the request side stays open until ``done``."""
    channel = grpc.insecure_channel(url, options=CHANNEL_OPTIONS)
    done = threading.Event()

    def requests() -> Iterator[bytes]:
        for i in range(count):
            yield request_bytes(float(i), str(i))
        done.wait(120)

    stream = channel.stream_stream(STREAM_METHOD)
    return channel, stream(requests()), done


SENT = 100  # 400 MiB of answers
# The stated bound: the outbox (64 MiB) and the answers of the requests in flight (64 MiB
# more: 16 of 4 MiB), each answer's output array until it is encoded (16 x 4 MiB), gRPC's
# copy of the message being written and allocator slack (64 MiB). Without flow control the
# server runs every request and queues all 400 MiB.
OUTBOX_BYTES = getattr(stream, "MAX_QUEUED_BYTES", 64 << 20)
RSS_BOUND_KIB = (2 * OUTBOX_BYTES + 32 * ANSWER_BYTES) // 1024


def test_a_stream_client_that_reads_nothing_is_held_to_the_outbox_bound(
    repository: Path,
) -> None:
    with run_pytriton_server(repository) as server:
        pid = server.process.pid
        baseline = memory_kib(pid)
        channel, answers, done = open_stream(server.grpc_url, SENT)
        try:
            time.sleep(4.0)  # the server does what it will while nothing is read
            peak = memory_kib(pid, "VmHWM")
            print(f"RSS: baseline {baseline} KiB, peak {peak} KiB, bound +{RSS_BOUND_KIB} KiB")
            assert peak - baseline < RSS_BOUND_KIB
            # Reading now, every answer comes, exact.
            ramp = np.arange(1 << 20, dtype=np.float32)
            seen = set()
            for _ in range(SENT):
                response = service_pb2.ModelStreamInferResponse.FromString(next(answers))
                assert response.error_message == ""
                i = int(response.infer_response.id)
                output = np.frombuffer(response.infer_response.raw_output_contents[0], np.float32)
                assert np.array_equal(output, ramp + np.float32(i))
                seen.add(i)
            assert seen == set(range(SENT))
        finally:
            done.set()
            channel.close()
        assert_serves(server)


def assert_serves(server: ServerHandle) -> None:
    with grpc.insecure_channel(server.grpc_url, options=CHANNEL_OPTIONS) as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        reply = service_pb2.ModelInferResponse.FromString(call(request_bytes(1.5), timeout=60))
        output = np.frombuffer(reply.raw_output_contents[0], np.float32)
        assert output[0] == 1.5 and output[-1] == (1 << 20) - 1 + 1.5


def streams_alive() -> int:
    return sum(1 for o in gc.get_objects() if isinstance(o, stream.InferStream))


def test_a_cancelled_stream_is_freed_without_a_garbage_collection(repository: Path) -> None:
    port = free_port()
    with Server(
        model_repository=repository, allow_grpc=True, grpc_port=port, grpc_address="127.0.0.1"
    ):
        gc.collect()
        gc.disable()  # only reference counting may free it
        try:
            channel, answers, done = open_stream(f"127.0.0.1:{port}", 20)
            deadline = time.monotonic() + 60
            while streams_alive() == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert streams_alive() == 1
            time.sleep(2.0)  # the 20 answers (80 MiB) wait unread
            answers.cancel()  # type: ignore[attr-defined]
            done.set()
            deadline = time.monotonic() + 30
            while streams_alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert streams_alive() == 0
            channel.close()
        finally:
            gc.enable()
