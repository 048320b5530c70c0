"""What the fuzzers share: running a target under atheris, and a real in-process server
for the parsers that need a model and the service (no sockets, no mocks).

Each fuzzer is ``tools/fuzz/<target>.py``; ``python tools/fuzz/run.py`` runs them all
(``--seconds`` each) and reports executions and coverage. A target may raise only the
server's own errors (``ServerError``) for bad input; anything else is a finding.
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
import tempfile
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

import atheris
import instrumentation

from pytriton_core import Server
from pytriton_core.options import MemoryOptions
from pytriton_core.service import InferenceService

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent
CORPUS = ROOT / "corpus"

IDENTITY_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]) for x in inputs]
"""
# name -> (datatype, max_batch_size): the models the request fuzzers decode for
MODELS = {"fp32": ("TYPE_FP32", 8), "bytes": ("TYPE_STRING", 0), "int8": ("TYPE_INT8", 0)}
SHM_KEY = f"/pytriton_fuzz_{os.getpid()}"
SHM_SIZE = 1 << 16


def fuzz(test_one_input: Callable[[bytes], None], subject: Sequence[str]) -> None:
    """Run ``test_one_input`` under atheris with this process's command line (libFuzzer's
    flags and corpus folders); ``subject`` is what the target fuzzes (``instrumentation``).

    The Python functions loaded so far are instrumented within ``instrumentation``'s
    scope, the target's oracle included: the compiled modules (Cython, httptools' llhttp)
    carry no coverage counters, so for them the oracle's branches are what guides the
    search.
    """
    instrumentation.loaded_functions(subject)
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


def serve() -> InferenceService:
    """The InferenceService of a started in-process server with the fuzz models and one
    registered system region (``fuzzed``, over ``SHM_KEY``), as the front ends hold it."""

    root = Path(tempfile.mkdtemp(prefix="pytriton-fuzz-"))
    for name, (datatype, max_batch) in MODELS.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.py").write_text(IDENTITY_MODEL)
        (root / name / "config.pbtxt").write_text(
            f'backend: "python"\nmax_batch_size: {max_batch}\n'
            f'input [ {{ name: "INPUT0", data_type: {datatype}, dims: [ -1 ] }} ]\n'
            f'output [ {{ name: "OUTPUT0", data_type: {datatype}, dims: [ -1 ] }} ]\n'
        )
    fd = os.open(f"/dev/shm{SHM_KEY}", os.O_CREAT | os.O_RDWR, 0o600)
    os.ftruncate(fd, SHM_SIZE)
    os.close(fd)
    atexit.register(
        lambda: os.path.exists(f"/dev/shm{SHM_KEY}") and os.unlink(f"/dev/shm{SHM_KEY}")
    )
    server = Server(model_repository=root, memory=MemoryOptions(allow_client_shm=True))
    server.start()  # its thread is a daemon: the process ends without stopping it
    service = server._service  # the real one, as the front ends hold it
    completed(service.register_system_shm("fuzzed", SHM_KEY, 0, SHM_SIZE))
    return service


def completed(coroutine: Coroutine[Any, Any, T]) -> T:
    """The result of a service call that never waits in one process (the shared-memory
    setters wait only for the other workers of --workers N), without an event loop."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    coroutine.close()
    raise RuntimeError("the call waited: it needs the server's event loop")


def _decoded_parts(decoded: Any) -> tuple[Any, ...]:
    request = decoded.request
    inputs = [
        (t.name, t.datatype, t.data.shape, t.data.dtype, t.data.tobytes())
        if t.data.dtype != object
        else (t.name, t.datatype, t.data.shape, t.data.tolist())
        for t in request.inputs.values()
    ]
    return (
        request.id,
        inputs,
        request.requested_outputs,
        decoded.binary_outputs,
        decoded.binary_by_default,
        decoded.shm_outputs,
        decoded.reserved,
        request.parameters,
        request.priority,
        request.timeout_us,
        request.correlation_id,
    )


def _check_walk_matches_general(
    service: InferenceService, target: Any, body: bytes, header: int | None, decoded: Any
) -> None:
    """The body decoded (the compiled walk, where it takes it) is the general decode's."""
    from pytriton_core.errors import ServerError
    from pytriton_core.frontends.http.infer_codec import decode_infer_request

    try:
        general = decode_infer_request(target, body, header, service, general=True)
    except ServerError as exc:
        raise AssertionError(f"the general decode refuses what was decoded: {exc}") from None
    if _decoded_parts(decoded) != _decoded_parts(general):
        raise AssertionError("the compiled walk and the general decode read the body apart")


@functools.cache
def _header_memo() -> Any:
    from pytriton_core._native.infer_walk import HeaderMemo

    return HeaderMemo(capacity=64)


def check_http_infer(
    service: InferenceService, model: str, body: bytes, header: int | None
) -> None:
    """Decode an HTTP infer body as the front end does and validate the request as the
    model would before queueing it; only the server's errors may come out."""
    from pytriton_core.errors import ServerError
    from pytriton_core.frontends.http.infer_codec import decode_infer_request
    from pytriton_core.inference.tensor_data import check_tensor_limits
    from pytriton_core.runtime.validation import validate_request

    try:
        target = service.model(model, "")
        # With the front end's memo of common headers: a header an earlier input left in it
        # is recalled over this body; the second decode recalls this one.
        decoded = decode_infer_request(target, body, header, service, memo=_header_memo())
        _check_walk_matches_general(service, target, body, header, decoded)
        again = decode_infer_request(target, body, header, service, memo=_header_memo())
        if _decoded_parts(again) != _decoded_parts(decoded):
            raise AssertionError("a remembered header reads the body apart from its walk")
        check_tensor_limits(decoded.request, service.request_limits)
        validate_request(decoded.request, target.spec)
        for tensor in decoded.request.inputs.values():
            tensor.data.tobytes()  # every byte of a view is readable
    except ServerError:
        pass
