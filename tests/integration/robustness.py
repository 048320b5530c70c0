"""What the limit, fault and soak tests share: identity models of any datatype, a witness
client whose answers must stay exact while another client misbehaves, and raw sockets.

    with Witness(server) as witness:
        ...misbehave...
    witness.check()  # every answer it got was exact, and it got some on both protocols
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from types import TracebackType

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from harness import ServerHandle, write_python_model

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


def identity_config(name: str, data_type: str, max_batch_size: int = 0) -> str:
    return f"""
name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT0", data_type: {data_type}, dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0", data_type: {data_type}, dims: [ -1 ] }} ]
"""


def write_identity_model(root: Path, name: str, data_type: str = "TYPE_FP32") -> Path:
    """``name``: OUTPUT0 = INPUT0, a 1-D tensor of ``data_type``."""
    return write_python_model(root, name, identity_config(name, data_type), IDENTITY_MODEL)


def fp32_input(module: object, values: np.ndarray) -> object:
    """An INPUT0 of ``values`` for tritonclient.http or tritonclient.grpc (``module``)."""
    tensor = module.InferInput("INPUT0", list(values.shape), "FP32")  # type: ignore[attr-defined]
    tensor.set_data_from_numpy(values)
    return tensor


class Witness:
    """A well-behaved client, over HTTP and gRPC in turn, on a thread of its own: each
    request carries values no other request has, and each answer must hold exactly them.

    ``check()`` raises if an answer was wrong, failed, or if no answer came on either
    protocol; the model named must be a FP32 identity (``write_identity_model``).
    Entering waits for its first answer on each protocol, so its connections are open
    before the test misbehaves (a test that fills the server's connection limit would
    otherwise race the witness's first connect).
    """

    def __init__(self, server: ServerHandle, model: str = "identity", interval_s: float = 0.01):
        self._server = server
        self._model = model
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="witness", daemon=True)
        self.answers = {"http": 0, "grpc": 0}
        self.failures: list[str] = []

    def __enter__(self) -> Witness:
        self._thread.start()
        self._wait_for_answers(1)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        http = httpclient.InferenceServerClient(self._server.http_url, network_timeout=60)
        grpc = grpcclient.InferenceServerClient(self._server.grpc_url)
        serial = 0
        try:
            while not self._stop.is_set():
                for protocol, client, module in (
                    ("http", http, httpclient),
                    ("grpc", grpc, grpcclient),
                ):
                    serial += 1
                    values = np.arange(serial, serial + 7, dtype=np.float32)
                    try:
                        result = client.infer(self._model, [fp32_input(module, values)])
                        answer = result.as_numpy("OUTPUT0")
                        if answer is None or answer.tolist() != values.tolist():
                            self.failures.append(f"{protocol} #{serial}: {answer!r}")
                        else:
                            self.answers[protocol] += 1
                    except Exception as exc:  # each failure is a finding
                        self.failures.append(f"{protocol} #{serial}: {exc}")
                self._stop.wait(self._interval_s)
        finally:
            http.close()
            grpc.close()

    def _wait_for_answers(self, minimum: int) -> None:
        """Until ``minimum`` answers on each protocol, a failure, or 60 s."""
        deadline = time.monotonic() + 60
        while min(self.answers.values()) < minimum and not self.failures:
            if time.monotonic() > deadline or not self._thread.is_alive():
                break
            time.sleep(0.01)

    def check(self, minimum: int = 1) -> None:
        """Once it has ``minimum`` answers on each protocol (a wait, up to 60 s), stop and
        require every answer to have been exact."""
        self._wait_for_answers(minimum)
        self.stop()
        assert self.failures == [], self.failures[:5]
        assert min(self.answers.values()) >= minimum, self.answers


def connect(server: ServerHandle, timeout: float = 30.0) -> socket.socket:
    host, port = server.http_url.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {data[:200]!r}")
        data += chunk
    return data


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length: (status, headers, body). Reads no byte
    past it, so pipelined answers can be read one by one."""
    while True:
        peeked = sock.recv(65536, socket.MSG_PEEK)
        if not peeked:
            raise ConnectionError("closed before a response")
        end = peeked.find(b"\r\n\r\n")
        if end >= 0:
            break
        time.sleep(0.001)
    head = _recv_exactly(sock, end + 4)[:-4]
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = _recv_exactly(sock, int(headers.get("content-length", "0")))
    return status, headers, body


def wait_closed(sock: socket.socket, timeout: float = 30.0) -> bool:
    """Whether the server closes ``sock`` (EOF or reset) within ``timeout``; what it still
    sends before is read and dropped."""
    deadline = time.monotonic() + timeout
    sock.settimeout(0.5)
    while time.monotonic() < deadline:
        try:
            if not sock.recv(65536):
                return True
        except TimeoutError:
            continue
        except ConnectionError:
            return True
    return False
