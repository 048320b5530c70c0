"""Differential test: pytriton-core and the real Triton 2.51 answer the same HTTP requests alike.

Both servers serve tests/integration/models and examples/model_repository. Every case sends one
request to each and compares what a client sees: status code, error message, response JSON and
decoded outputs. Requests go through ``tritonclient.http`` where it can express them, and as raw
HTTP where it cannot (malformed bodies, parameters the client refuses to send, exact headers).

Compared exactly unless a case says otherwise; the deliberate exceptions, with their reasons:
* JSON numbers compare by value and kind (integer or float), not by their text: Triton prints
  floats its JSON library's way (``3.4028234663852887e38``), any other spelling parses the same.
* Error responses compare status and message, not Content-Type: Triton answers a few errors
  (unknown path, wrong method, bad Inference-Header-Content-Length) as text/plain, an accident
  of its HTTP library that no client reads.
* ``message_until`` cuts both messages after a marker where Triton's tail is not reproducible:
  the set of input names in "expected N inputs" errors comes in hash order; JSON syntax errors
  carry RapidJSON's wording.
* Not compared at all: Triton silently wraps out-of-range JSON integers (INT8 300 -> 44), a bug
  we need not copy; per-model statistics (timings differ by nature); the server version string.

``DIFFERENTIAL_SELF_CHECK=1`` runs the real Triton on both sides: every case must then pass,
which checks the cases themselves.
"""

from __future__ import annotations

import http.client
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import tritonclient.http as httpclient
from harness import (
    EXAMPLES_REPOSITORY,
    TEST_MODELS_REPOSITORY,
    ServerHandle,
    run_pytriton_server,
    run_real_triton,
)
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.real_triton

REPOSITORIES = [TEST_MODELS_REPOSITORY, EXAMPLES_REPOSITORY]
MODELS = sorted(p.name for repo in REPOSITORIES for p in repo.iterdir() if (p / "1").is_dir())
SELF_CHECK = os.environ.get("DIFFERENTIAL_SELF_CHECK") == "1"


@pytest.fixture(scope="module")
def triton() -> Iterator[ServerHandle]:
    with run_real_triton(REPOSITORIES) as server:
        yield server


@pytest.fixture(scope="module")
def ours(triton: ServerHandle) -> Iterator[ServerHandle]:
    # Depends on `triton` so that a missing real Triton skips before pytriton-core starts.
    run = run_real_triton if SELF_CHECK else run_pytriton_server
    with run(REPOSITORIES) as server:
        yield server


# ---------------------------------------------------------------------------------------------
# What a client sees, in a form that compares with ==


@dataclass(frozen=True)
class Reply:
    status: int | None  # None: the client refused the request before sending it
    error: str | None = None
    body: Any = None  # the JSON document (canonical form), or the raw body when not JSON
    outputs: tuple[tuple[str, Any], ...] = ()  # decoded by tritonclient, canonical form
    headers: tuple[tuple[str, str | None], ...] = ()
    binary: bytes = b""  # what follows the JSON header of a binary response

    def cut_message(self, marker: str | None) -> Reply:
        if marker is None or self.error is None or marker not in self.error:
            return self
        return replace(self, error=self.error[: self.error.index(marker) + len(marker)])


def _canonical_json(value: Any) -> Any:
    """JSON with numbers tagged by kind, so 1 and 1.0 differ and NaN equals NaN."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", repr(value))
    if isinstance(value, list):
        return [_canonical_json(item) for item in value]
    if isinstance(value, dict):
        return {key: _canonical_json(item) for key, item in value.items()}
    raise TypeError(f"not JSON: {value!r}")


def _canonical_array(array: np.ndarray) -> tuple[str, tuple[int, ...], Any]:
    if array.dtype == np.object_:
        return ("object", array.shape, tuple(array.ravel().tolist()))
    # Raw bytes: exact, and NaN payloads and -0.0 count.
    return (str(array.dtype), array.shape, array.tobytes())


# ---------------------------------------------------------------------------------------------
# Requests through tritonclient


@dataclass(frozen=True, eq=False)
class Input:
    name: str
    data: np.ndarray
    datatype: str
    binary: bool = True


@dataclass(frozen=True)
class Output:
    name: str
    binary: bool = True
    class_count: int = 0


@dataclass(frozen=True)
class Deviation:
    """A deliberate difference from Triton 2.51: what pytriton-core answers instead, and why.

    Both answers are still checked: Triton's must be the one documented (so the case stays
    honest as Triton changes) and ours must be the one we chose.
    """

    why: str
    ours_status: int
    triton_status: int
    ours_error: str | None = None  # a prefix of our message; None: a success


@dataclass(frozen=True, eq=False)
class Infer:
    model: str
    inputs: tuple[Input, ...]
    outputs: tuple[Output, ...] | None = None  # None: the client asks for all, binary
    parameters: Mapping[str, Any] | None = None
    version: str = ""
    request_id: str = ""
    headers: Mapping[str, str] | None = None
    message_until: str | None = None
    deviation: Deviation | None = None


def send_infer(server: ServerHandle, case: Infer) -> Reply:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        inputs = []
        for spec in case.inputs:
            tensor = httpclient.InferInput(spec.name, list(spec.data.shape), spec.datatype)
            tensor.set_data_from_numpy(spec.data, binary_data=spec.binary)
            inputs.append(tensor)
        outputs = None
        if case.outputs is not None:
            outputs = [
                httpclient.InferRequestedOutput(o.name, o.binary, o.class_count)
                for o in case.outputs
            ]
        result = client.infer(
            case.model,
            inputs,
            model_version=case.version,
            outputs=outputs,
            request_id=case.request_id,
            headers=dict(case.headers) if case.headers else None,
            parameters=dict(case.parameters) if case.parameters else None,
        )
    except InferenceServerException as error:
        status = int(error.status()) if error.status() else None
        return Reply(status=status, error=error.message())
    finally:
        client.close()
    response = result.get_response()
    decoded = tuple(
        (out["name"], _canonical_array(result.as_numpy(out["name"])))
        for out in response.get("outputs", [])
    )
    return Reply(status=200, body=_canonical_json(response), outputs=decoded)


# ---------------------------------------------------------------------------------------------
# Raw HTTP requests


@dataclass(frozen=True, eq=False)
class Raw:
    method: str
    path: str
    body: Any = None  # dict/list -> JSON; str/bytes as is
    binary: bytes | None = None  # appended after the JSON, with Inference-Header-Content-Length
    headers: Mapping[str, str] = field(default_factory=dict)
    message_until: str | None = None
    deviation: Deviation | None = None


def send_raw(server: ServerHandle, case: Raw) -> Reply:
    body = case.body
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    headers = dict(case.headers)
    if case.binary is not None:
        headers.setdefault("Inference-Header-Content-Length", str(len(body or b"")))
        body = (body or b"") + case.binary
    host, port = server.http_url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request(case.method, case.path, body=body, headers=headers)
        response = connection.getresponse()
        content = response.read()
        header_length = response.getheader("Inference-Header-Content-Length")
        content_type = response.getheader("Content-Type")
    finally:
        connection.close()
    json_part, binary = content, b""
    if header_length is not None:
        json_part, binary = content[: int(header_length)], content[int(header_length) :]
    try:
        document = json.loads(json_part) if json_part else None
    except ValueError:
        document = json_part
    if response.status != 200 and isinstance(document, dict) and set(document) == {"error"}:
        return Reply(status=response.status, error=document["error"])
    # An empty body's Content-Type means nothing (Triton says text/plain).
    typed = (("Content-Type", content_type),) if content else ()
    return Reply(
        status=response.status,
        body=_canonical_json(document) if not isinstance(document, bytes) else document,
        headers=(*typed, ("Inference-Header-Content-Length", header_length)),
        binary=binary,
    )


def assert_same(case: Infer | Raw, ours: Reply, triton: Reply) -> None:
    deviation = case.deviation
    if deviation is not None and not SELF_CHECK:
        assert triton.status == deviation.triton_status, (deviation.why, triton)
        assert ours.status == deviation.ours_status, (deviation.why, ours)
        if deviation.ours_error is not None:
            assert (ours.error or "").startswith(deviation.ours_error), (deviation.why, ours)
        return
    ours, triton = ours.cut_message(case.message_until), triton.cut_message(case.message_until)
    differences = [
        f"{name}:\n  ours:   {getattr(ours, name)!r}\n  triton: {getattr(triton, name)!r}"
        for name in Reply.__dataclass_fields__
        if getattr(ours, name) != getattr(triton, name)
    ]
    if differences:
        pytest.fail(
            "pytriton-core differs from Triton in\n" + "\n".join(differences), pytrace=False
        )


# ---------------------------------------------------------------------------------------------
# Cases: every datatype

NUMPY_TYPES: dict[str, Any] = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
    "BF16": ml_dtypes.bfloat16,  # Triton 2.51's Python backend passes BF16 (via DLPack)
}
# The server refuses these in JSON, both ways; the client refuses to send BF16 as JSON.
NO_JSON = {"FP16", "BF16"}


def sample(datatype: str, *, json_safe: bool = False) -> np.ndarray:
    """A [2, 3] batch with the datatype's edge values; JSON-safe: finite, valid UTF-8."""
    dtype = NUMPY_TYPES[datatype]
    if datatype == "BOOL":
        values: list[Any] = [True, False, True, False, False, True]
    elif datatype == "BYTES":
        values = [b"", b"a", "\u00e9\u4e2d".encode(), b'q"b\\ nl\n', b"x" * 300, b" "]
        if not json_safe:
            values[5] = b"\x00\xff\xfe"
    elif np.issubdtype(dtype, np.integer):
        ints = np.iinfo(dtype)
        values = [ints.min, 0, ints.max, 1, int(ints.max) - 1, int(ints.min) + 1]
    else:
        finfo: Any = ml_dtypes.finfo if datatype == "BF16" else np.finfo
        floats = finfo(dtype)
        values = [0.0, -0.0, 1.5, -2.25, float(floats.max), float(floats.tiny)]
        if not json_safe:
            values[4:] = [np.inf, np.nan]
    return np.array(values, dtype=dtype).reshape(2, 3)


def _datatype_cases() -> dict[str, Infer]:
    cases = {}
    for datatype in NUMPY_TYPES:
        model = f"dtype_{datatype.lower()}"
        full, safe = sample(datatype), sample(datatype, json_safe=True)
        json_out = (Output("OUTPUT0", binary=False),)
        cases[f"{datatype}-binary"] = Infer(model, (Input("INPUT0", full, datatype),))
        # tritonclient cannot decode non-UTF-8 JSON strings: raw case json-output-non-utf8
        json_decodable = safe if datatype == "BYTES" else full
        cases[f"{datatype}-binary-in-json-out"] = Infer(
            model, (Input("INPUT0", json_decodable, datatype),), json_out
        )
        if datatype not in NO_JSON or datatype == "FP16":
            cases[f"{datatype}-json"] = Infer(
                model, (Input("INPUT0", safe, datatype, binary=False),), json_out
            )
            cases[f"{datatype}-json-in-binary-out"] = Infer(
                model, (Input("INPUT0", safe, datatype, binary=False),), (Output("OUTPUT0"),)
            )
        cases[f"{datatype}-empty"] = Infer(
            model, (Input("INPUT0", np.empty((1, 0), dtype=NUMPY_TYPES[datatype]), datatype),)
        )
    return cases


# ---------------------------------------------------------------------------------------------
# Cases: models with behaviour


def _f32(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def _i32(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int32)


def _strings(*values: str) -> np.ndarray:
    return np.array([v.encode() for v in values], dtype=np.object_)


def _one(name: str, data: np.ndarray, datatype: str, binary: bool = True) -> tuple[Input, ...]:
    return (Input(name, data, datatype, binary),)


SCORES = _f32(0.1, 0.7, 0.2, 0.9, 0.05).reshape(1, 5)
MATRIX = np.arange(6, dtype=np.float32).reshape(2, 3)
ROW = _i32(1, -2, 3)
TRITON_ERROR_CODES = [
    "DEFAULT",  # TritonError(message) without a code
    "UNKNOWN",
    "INTERNAL",
    "NOT_FOUND",
    "INVALID_ARG",
    "UNAVAILABLE",
    "UNSUPPORTED",
    "ALREADY_EXISTS",
    "CANCELLED",
]


def _model_cases() -> dict[str, Infer]:
    subset_in = _one("INPUT0", _i32(1, 2, 3), "INT32")
    fixed_ok = (Input("INPUT0", MATRIX, "FP32"), Input("INPUT1", ROW, "INT32"))
    key_echo = _one("KEY", _strings("echo"), "BYTES")
    cases: dict[str, Infer] = {
        # examples/model_repository
        "add_sub": Infer(
            "add_sub",
            (
                Input("INPUT0", _f32(1, 2, 3, 4), "FP32"),
                Input("INPUT1", _f32(10, 20, 30, 40), "FP32"),
            ),
        ),
        "add_sub-json": Infer(
            "add_sub",
            (
                Input("INPUT0", _f32(1, 2, 3, 4), "FP32", binary=False),
                Input("INPUT1", _f32(0.5, -2, 3e9, 4), "FP32", binary=False),
            ),
            (Output("OUTPUT0", binary=False), Output("OUTPUT1", binary=False)),
        ),
        # One bad input per request: which of several Triton reports first is its map order.
        "add_sub-wrong-shape": Infer(
            "add_sub",
            (Input("INPUT0", _f32(1, 2, 3, 4), "FP32"), Input("INPUT1", _f32(1, 2, 3), "FP32")),
        ),
        "add_sub-wrong-datatype": Infer(
            "add_sub",
            (
                Input("INPUT0", np.ones(4, np.float64), "FP64"),
                Input("INPUT1", _f32(1, 2, 3, 4), "FP32"),
            ),
        ),
        "identity_fp32-batch1": Infer(
            "identity_fp32", _one("INPUT0", np.arange(16, dtype=np.float32)[None], "FP32")
        ),
        "identity_fp32-batch8": Infer(
            "identity_fp32", _one("INPUT0", np.ones((8, 16), np.float32), "FP32")
        ),
        "identity_fp32-batch9": Infer(
            "identity_fp32", _one("INPUT0", np.ones((9, 16), np.float32), "FP32")
        ),
        "identity_fp32-no-batch-dim": Infer(
            "identity_fp32", _one("INPUT0", np.ones(16, np.float32), "FP32")
        ),
        "string_identity": Infer(
            "string_identity",
            _one("INPUT0", sample("BYTES").ravel(), "BYTES"),
        ),
        "string_identity-json": Infer(
            "string_identity",
            _one("INPUT0", sample("BYTES", json_safe=True).ravel(), "BYTES", binary=False),
            (Output("OUTPUT0", binary=False), Output("OUTPUT1", binary=False)),
        ),
        # output subsets: the request names which outputs come back, and how
        "subset-0": Infer("output_subset", subset_in, (Output("OUTPUT0"),)),
        "subset-1-json": Infer("output_subset", subset_in, (Output("OUTPUT1", binary=False),)),
        "subset-2-0": Infer(
            "output_subset", subset_in, (Output("OUTPUT2", False), Output("OUTPUT0", False))
        ),
        "subset-mixed": Infer(
            "output_subset", subset_in, (Output("OUTPUT1", False), Output("OUTPUT2", True))
        ),
        "subset-all-default": Infer("output_subset", subset_in),
        "subset-duplicate": Infer(
            "output_subset", subset_in, (Output("OUTPUT1", False), Output("OUTPUT1", False))
        ),
        "subset-unknown-output": Infer("output_subset", subset_in, (Output("OUTPUT9"),)),
        # classification extension
        "class-top1": Infer(
            "classifier", _one("INPUT0", SCORES, "FP32"), (Output("OUTPUT0", False, 1),)
        ),
        "class-top3-labels-and-ints": Infer(
            "classifier",
            _one("INPUT0", SCORES, "FP32"),
            (Output("OUTPUT0", False, 3), Output("OUTPUT1", False, 2)),
        ),
        "class-more-than-classes-binary-batch2": Infer(
            "classifier",
            _one("INPUT0", np.vstack([SCORES, SCORES[:, ::-1]]), "FP32"),
            (Output("OUTPUT0", True, 10),),
        ),
        "class-with-plain-output": Infer(
            "classifier",
            _one("INPUT0", SCORES, "FP32"),
            (Output("OUTPUT0", False, 2), Output("OUTPUT1", False)),
        ),
        # request parameters reach the model as a JSON string
        "params-none": Infer("request_parameters", key_echo),
        "params-all-kinds": Infer(
            "request_parameters",
            key_echo,
            parameters={"echo": "hi", "n": 3, "neg": -7, "f": 1.5, "b": True, "s": ""},
        ),
        "params-int": Infer("request_parameters", key_echo, parameters={"echo": 2**40}),
        "params-bool": Infer("request_parameters", key_echo, parameters={"echo": False}),
        "params-headers-not-forwarded": Infer(
            "request_parameters", key_echo, headers={"x-custom": "value"}
        ),
        # model-config parameters
        "config-param-greeting": Infer(
            "config_parameters", _one("KEY", _strings("greeting"), "BYTES")
        ),
        "config-param-answer": Infer(
            "config_parameters",
            _one("KEY", _strings("answer"), "BYTES", binary=False),
            (Output("VALUE", binary=False),),
        ),
        "config-param-missing": Infer("config_parameters", _one("KEY", _strings("nope"), "BYTES")),
        # errors a model returns
        "triton-error-negative": Infer("triton_error", _one("INPUT0", _f32(1, -1), "FP32")),
        "triton-error-none": Infer("triton_error", _one("INPUT0", _f32(1, 2), "FP32")),
        # errors a model raises; Triton appends "\n\nAt:\n  <file>(<line>): execute\n" (the
        # traceback pybind11 renders): compared separately in the -traceback case
        "raise-value-error": Infer(
            "raise_error", _one("INPUT0", _f32(-1), "FP32"), message_until="must not be negative"
        ),
        "raise-value-error-traceback": Infer("raise_error", _one("INPUT0", _f32(-1), "FP32")),
        "raise-model-exception": Infer(
            "raise_error", _one("INPUT0", _f32(np.nan), "FP32"), message_until="contains NaN"
        ),
        "raise-none": Infer("raise_error", _one("INPUT0", _f32(0.5), "FP32")),
        # shapes and datatypes checked against the config
        "fixed-ok": Infer("fixed_shape", fixed_ok),
        "fixed-transposed": Infer(
            "fixed_shape", (Input("INPUT0", MATRIX.T.copy(), "FP32"), fixed_ok[1])
        ),
        "fixed-flat": Infer("fixed_shape", (Input("INPUT0", MATRIX.ravel(), "FP32"), fixed_ok[1])),
        "fixed-extra-dim": Infer(
            "fixed_shape", (Input("INPUT0", MATRIX[None], "FP32"), fixed_ok[1])
        ),
        "fixed-wrong-datatype": Infer(
            "fixed_shape", (fixed_ok[0], Input("INPUT1", ROW.astype(np.float32), "FP32"))
        ),
        "fixed-missing-input": Infer("fixed_shape", fixed_ok[:1]),
        "fixed-unknown-input": Infer(
            "fixed_shape",
            (*fixed_ok, Input("INPUT9", ROW, "INT32")),
            message_until=" inputs for model 'fixed_shape'.",
        ),
        "fixed-unknown-output": Infer("fixed_shape", fixed_ok, (Output("OUTPUT9"),)),
        # versions
        "version-latest": Infer("versioned", _one("INPUT0", _i32(0), "INT32")),
        "version-1": Infer("versioned", _one("INPUT0", _i32(0), "INT32"), version="1"),
        "version-2": Infer("versioned", _one("INPUT0", _i32(0), "INT32"), version="2"),
        "version-missing": Infer("versioned", _one("INPUT0", _i32(0), "INT32"), version="3"),
        "unknown-model": Infer("no_such_model", _one("INPUT0", _i32(0), "INT32")),
        # request ids
        "request-id": Infer("triton_error", _one("INPUT0", _f32(1), "FP32"), request_id="r-1"),
        "request-id-on-error": Infer(
            "triton_error", _one("INPUT0", _f32(-1), "FP32"), request_id="r-2"
        ),
        "request-id-on-shape-error": Infer(
            "add_sub",
            (Input("INPUT0", _f32(1), "FP32"), Input("INPUT1", _f32(1, 2, 3, 4), "FP32")),
            request_id="r-3",
        ),
        # a model without config.pbtxt, completed by its auto_complete_config()
        "auto-complete": Infer(
            "auto_complete", _one("INPUT0", _f32(1, 2, 3, 4).reshape(2, 2), "FP32")
        ),
        "auto-complete-batch5": Infer(
            "auto_complete", _one("INPUT0", np.ones((5, 2), np.float32), "FP32")
        ),
        "auto-complete-wrong-dims": Infer(
            "auto_complete", _one("INPUT0", np.ones((1, 3), np.float32), "FP32")
        ),
    }
    for code in TRITON_ERROR_CODES:
        cases[f"triton-error-code-{code}"] = Infer(
            "triton_error", _one("INPUT0", _f32(1), "FP32"), parameters={"error_code": code}
        )
    return cases


INFER_CASES = {**_datatype_cases(), **_model_cases()}


@pytest.mark.parametrize("name", list(INFER_CASES))
def test_infer(name: str, ours: ServerHandle, triton: ServerHandle) -> None:
    case = INFER_CASES[name]
    assert_same(case, send_infer(ours, case), send_infer(triton, case))


# ---------------------------------------------------------------------------------------------
# Cases: raw HTTP


def _tensor(
    name: str, datatype: str, shape: list[int], data: Any = None, **params: Any
) -> dict[str, Any]:
    tensor: dict[str, Any] = {"name": name, "datatype": datatype, "shape": shape}
    if data is not None:
        tensor["data"] = data
    if params:
        tensor["parameters"] = params
    return tensor


def _infer_body(*inputs: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"inputs": list(inputs), **extra}


FP32_BATCH = _tensor("INPUT0", "FP32", [1, 2], [1.5, -2])
KEY_N = _tensor("KEY", "BYTES", [1], ["n"])
BINARY_FP32 = _tensor("INPUT0", "FP32", [1, 2], binary_data_size=8)
TWO_FLOATS = _f32(np.nan, -np.inf).tobytes()
INFER_FP32 = "/v2/models/dtype_fp32/infer"
INFER_PARAMS = "/v2/models/request_parameters/infer"

RAW_CASES: dict[str, Raw] = {
    # endpoints other than infer
    "live": Raw("GET", "/v2/health/live"),
    "ready": Raw("GET", "/v2/health/ready"),
    "model-ready": Raw("GET", "/v2/models/add_sub/ready"),
    "model-ready-version": Raw("GET", "/v2/models/versioned/versions/2/ready"),
    "model-ready-unknown": Raw("GET", "/v2/models/no_such_model/ready"),
    "model-ready-unknown-version": Raw("GET", "/v2/models/add_sub/versions/3/ready"),
    "metadata-unknown-model": Raw("GET", "/v2/models/no_such_model"),
    "metadata-unknown-version": Raw("GET", "/v2/models/add_sub/versions/3"),
    "config-unknown-model": Raw("GET", "/v2/models/no_such_model/config"),
    "config-unknown-version": Raw("GET", "/v2/models/add_sub/versions/3/config"),
    "stats-unknown-model": Raw("GET", "/v2/models/no_such_model/stats"),
    "version-not-a-number": Raw("POST", "/v2/models/add_sub/versions/x/infer", {}),
    "unknown-path": Raw("GET", "/v2/nothing/here"),
    "wrong-method": Raw("GET", INFER_FP32),
    # JSON tensors
    "json-ok-with-id": Raw("POST", INFER_FP32, _infer_body(FP32_BATCH, id="abc")),
    "json-nested-data": Raw(
        "POST", INFER_FP32, _infer_body(_tensor("INPUT0", "FP32", [2, 2], [[1, 2], [3, 4]]))
    ),
    "json-float-edges": Raw(
        "POST",
        INFER_FP32,
        _infer_body(_tensor("INPUT0", "FP32", [1, 4], [3.4028234663852886e38, 1e39, 1e-46, 7])),
    ),
    "json-uint64-max": Raw(
        "POST",
        "/v2/models/dtype_uint64/infer",
        _infer_body(_tensor("INPUT0", "UINT64", [1, 2], [2**64 - 1, 0])),
    ),
    "json-string-escapes": Raw(
        "POST",
        "/v2/models/dtype_bytes/infer",
        _infer_body(
            _tensor("INPUT0", "BYTES", [1, 4], ['q"b\\', "nl\nx", "tab\t", "\u0001\u00ff"])
        ),
    ),
    "json-count-mismatch": Raw(
        "POST", INFER_FP32, _infer_body(_tensor("INPUT0", "FP32", [1, 3], [1, 2]))
    ),
    "json-uint-negative": Raw(
        "POST",
        "/v2/models/dtype_uint8/infer",
        _infer_body(_tensor("INPUT0", "UINT8", [1, 2], [-1, 2])),
    ),
    "json-bool-from-int": Raw(
        "POST",
        "/v2/models/dtype_bool/infer",
        _infer_body(_tensor("INPUT0", "BOOL", [1, 2], [1, 0])),
    ),
    "json-bytes-from-int": Raw(
        "POST",
        "/v2/models/dtype_bytes/infer",
        _infer_body(_tensor("INPUT0", "BYTES", [1, 2], [1, 2])),
    ),
    "json-float-from-string": Raw(
        "POST", INFER_FP32, _infer_body(_tensor("INPUT0", "FP32", [1, 1], ["1"]))
    ),
    "json-fp16": Raw(
        "POST",
        "/v2/models/dtype_fp16/infer",
        _infer_body(_tensor("INPUT0", "FP16", [1, 1], [1])),
    ),
    "json-bf16": Raw(
        "POST",
        "/v2/models/dtype_bf16/infer",
        _infer_body(_tensor("INPUT0", "BF16", [1, 1], [1])),
    ),
    "json-nan-output": Raw(
        "POST",
        INFER_FP32,
        _infer_body(BINARY_FP32),
        binary=TWO_FLOATS,
    ),
    # Triton writes the bytes as they are, so the body is not valid JSON (compared as bytes).
    "json-output-non-utf8": Raw(
        "POST",
        "/v2/models/dtype_bytes/infer",
        _infer_body(
            _tensor("INPUT0", "BYTES", [1, 1], binary_data_size=6),
            outputs=[{"name": "OUTPUT0", "parameters": {"binary_data": False}}],
        ),
        binary=b"\x02\0\0\0\xff\xfe",
        deviation=Deviation(
            "Triton writes non-UTF-8 bytes raw into a JSON string, a body no JSON parser "
            "reads; we refuse with a message that asks for binary output instead",
            ours_status=500,
            triton_status=200,
            ours_error="output 'OUTPUT0' holds bytes that are not valid UTF-8",
        ),
    ),
    "json-unknown-datatype": Raw(
        "POST", INFER_FP32, _infer_body(_tensor("INPUT0", "FLOAT", [1, 1], [1]))
    ),
    "json-datatype-mismatch": Raw(
        "POST", INFER_FP32, _infer_body(_tensor("INPUT0", "INT32", [1, 1], [1]))
    ),
    "json-negative-dim": Raw(
        "POST", INFER_FP32, _infer_body(_tensor("INPUT0", "FP32", [1, -1], [1]))
    ),
    "json-missing-shape": Raw(
        "POST", INFER_FP32, _infer_body({"name": "INPUT0", "datatype": "FP32", "data": [1]})
    ),
    "json-missing-datatype": Raw(
        "POST", INFER_FP32, _infer_body({"name": "INPUT0", "shape": [1, 1], "data": [1]})
    ),
    "json-missing-data": Raw("POST", INFER_FP32, _infer_body(_tensor("INPUT0", "FP32", [1, 1]))),
    "json-two-data-sources": Raw(
        "POST",
        INFER_FP32,
        _infer_body(_tensor("INPUT0", "FP32", [1, 1], [1], binary_data_size=4)),
        binary=b"\0" * 4,
    ),
    "json-duplicate-input": Raw("POST", INFER_FP32, _infer_body(FP32_BATCH, FP32_BATCH)),
    "json-missing-inputs": Raw("POST", INFER_FP32, {}),
    "json-syntax-error": Raw(
        "POST", INFER_FP32, "{not json", message_until="failed to parse the request JSON buffer:"
    ),
    "json-empty-batch": Raw(
        "POST",
        INFER_FP32,
        _infer_body(_tensor("INPUT0", "FP32", [0, 3], [])),
        deviation=Deviation(
            "a batch of zero is a valid empty tensor: we answer it with an empty output, where "
            "Triton 2.51 expects the bytes of a batch of one",
            ours_status=200,
            triton_status=400,
        ),
    ),
    # binary tensors
    "binary-nan-binary-out": Raw(
        "POST",
        INFER_FP32,
        _infer_body(
            BINARY_FP32, outputs=[{"name": "OUTPUT0", "parameters": {"binary_data": True}}]
        ),
        binary=TWO_FLOATS,
    ),
    "binary-data-output-parameter": Raw(
        "POST",
        INFER_FP32,
        _infer_body(FP32_BATCH, parameters={"binary_data_output": True}),
    ),
    "binary-short": Raw("POST", INFER_FP32, _infer_body(BINARY_FP32), binary=b"\0" * 4),
    "binary-long": Raw("POST", INFER_FP32, _infer_body(BINARY_FP32), binary=b"\0" * 12),
    "binary-without-header": Raw("POST", INFER_FP32, _infer_body(BINARY_FP32)),
    "binary-header-too-large": Raw(
        "POST",
        INFER_FP32,
        _infer_body(BINARY_FP32),
        binary=b"\0" * 8,
        headers={"Inference-Header-Content-Length": "99999"},
    ),
    "binary-whole-body-raw": Raw(
        "POST",
        INFER_FP32,
        _f32(1, 2).tobytes(),
        headers={"Inference-Header-Content-Length": "0"},
    ),
    "binary-byte-size-mismatch": Raw(
        "POST",
        "/v2/models/fixed_shape/infer",
        _infer_body(
            _tensor("INPUT0", "FP32", [2, 3], binary_data_size=20),
            _tensor("INPUT1", "INT32", [3], [1, 2, 3]),
        ),
        binary=b"\0" * 20,
    ),
    # request parameters
    "params-reserved-prefix": Raw(
        "POST", INFER_PARAMS, _infer_body(KEY_N, parameters={"triton_x": 1})
    ),
    "params-null": Raw("POST", INFER_PARAMS, _infer_body(KEY_N, parameters={"n": None})),
    "params-list": Raw("POST", INFER_PARAMS, _infer_body(KEY_N, parameters={"n": [1]})),
    "params-object": Raw("POST", INFER_PARAMS, _infer_body(KEY_N, parameters={"n": {"a": 1}})),
    "params-float-integral": Raw("POST", INFER_PARAMS, _infer_body(KEY_N, parameters={"n": 2.0})),
    "params-int-beyond-int64": Raw(
        "POST", INFER_PARAMS, _infer_body(KEY_N, parameters={"n": 2**63})
    ),
    "params-scheduling-keys-consumed": Raw(
        "POST",
        INFER_PARAMS,
        _infer_body(KEY_N, parameters={"priority": 0, "timeout": 10, "sequence_id": 0}),
    ),
    "params-priority-negative": Raw(
        "POST", INFER_PARAMS, _infer_body(KEY_N, parameters={"priority": -1})
    ),
    "params-headers-key": Raw(
        "POST", INFER_PARAMS, _infer_body(KEY_N, parameters={"headers": "x"})
    ),
    # classification through raw JSON
    "class-count-zero": Raw(
        "POST",
        "/v2/models/classifier/infer",
        _infer_body(
            _tensor("INPUT0", "FP32", [1, 5], [1, 2, 3, 4, 5]),
            outputs=[{"name": "OUTPUT1", "parameters": {"classification": 0}}],
        ),
    ),
    "class-count-negative": Raw(
        "POST",
        "/v2/models/classifier/infer",
        _infer_body(
            _tensor("INPUT0", "FP32", [1, 5], [1, 2, 3, 4, 5]),
            outputs=[{"name": "OUTPUT1", "parameters": {"classification": -1}}],
        ),
    ),
    "repository-index": Raw("POST", "/v2/repository/index", ""),
}


@pytest.mark.parametrize("name", list(RAW_CASES))
def test_raw(name: str, ours: ServerHandle, triton: ServerHandle) -> None:
    case = RAW_CASES[name]
    assert_same(case, send_raw(ours, case), send_raw(triton, case))


# ---------------------------------------------------------------------------------------------
# Metadata and configuration


def _get(server: ServerHandle, path: str) -> Any:
    reply = send_raw(server, Raw("GET", path))
    assert reply.status == 200, f"GET {path} on {server.name}: {reply}"
    return reply.body


def test_server_metadata(ours: ServerHandle, triton: ServerHandle) -> None:
    mine, theirs = _get(ours, "/v2"), _get(triton, "/v2")
    # The version is each server's own; clients only display it.
    assert isinstance(mine.pop("version"), str)
    theirs.pop("version")
    # Deliberate: we list only the extensions this server implements, in Triton's order.
    extensions = mine.pop("extensions")
    assert extensions == [e for e in theirs.pop("extensions") if e in extensions]
    assert mine == theirs


@pytest.mark.parametrize("model", MODELS)
def test_model_metadata(model: str, ours: ServerHandle, triton: ServerHandle) -> None:
    assert _get(ours, f"/v2/models/{model}") == _get(triton, f"/v2/models/{model}")


def test_model_metadata_of_a_version(ours: ServerHandle, triton: ServerHandle) -> None:
    path = "/v2/models/versioned/versions/1"
    assert _get(ours, path) == _get(triton, path)


# What clients (perf_analyzer, tritonclient users, model.py files) read from the config.
ESSENTIAL_CONFIG_FIELDS = [
    "name",
    "platform",
    "backend",
    "max_batch_size",
    "input",
    "output",
    "version_policy",
    "parameters",
    "default_model_filename",
    "dynamic_batching",
    "sequence_batching",
    "ensemble_scheduling",
    "model_transaction_policy",
]


def _essentials(config: dict[str, Any]) -> dict[str, Any]:
    essentials = {key: config.get(key) for key in ESSENTIAL_CONFIG_FIELDS}
    essentials["instance_group"] = [
        (group.get("kind"), group.get("count")) for group in config.get("instance_group", [])
    ]
    return essentials


@pytest.mark.parametrize("model", MODELS)
def test_model_config_essentials(model: str, ours: ServerHandle, triton: ServerHandle) -> None:
    path = f"/v2/models/{model}/config"
    assert _essentials(_get(ours, path)) == _essentials(_get(triton, path))


@pytest.mark.parametrize("model", MODELS)
def test_model_config_full(model: str, ours: ServerHandle, triton: ServerHandle) -> None:
    path = f"/v2/models/{model}/config"
    assert _get(ours, path) == _get(triton, path)


def test_model_keeps_serving_after_raising(ours: ServerHandle, triton: ServerHandle) -> None:
    for server in (ours, triton):
        failing = send_infer(server, INFER_CASES["raise-value-error"])
        assert failing.status == 500, failing
        passing = send_infer(server, INFER_CASES["raise-none"])
        assert passing.status == 200, passing
