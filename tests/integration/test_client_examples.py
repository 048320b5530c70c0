"""Triton's own Python client examples run unchanged against this server.

Every example of the client repository's ``src/python/examples`` whose models can be written
as Python-backend models (client_example_models.py: ``simple``, ``simple_string``,
``simple_identity``, ``simple_int8``, ``repeat_int32``, ``custom_identity_int32`` and a
``densenet_onnx`` stand-in) runs in a subprocess against one server, and must exit with 0
after printing what it prints only once all its checks have passed. Examples that need
images, image classification models or CUDA are left out; the sequence and model-control
examples have their own modules (test_sequence_examples.py,
test_triton_model_control_examples.py).

The examples are not copied into this project: set ``TRITON_CLIENT_REPO`` to a clone of
github.com/triton-inference-server/client (a work tree or a bare git directory), e.g.

    TRITON_CLIENT_REPO=~/src/client .venv/bin/python -m pytest \
        tests/integration/test_client_examples.py

Without it these tests skip. The shared-memory examples use fixed region keys
(``/input_simple``...): two runs at once on one machine collide.

The models were written to behave as Triton's serving the same repository. This module
runs the examples against pytriton-core only (test_triton_model_control_examples.py runs
its examples against the real Triton too).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import pytest
from certificates import client_context, make_certificates, server_tls_flags
from client_example_models import write_client_example_repository
from harness import LOOPBACK, ServerHandle, run_pytriton_server
from triton_client_examples import require_client_repo, write_example

EXAMPLE_TIMEOUT_S = 120  # simple_grpc_custom_repeat.py alone waits 11 s by design
PASS_SHM = "PASS: system shared memory"
# reuse_infer_objects_client.py prints this after each of its three checked inferences.
END_OF_INFERENCE = "======== END ========"
# memory_growth_test.py has no URL flag: it reaches localhost:8000 (HTTP) and :8001 (gRPC).
DEFAULT_HTTP_PORT, DEFAULT_GRPC_PORT = 8000, 8001
# The shared-memory examples register regions, which Triton (since 2.73) and this server allow
# only when started so.
SERVER_FLAGS = ("--allow-client-shm=true",)


@dataclass(frozen=True)
class ClientExample:
    """One run of an example: its file, the protocol its ``-u`` URL is for, more flags, and
    what it prints only after everything it checks has passed. (Some examples exit with 0
    without checking anything when they cannot connect, and some print no PASS line.)"""

    script: str
    protocol: Literal["http", "grpc"]
    success: str
    flags: tuple[str, ...] = ()

    @property
    def test_id(self) -> str:
        return " ".join([self.script.removesuffix(".py"), *self.flags])


def _compressed(example: ClientExample, *flags: str) -> list[ClientExample]:
    """``example`` once more with each compression algorithm the clients offer."""
    return [
        replace(example, flags=tuple(part for flag in flags for part in (flag, algorithm)))
        for algorithm in ("gzip", "deflate")
    ]


_GRPC_INFER = ClientExample("simple_grpc_infer_client.py", "grpc", "PASS: infer")
_GRPC_AIO_INFER = ClientExample("simple_grpc_aio_infer_client.py", "grpc", "PASS: grpc aio infer")
# simple_http_infer_client.py prints the server's error for an unknown model last (and exits
# with 1 unless it is Triton's "Request for unknown model" message).
_HTTP_INFER = ClientExample("simple_http_infer_client.py", "http", "Request for unknown model")
_HTTP_AIO_INFER = ClientExample("simple_http_aio_infer_client.py", "http", "PASS: infer")
_HTTP_COMPRESSION = ("--request-compression-algorithm", "--response-compression-algorithm")

EXAMPLES = [
    _GRPC_INFER,
    *_compressed(_GRPC_INFER, "-C"),
    ClientExample("simple_grpc_async_infer_client.py", "grpc", "PASS: Async infer"),
    _GRPC_AIO_INFER,
    *_compressed(_GRPC_AIO_INFER, "-C"),
    ClientExample("simple_grpc_string_infer_client.py", "grpc", "PASS: string"),
    ClientExample("simple_grpc_shm_client.py", "grpc", PASS_SHM),
    ClientExample("simple_grpc_shm_string_client.py", "grpc", PASS_SHM),
    ClientExample("simple_grpc_custom_args_client.py", "grpc", "PASS: CustomArgs"),
    ClientExample("simple_grpc_keepalive_client.py", "grpc", "PASS: KeepAlive"),
    # prints the model's metadata last, then checks its config silently
    ClientExample("simple_grpc_health_metadata.py", "grpc", 'name: "simple"'),
    ClientExample("simple_grpc_custom_repeat.py", "grpc", "PASS: Decoupled API"),
    ClientExample("grpc_explicit_int_content_client.py", "grpc", "PASS: explicit int"),
    ClientExample("grpc_explicit_int8_content_client.py", "grpc", "PASS: explicit int8"),
    ClientExample("grpc_explicit_byte_content_client.py", "grpc", "PASS: explicit string"),
    ClientExample("grpc_client.py", "grpc", "PASS"),
    ClientExample("reuse_infer_objects_client.py", "grpc", END_OF_INFERENCE, ("-i", "grpc")),
    ClientExample("reuse_infer_objects_client.py", "http", END_OF_INFERENCE, ("-i", "http")),
    _HTTP_INFER,
    *_compressed(_HTTP_INFER, *_HTTP_COMPRESSION),
    replace(_HTTP_INFER, flags=("-H", "test:1")),
    # two requests in flight at once; prints this last for each answer, and exits with 1 at
    # a wrong one
    ClientExample("simple_http_async_infer_client.py", "http", "15 - 1 = 14"),
    _HTTP_AIO_INFER,
    *_compressed(_HTTP_AIO_INFER, *_HTTP_COMPRESSION),
    ClientExample("simple_http_string_infer_client.py", "http", "PASS: string"),
    ClientExample("simple_http_shm_client.py", "http", PASS_SHM),
    ClientExample("simple_http_shm_string_client.py", "http", PASS_SHM),
    # prints the model's metadata last
    ClientExample("simple_http_health_metadata.py", "http", "{'name': 'simple'"),
]


def run_example(script: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """``script`` run by this interpreter (whose environment has tritonclient) with ``flags``."""
    return subprocess.run(
        [sys.executable, str(script), *flags],
        capture_output=True,
        text=True,
        timeout=EXAMPLE_TIMEOUT_S,
        cwd=script.parent,
        check=False,
    )


def _check_passed(
    example: ClientExample, result: subprocess.CompletedProcess[str], server: ServerHandle
) -> None:
    output = f"{result.stdout}{result.stderr}"
    assert server.process.poll() is None, f"the server died:\n{output}\n{server.log()}"
    assert result.returncode == 0, f"{output}\n----- server log -----\n{server.log()}"
    assert example.success in result.stdout, output


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The examples' models. Every test here needs the examples: skips start here."""
    require_client_repo()
    return write_client_example_repository(tmp_path_factory.mktemp("client_examples"))


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[ServerHandle]:
    with run_pytriton_server(repository, *SERVER_FLAGS) as handle:
        yield handle


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda example: example.test_id)
def test_client_example(server: ServerHandle, example: ClientExample, tmp_path: Path) -> None:
    script = write_example(example.script, tmp_path)
    url = server.http_url if example.protocol == "http" else server.grpc_url
    result = run_example(script, "-u", url, *example.flags)
    _check_passed(example, result, server)


# The examples with options for TLS and a client certificate (HTTPS is this server's
# extension: Triton serves TLS on gRPC only).
TLS_EXAMPLES = [_GRPC_INFER, _GRPC_AIO_INFER, _HTTP_INFER, _HTTP_AIO_INFER]


def _client_tls_flags(protocol: str, certs: dict[str, Path]) -> list[str]:
    ca, cert, key = (str(certs[name]) for name in ("ca", "client_cert", "client_key"))
    if protocol == "http":
        return ["--ssl", "--ca-certs", ca, "--cert-file", cert, "--key-file", key]
    return ["--ssl", "--root-certificates", ca, "--certificate-chain", cert, "--private-key", key]


@pytest.fixture(scope="module")
def certificates_folder(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_certificates(tmp_path_factory.mktemp("certificates"))


@pytest.fixture(scope="module")
def tls_server(repository: Path, certificates_folder: dict[str, Path]) -> Iterator[ServerHandle]:
    """A server of the same repository with mutual TLS on both protocols."""
    with run_pytriton_server(
        repository,
        *server_tls_flags(certificates_folder, mutual=True, grpc=True),
        https=client_context(certificates_folder, client_certificate=True),
    ) as handle:
        yield handle


@pytest.mark.parametrize("example", TLS_EXAMPLES, ids=lambda example: example.test_id)
def test_client_example_over_tls(
    tls_server: ServerHandle,
    certificates_folder: dict[str, Path],
    example: ClientExample,
    tmp_path: Path,
) -> None:
    script = write_example(example.script, tmp_path)
    url = tls_server.http_url if example.protocol == "http" else tls_server.grpc_url
    flags = _client_tls_flags(example.protocol, certificates_folder)
    result = run_example(script, "-u", url, *flags)
    _check_passed(example, result, tls_server)


def _port_taken(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex((LOOPBACK, port)) == 0


@pytest.fixture(scope="module")
def default_ports_server(repository: Path) -> Iterator[ServerHandle]:
    """A server of the same repository on localhost:8000 and :8001, Triton's defaults."""
    taken = [port for port in (DEFAULT_HTTP_PORT, DEFAULT_GRPC_PORT) if _port_taken(port)]
    if taken:
        pytest.skip(f"memory_growth_test.py only reaches localhost:8000/8001; {taken} in use")
    with run_pytriton_server(
        repository, *SERVER_FLAGS, http_port=DEFAULT_HTTP_PORT, grpc_port=DEFAULT_GRPC_PORT
    ) as handle:
        yield handle


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_memory_growth_example(
    default_ports_server: ServerHandle, protocol: str, tmp_path: Path
) -> None:
    """100 inferences of custom_identity_int32, each from a new client; it prints nothing
    unless an output is wrong."""
    script = write_example("memory_growth_test.py", tmp_path)
    result = run_example(script, "-i", protocol)
    output = f"{result.stdout}{result.stderr}"
    assert result.returncode == 0, f"{output}\n{default_ports_server.log()}"
    assert "incorrect output" not in output
