"""Real memory exhaustion: the server runs under an address-space limit (RLIMIT_AS, set on
the running process a little above what it uses), and a model asking for more memory than
is left, or a request body larger than what is left, gets an error answer while another
client is served exactly throughout; the server keeps serving, and the same model answers
a request that fits.

Unlike test_faults.py's out-of-memory model (an allocation no machine could satisfy), these
allocations would succeed without the limit: it is the limit that runs out.
"""

from __future__ import annotations

import resource
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from harness import ServerHandle, memory_kib, run_pytriton_server, write_python_model
from robustness import Witness, connect, write_identity_model
from tritonclient.utils import InferenceServerException

HEADROOM = 384 << 20  # address space the server may still take once it runs
FITS_MIB = 64
EXHAUSTS_MIB = 1024  # past the headroom

# OUTPUT0 = the sum of a freshly allocated and written buffer of INPUT0[0] MiB of ones.
HOG_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            mib = int(pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()[0])
            buffer = np.ones(mib << 20, dtype=np.uint8)  # every page written
            total = np.array([buffer.sum(dtype=np.int64)], dtype=np.int64)
            del buffer
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", total)]))
        return responses
"""
HOG_CONFIG = """
name: "hog"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_INT64, dims: [ 1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_INT64, dims: [ 1 ] } ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    root = tmp_path_factory.mktemp("exhaustion")
    write_identity_model(root, "identity")
    write_python_model(root, "hog", HOG_CONFIG, HOG_MODEL)
    with run_pytriton_server(root, "--http-max-input-size=2147483647") as handle:
        in_use = memory_kib(handle.process.pid, "VmSize") << 10
        limit = in_use + HEADROOM
        resource.prlimit(handle.process.pid, resource.RLIMIT_AS, (limit, limit))
        yield handle


def hog(client: httpclient.InferenceServerClient, mib: int) -> int:
    tensor = httpclient.InferInput("INPUT0", [1], "INT64")
    tensor.set_data_from_numpy(np.array([mib], np.int64))
    result = client.infer("hog", [tensor]).as_numpy("OUTPUT0")
    assert result is not None
    return int(result[0])


def test_a_model_that_exhausts_the_memory_limit_fails_only_its_request(
    server: ServerHandle, witness: Witness
) -> None:
    with httpclient.InferenceServerClient(server.http_url, network_timeout=120) as http:
        assert hog(http, FITS_MIB) == FITS_MIB << 20  # real allocations work under the limit
        for _ in range(3):
            with pytest.raises(InferenceServerException, match="Unable to allocate"):
                hog(http, EXHAUSTS_MIB)
            assert hog(http, FITS_MIB) == FITS_MIB << 20
        with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
            tensor = grpcclient.InferInput("INPUT0", [1], "INT64")
            tensor.set_data_from_numpy(np.array([EXHAUSTS_MIB], np.int64))
            with pytest.raises(InferenceServerException, match="Unable to allocate"):
                grpc.infer("hog", [tensor])
        assert http.is_server_live() and http.is_model_ready("hog")


def test_a_request_body_past_the_memory_limit_is_answered_503(
    server: ServerHandle, witness: Witness
) -> None:
    length = 1 << 30  # a binary FP32 tensor the server would have to hold whole
    head = (
        f"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n"
        f"Content-Type: application/octet-stream\r\n"
        f"Inference-Header-Content-Length: 0\r\nContent-Length: {length}\r\n\r\n"
    ).encode()
    with connect(server) as sock:
        sock.sendall(head)
        chunk = bytes(1 << 20)
        answer = b""
        try:
            for _ in range(length >> 20):
                sock.sendall(chunk)
        except OSError:  # the server answered and closed while we were still sending
            pass
        sock.settimeout(60)
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except OSError:
            pass
    assert answer.startswith(b"HTTP/1.1 503 "), answer[:300]
    assert b'{"error":"out of memory: the server cannot hold this request now"}' in answer
    with httpclient.InferenceServerClient(server.http_url) as http:
        assert http.is_server_live()
