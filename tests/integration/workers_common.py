"""What the ``--workers N`` tests share: a request that tells which worker ran it, which
process each worker is (from the parent's log), and the wait until the server is ready
(again) after a worker was killed."""

from __future__ import annotations

import http.client
import re
import time

import numpy as np
import tritonclient.http as httpclient
from harness import ServerHandle
from tritonclient.utils import InferenceServerException

WAIT_S = 90.0  # a wait, not a limit: a loaded machine starts a worker slowly

# A Python model taking FP32 ``IN`` and answering with its process's pid (``PID``): which
# worker ran a request. ``{name}`` is the model's name.
PID_MODEL_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN", data_type: TYPE_FP32, dims: [ 1 ] }} ]
output [ {{ name: "PID", data_type: TYPE_INT64, dims: [ 1 ] }} ]
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
"""


def answering_pid(url: str, model: str, name: str, value: float) -> int:
    """One request (FP32 ``name`` = ``value``) on a connection of its own, to a model that
    answers with its process's pid: which worker ran it."""
    client = httpclient.InferenceServerClient(url, network_timeout=WAIT_S)
    try:
        data = httpclient.InferInput(name, [1], "FP32")
        data.set_data_from_numpy(np.array([value], dtype=np.float32))
        return int(client.infer(model, [data]).as_numpy("PID")[0])
    finally:
        client.close()


def metrics_page(handle: ServerHandle) -> str:
    """The ``/metrics`` page, on a connection of its own (any worker's)."""
    assert handle.metrics_url is not None
    host, port = handle.metrics_url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request("GET", "/metrics")
    text = connection.getresponse().read().decode()
    connection.close()
    return text


def worker_pids(handle: ServerHandle) -> dict[int, int]:
    """worker index -> its pid, the latest start of each, from the parent's log."""
    found = re.findall(r"worker (\d+) started \(pid (\d+)\)", handle.log())
    return {int(index): int(pid) for index, pid in found}


def wait_ready(url: str, ready: bool = True) -> None:
    """Until the readiness a connection gets (each a new one: any worker) is ``ready``."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        client = httpclient.InferenceServerClient(url)
        try:
            if client.is_server_ready() == ready:
                return
        except (InferenceServerException, OSError):
            pass  # a connection that reached a dying worker, or no worker listening yet
        finally:
            client.close()
        time.sleep(0.05)
    raise AssertionError(f"server readiness never became {ready}")


def wait_restarted(handle: ServerHandle, index: int, victim: int) -> None:
    """Until worker ``index`` (``victim`` was its pid) runs again and the server is ready."""
    deadline = time.monotonic() + WAIT_S
    while worker_pids(handle)[index] == victim and time.monotonic() < deadline:
        time.sleep(0.05)
    assert worker_pids(handle)[index] != victim, f"worker {index} was not started again"
    wait_ready(handle.http_url, True)
