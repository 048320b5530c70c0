"""Differential tests of tritonserver flags that change what clients see: pytriton-core and
the real Triton 2.51, each started with the same flags, answer alike.

* ``--model-namespacing``: the same model name in two repositories.
* ``--http-header-forward-pattern`` / ``--grpc-header-forward-pattern``: matching headers
  reach the model as request parameters.
* ``--log-verbose=1``: each HTTP request and gRPC call is logged, in Triton's words, and
  grpc's own debug output stays off.
* A load of a model that has not changed is a no-op; a changed one reloads.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from control_models import FP32_IO_CONFIG, write_model_folder, write_simple
from harness import (
    TEST_MODELS_REPOSITORY,
    ServerHandle,
    real_triton_home,
    run_pytriton_server,
    run_real_triton,
)
from test_differential import SELF_CHECK, Raw, assert_same, send_raw
from test_differential_control import Grpc, assert_same_grpc, send_grpc
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.real_triton


@contextlib.contextmanager
def both(
    repositories: Path | list[Path], *flags: str
) -> Iterator[tuple[ServerHandle, ServerHandle]]:
    """The real Triton and pytriton-core, both started with ``flags``."""
    with run_real_triton(repositories, *flags) as triton:
        run = run_real_triton if SELF_CHECK else run_pytriton_server
        with run(repositories, *flags) as ours:
            yield ours, triton


# ---------------------------------------------------------------------------------------------
# --model-namespacing


@pytest.fixture(scope="module")
def namespaced(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerHandle, ServerHandle]]:
    root = tmp_path_factory.mktemp("namespaces")
    first, second = root / "first", root / "second"
    write_simple(first, "shared")
    write_simple(second, "shared")
    write_simple(first, "only_first")
    with both([first, second], "--model-namespacing=true") as pair:
        yield pair


NAMESPACE_CASES: dict[str, Raw | Grpc] = {
    "index": Raw("POST", "/v2/repository/index"),
    "ready": Raw("GET", "/v2/health/ready"),
    "ambiguous-metadata": Raw("GET", "/v2/models/shared"),
    "ambiguous-ready": Raw("GET", "/v2/models/shared/ready"),
    "ambiguous-infer": Raw("POST", "/v2/models/shared/infer", {"inputs": []}),
    "ambiguous-stats": Raw("GET", "/v2/models/shared/stats"),
    "unknown-metadata": Raw("GET", "/v2/models/no_such_model"),
    "unknown-config": Raw("GET", "/v2/models/no_such_model/config"),
    "unique-metadata": Raw("GET", "/v2/models/only_first"),
    "grpc-ambiguous-metadata": Grpc("get_model_metadata", ("shared",)),
    "grpc-unknown-metadata": Grpc("get_model_metadata", ("no_such_model",)),
    "grpc-ambiguous-ready": Grpc("is_model_ready", ("shared",)),
}


@pytest.mark.parametrize("name", list(NAMESPACE_CASES))
def test_namespacing(name: str, namespaced: tuple[ServerHandle, ServerHandle]) -> None:
    ours, triton = namespaced
    case = NAMESPACE_CASES[name]
    if isinstance(case, Raw):
        assert_same(case, send_raw(ours, case), send_raw(triton, case))
    else:
        assert_same_grpc(case, send_grpc(ours, case), send_grpc(triton, case))


# ---------------------------------------------------------------------------------------------
# Header forwarding


@pytest.fixture(scope="module")
def forwarding() -> Iterator[tuple[ServerHandle, ServerHandle]]:
    with both(
        TEST_MODELS_REPOSITORY,
        "--http-header-forward-pattern=^x-fwd-",
        "--grpc-header-forward-pattern=^x-fwd-",
    ) as pair:
        yield pair


def _key_tensor(module: Any) -> Any:
    tensor = module.InferInput("KEY", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([b"x-fwd-a"], dtype=np.object_))
    return tensor


def _forwarded(server: ServerHandle, protocol: str, headers: dict[str, str]) -> Any:
    """What the model saw as its parameters, or the error the request got."""
    module: Any = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    client = module.InferenceServerClient(url)
    try:
        # A copy: the HTTP client adds its own headers to the dict it is given.
        result = client.infer("request_parameters", [_key_tensor(module)], headers=dict(headers))
    except InferenceServerException as error:
        return ("error", error.message())
    finally:
        client.close()
    return json.loads(result.as_numpy("ALL")[0])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize(
    "headers",
    [
        {"x-fwd-a": "1", "x-fwd-b": "two", "x-other": "3"},
        {"x-other": "3"},
        {"x-fwd-a": "with spaces and = signs"},
    ],
)
def test_header_forwarding(
    protocol: str, headers: dict[str, str], forwarding: tuple[ServerHandle, ServerHandle]
) -> None:
    ours, triton = forwarding
    assert _forwarded(ours, protocol, headers) == _forwarded(triton, protocol, headers)


def test_reserved_names_are_forwarded_as_any_other() -> None:
    """Triton 2.51 forwards a header named like a reserved parameter as a plain string
    parameter (2.73 refuses it)."""
    pattern = "--http-header-forward-pattern=priority|triton_"
    with both(TEST_MODELS_REPOSITORY, pattern) as (ours, triton):
        for headers in ({"priority": "1"}, {"triton_x": "1"}):
            assert _forwarded(ours, "http", headers) == _forwarded(triton, "http", headers)


# ---------------------------------------------------------------------------------------------
# --log-verbose=1


VERBOSE_LINES = [
    re.compile(r'"?HTTP request: 2 /v2/models/simple/infer"?'),
    re.compile(r'"?Process for ModelInferHandler, rpc_ok=1, \d+ step START"?'),
    re.compile(r'"?Process for ModelInferHandler, rpc_ok=1, \d+ step COMPLETE"?'),
    re.compile(r'"?Process for ModelMetadata, rpc_ok=1, \d+ step START"?'),
    re.compile(r'"?model simple, instance simple_0, executing 1 requests"?'),
]


def _send_each_kind(server: ServerHandle) -> None:
    data = np.ones((1, 16), np.int32)
    for module, url in ((httpclient, server.http_url), (grpcclient, server.grpc_url)):
        client: Any = module.InferenceServerClient(url)
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            tensor = module.InferInput(name, [1, 16], "INT32")
            tensor.set_data_from_numpy(data)
            inputs.append(tensor)
        client.infer("simple", inputs)
        client.get_model_metadata("simple")
        client.close()


def test_verbose_log_names_each_request(tmp_path: Path) -> None:
    write_simple(tmp_path)
    with both(tmp_path, "--log-verbose=1") as (ours, triton):
        for server in (ours, triton):
            _send_each_kind(server)
        for pattern in VERBOSE_LINES:
            for server in (ours, triton):
                assert pattern.search(server.log()), (server.name, pattern.pattern)
        # grpc's own debug output (its poller logs every wake-up) stays off.
        assert "cygrpc" not in ours.log()
        assert len(ours.log().splitlines()) < 400


# ---------------------------------------------------------------------------------------------
# Loading an unchanged model is a no-op


COUNTS_INITIALIZE = """
import os
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        # Beside the model folder, not in it: a file written there would change the model.
        repository = os.path.dirname(args["model_repository"])
        with open(os.path.join(repository, "initialized"), "a") as marker:
            marker.write("x")

    def execute(self, requests):
        return [pb_utils.InferenceResponse([]) for _ in requests]
"""


def _compile_bytecode(model_dir: Path) -> None:
    """Write model.py's bytecode before a server imports it. Triton's model folder times
    include the __pycache__ its stub writes on the first import, so without this its next
    load would see a change (and reload once); ours leaves __pycache__ out of the times."""
    interpreters = [Path(sys.executable), real_triton_home() / "venv" / "bin" / "python"]
    for python in interpreters:
        if python.is_file():
            subprocess.run(
                [str(python), "-m", "compileall", "-q", str(model_dir)], check=True, timeout=60
            )


def _initializations(model_dir: Path) -> int:
    marker = model_dir.parent / "initialized"
    return len(marker.read_text()) if marker.exists() else 0


def test_loading_an_unchanged_model_does_nothing(tmp_path: Path) -> None:
    counts = []
    for side in ("triton", "ours"):
        root = tmp_path / side
        model_dir = write_model_folder(root, "counted", FP32_IO_CONFIG, COUNTS_INITIALIZE)
        run = run_real_triton if side == "triton" or SELF_CHECK else run_pytriton_server
        _compile_bytecode(model_dir)
        with run(root, "--model-control-mode=explicit", "--load-model=counted") as server:
            client = httpclient.InferenceServerClient(server.http_url)
            seen = [_initializations(model_dir)]
            client.load_model("counted")  # nothing changed
            seen.append(_initializations(model_dir))
            (model_dir / "1" / "model.py").write_text(COUNTS_INITIALIZE + "\n# changed\n")
            _compile_bytecode(model_dir)
            client.load_model("counted")  # the version changed: it reloads
            seen.append(_initializations(model_dir))
            # An override equal to the config serving: the version keeps serving.
            client.load_model("counted", config=COUNTING_CONFIG_JSON)
            seen.append(_initializations(model_dir))
            client.load_model("counted", config=CHANGED_CONFIG_JSON)  # a new config reloads
            seen.append(_initializations(model_dir))
            client.close()
        counts.append(seen)
    assert counts[0] == counts[1] == [1, 1, 2, 2, 3]


COUNTING_CONFIG_JSON = json.dumps(
    {
        "backend": "python",
        "max_batch_size": 0,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [1]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [1]}],
    }
)
CHANGED_CONFIG_JSON = json.dumps(
    {**json.loads(COUNTING_CONFIG_JSON), "parameters": {"changed": {"string_value": "yes"}}}
)
