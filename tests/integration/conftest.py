"""Shared fixtures for the integration tests (helpers live in harness.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from certificates import certificates  # noqa: F401  (the TLS tests' fixture)
from harness import EXAMPLES_REPOSITORY, ServerHandle, run_pytriton_server
from leaks import check_no_leaks, live_objects
from robustness import Witness


@pytest.fixture(scope="module")
def examples_server() -> Iterator[ServerHandle]:
    """pytriton-core serving examples/model_repository, as `pytriton-server` does by default."""
    with run_pytriton_server(EXAMPLES_REPOSITORY) as server:
        yield server


# Clients of a module's own ``server`` fixture (for the modules that define one).


@pytest.fixture(scope="module")
def http(server: ServerHandle) -> Iterator[httpclient.InferenceServerClient]:
    with httpclient.InferenceServerClient(server.http_url, network_timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def grpc(server: ServerHandle) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    yield client
    client.close()


@pytest.fixture
def witness(server: ServerHandle) -> Iterator[Witness]:
    """Another client served throughout the test, its every answer checked at the end
    (the module's ``server`` must have a FP32 identity model named ``identity``)."""
    with Witness(server) as watching:
        yield watching
        watching.check()


@pytest.fixture
def leak_check(server: ServerHandle) -> Iterator[None]:
    """After the test, the module's ``server`` holds no live request, response, shm view or
    pooled buffer, and no more shm mappings than before it (leaks.py)."""
    baseline = live_objects(server)
    yield
    check_no_leaks(server, baseline)


@pytest.fixture(autouse=True)
def leak_check_everywhere(request: pytest.FixtureRequest) -> Iterator[None]:
    """With PYTRITON_LEAK_CHECK=1, every test using a module's pytriton-core ``server`` gets
    the leak check (the modules marked with ``leak_check`` always do)."""
    if os.environ.get("PYTRITON_LEAK_CHECK") != "1" or "server" not in request.fixturenames:
        yield
        return
    server = request.getfixturevalue("server")
    if not isinstance(server, ServerHandle) or server.name != "pytriton-core":
        yield
        return
    baseline = live_objects(server)
    yield
    check_no_leaks(server, baseline)
