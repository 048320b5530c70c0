"""Exact-value tests of ``triton_python_backend_utils`` (pytriton_core.backends.python.pb_utils)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from pytriton_core import types
from pytriton_core.backends.python import pb_utils as pb
from pytriton_core.backends.python import pb_utils_tensor
from pytriton_core.errors import ErrorCode, InvalidArgumentError, NotFoundError

NUMERIC = [dt for dt in types.DATATYPES if not dt.is_bytes and dt.wire_name != "BF16"]
BF16 = np.dtype(ml_dtypes.bfloat16)
AWKWARD_BYTES = [b"", "h\u00e9llo \u2603".encode(), b"\xff\xfe\x00bad utf-8", b"plain"]


def _sample(dt: types.DataType, shape: tuple[int, ...] = (2, 3)) -> np.ndarray:
    return (np.arange(int(np.prod(shape))) % 2).astype(dt.numpy_dtype).reshape(shape)


# --------------------------------------------------------------------------- surface


SPEC_NAMES = """
    Tensor InferenceRequest InferenceResponse InferenceResponseSender ResponseIterator
    TritonError TritonModelException Logger PreferredMemory TRITONSERVER_MEMORY_GPU
    TRITONSERVER_MEMORY_CPU InferenceTrace MetricFamily load_model unload_model
    is_model_ready get_model_dir TRITON_STRING_TO_NUMPY triton_string_to_numpy
    triton_to_numpy_type numpy_to_triton_type serialize_byte_tensor deserialize_bytes_tensor
    get_input_tensor_by_name get_output_tensor_by_name get_input_config_by_name
    get_output_config_by_name using_decoupled_model_transaction_policy ModelConfig
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_START TRITONSERVER_REQUEST_FLAG_SEQUENCE_END
    TRITONSERVER_RESPONSE_COMPLETE_FINAL TRITONSERVER_REQUEST_RELEASE_ALL
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
""".split()


@pytest.mark.parametrize("name", SPEC_NAMES)
def test_every_spec_name_is_exported(name: str) -> None:
    assert hasattr(pb, name)
    assert name in pb.__all__


def test_constants() -> None:
    assert pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START == 1
    assert pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END == 2
    assert pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL == 1
    assert pb.TRITONSERVER_REQUEST_RELEASE_ALL == 1
    assert pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE == 2
    assert pb.TRITONSERVER_MEMORY_GPU == 0
    assert pb.TRITONSERVER_MEMORY_CPU == 1
    assert (pb.MetricFamily.COUNTER, pb.MetricFamily.GAUGE, pb.MetricFamily.HISTOGRAM) == (0, 1, 2)
    assert (pb.Logger.INFO, pb.Logger.WARNING, pb.Logger.ERROR, pb.Logger.VERBOSE) == (0, 1, 2, 3)


# --------------------------------------------------------------------------- errors


def test_triton_error_codes_follow_tritonserver_numbering_and_core_names() -> None:
    names = [code.name for code in ErrorCode]
    assert [getattr(pb.TritonError, name) for name in names] == list(range(8))
    assert names == [
        "UNKNOWN",
        "INTERNAL",
        "NOT_FOUND",
        "INVALID_ARG",
        "UNAVAILABLE",
        "UNSUPPORTED",
        "ALREADY_EXISTS",
        "CANCELLED",
    ]


def test_triton_error_defaults_to_internal() -> None:
    error = pb.TritonError("boom")
    assert error.message() == "boom"
    assert error.code() == pb.TritonError.INTERNAL
    assert str(error) == "boom"
    coded = pb.TritonError("bad input", code=pb.TritonError.INVALID_ARG)
    assert coded.code() == pb.TritonError.INVALID_ARG == 3


def test_triton_error_rejects_bad_arguments() -> None:
    with pytest.raises(TypeError):
        pb.TritonError(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        pb.TritonError("x", code=42)


def test_triton_error_maps_to_and_from_server_errors() -> None:
    server = pb.TritonError("no", pb.TritonError.INVALID_ARG)._to_server_error()
    assert isinstance(server, InvalidArgumentError)
    assert (server.message, server.http_status) == ("no", 400)
    assert pb.TritonError("x", pb.TritonError.NOT_FOUND)._to_server_error().http_status == 404
    back = pb.TritonError._from_exception(NotFoundError("gone"))
    assert (back.code(), back.message()) == (pb.TritonError.NOT_FOUND, "gone")
    other = pb.TritonError._from_exception(RuntimeError("oops"))
    assert (other.code(), other.message()) == (pb.TritonError.INTERNAL, "oops")


def test_triton_model_exception() -> None:
    exc = pb.TritonModelException("model failed")
    assert isinstance(exc, Exception)
    assert (str(exc), exc.message()) == ("model failed", "model failed")


# --------------------------------------------------------------------------- tensors


@pytest.mark.parametrize("dt", NUMERIC, ids=lambda dt: dt.wire_name)
def test_tensor_round_trip_every_numeric_datatype(dt: types.DataType) -> None:
    array = _sample(dt)
    tensor = pb.Tensor("IN", array)
    assert tensor.name() == "IN"
    assert tensor.triton_dtype() == dt.config_value
    assert tensor.shape() == [2, 3]
    assert tensor.is_cpu() is True
    assert tensor.__dlpack_device__() == (1, 0)
    out = tensor.as_numpy()
    assert out is array  # contiguous input: shared, not copied
    # DLPack both ways, sharing memory.
    via_numpy = np.from_dlpack(tensor)
    assert via_numpy.dtype == dt.numpy_dtype
    assert np.shares_memory(via_numpy, array)
    np.testing.assert_array_equal(via_numpy, array)
    back = pb.Tensor.from_dlpack("OUT", tensor.to_dlpack())
    assert (back.name(), back.triton_dtype(), back.shape()) == ("OUT", dt.config_value, [2, 3])
    assert np.shares_memory(back.as_numpy(), array)
    np.testing.assert_array_equal(back.as_numpy(), array)
    from_producer = pb.Tensor.from_dlpack("P", tensor)
    assert np.shares_memory(from_producer.as_numpy(), array)


def test_tensor_copies_non_contiguous_arrays() -> None:
    base = np.arange(6, dtype=np.int32).reshape(2, 3)
    tensor = pb.Tensor("T", base.T)
    out = tensor.as_numpy()
    assert out.flags.c_contiguous
    assert not np.shares_memory(out, base)
    assert out.tolist() == [[0, 3], [1, 4], [2, 5]]
    assert tensor.shape() == [3, 2]


def test_tensor_accepts_sequences_and_scalars() -> None:
    assert pb.Tensor("L", [1, 2, 3]).triton_dtype() == 9  # int64
    scalar = pb.Tensor("S", np.float32(1.5))
    assert (scalar.shape(), scalar.triton_dtype(), scalar.as_numpy().item()) == ([], 11, 1.5)


def test_tensor_name_rules() -> None:
    with pytest.raises(pb.TritonModelException, match=r"^Tensor name cannot be an empty string\.$"):
        pb.Tensor("", np.zeros(1))
    with pytest.raises(TypeError):
        pb.Tensor(None, np.zeros(1))  # type: ignore[arg-type]
    with pytest.raises(pb.TritonModelException, match="empty string"):
        pb.Tensor.from_dlpack("", np.zeros(1))


def test_tensor_rejects_dtypes_without_triton_datatype() -> None:
    with pytest.raises(pb.TritonModelException, match="complex64"):
        pb.Tensor("C", np.zeros(2, np.complex64))


def test_bytes_tensors_keep_their_elements() -> None:
    array = np.array(AWKWARD_BYTES, dtype=np.object_)
    tensor = pb.Tensor("B", array)
    assert tensor.triton_dtype() == 13
    assert tensor.as_numpy() is array
    assert tensor.as_numpy().tolist() == AWKWARD_BYTES
    assert pb.Tensor("S", np.array([b"ab", b"c"])).triton_dtype() == 13
    text = pb.Tensor("U", np.array(["h\u00e9", "x"]))
    assert (text.triton_dtype(), text.as_numpy().tolist()) == (13, ["h\u00e9", "x"])


def test_bytes_tensors_refuse_dlpack() -> None:
    tensor = pb.Tensor("B", np.array([b"x"], dtype=np.object_))
    with pytest.raises(pb.TritonModelException, match="BYTES"):
        tensor.to_dlpack()


def test_from_server_wraps_without_copying() -> None:
    array = np.arange(4, dtype=np.float32)
    tensor = pb.Tensor._from_server("IN", array, types.BY_WIRE_NAME["FP32"])
    assert tensor._server_array() is array
    assert tensor.as_numpy() is array
    assert tensor._datatype.wire_name == "FP32"
    raw = np.frombuffer(b"\x80\x3f\x00\x40", dtype=np.uint16)
    bf16 = pb.Tensor._from_server("H", raw, types.BY_WIRE_NAME["BF16"])
    assert bf16.triton_dtype() == 14
    assert bf16._server_array().dtype == BF16
    assert np.shares_memory(bf16._server_array(), raw)
    assert bf16._server_array().astype(np.float32).tolist() == [1.0, 2.0]
    strings = np.array(AWKWARD_BYTES, dtype=np.object_)
    b = pb.Tensor._from_server("S", strings, types.BY_WIRE_NAME["BYTES"])
    assert b.as_numpy() is strings
    assert b._datatype.wire_name == "BYTES"


def _dl_dtype(capsule: object) -> tuple[int, int, int]:
    dtype = pb_utils_tensor._tensor_struct(capsule).dtype
    return (dtype.code, dtype.bits, dtype.lanes)


def test_bf16_tensor_as_ml_dtypes_and_dlpack() -> None:
    values = np.array([[1.0, -2.5], [0.0, 3.0]], dtype=np.float32).astype(BF16)
    tensor = pb.Tensor("H", values)
    assert (tensor.triton_dtype(), tensor.shape()) == (14, [2, 2])
    with pytest.raises(pb.TritonModelException, match="BF16"):
        tensor.as_numpy()
    assert tensor._server_array() is values
    capsule = tensor.to_dlpack()
    assert _dl_dtype(capsule) == (4, 16, 1)  # kDLBfloat, 16 bits
    back = pb.Tensor.from_dlpack("H2", capsule)
    assert back.triton_dtype() == 14
    assert back._server_array().dtype == BF16
    assert np.shares_memory(back._server_array(), values)
    assert back._server_array().astype(np.float32).tolist() == [[1.0, -2.5], [0.0, 3.0]]
    versioned = tensor.__dlpack__(max_version=(1, 0))
    assert _dl_dtype(versioned) == (4, 16, 1)
    again = pb.Tensor.from_dlpack("H3", versioned)
    assert np.shares_memory(again._server_array(), values)
    # A numpy bfloat16 array passed straight to from_dlpack.
    assert pb.Tensor.from_dlpack("H4", values)._server_array() is values


def test_read_only_arrays_export_through_dlpack() -> None:
    array = np.frombuffer(b"\x00\x00\x80\x3f\x00\x00\x00\x40", dtype=np.float32)
    tensor = pb.Tensor._from_server("R", array, types.BY_WIRE_NAME["FP32"])
    shared = np.from_dlpack(tensor)  # versioned capsule: marked read-only, shared
    assert np.shares_memory(shared, array)
    assert not shared.flags.writeable
    copies = pb_utils_tensor.readonly_export_copies
    legacy = pb.Tensor.from_dlpack("L", tensor.to_dlpack())  # legacy capsule: a copy
    assert pb_utils_tensor.readonly_export_copies == copies + 1
    assert legacy.as_numpy().tolist() == [1.0, 2.0]
    assert not np.shares_memory(legacy.as_numpy(), array)


def test_from_dlpack_rejects_bad_sources() -> None:
    with pytest.raises(pb.TritonModelException, match="__dlpack__"):
        pb.Tensor.from_dlpack("X", [1, 2])
    with pytest.raises(pb.TritonModelException, match="contiguous"):
        pb.Tensor.from_dlpack("X", np.zeros((3, 2)).T)
    with pytest.raises(pb.TritonModelException, match="contiguous"):
        pb.Tensor.from_dlpack("X", _FakeProducer(np.zeros((3, 2))[:, :1]))
    capsule = np.zeros(2).__dlpack__()
    pb.Tensor.from_dlpack("X", capsule)
    with pytest.raises(pb.TritonModelException, match="already consumed"):
        pb.Tensor.from_dlpack("Y", capsule)
    with pytest.raises(pb.TritonModelException, match="device type 4"):
        pb.Tensor.from_dlpack("Z", _FakeProducer(np.zeros(2), device=(4, 0)))
    with pytest.raises(pb.TritonModelException, match="Triton datatype"):
        pb.Tensor.from_dlpack("C", np.zeros(2, np.complex64).__dlpack__())


class _FakeProducer:
    """A DLPack producer whose capsules claim ``device`` (data stays in host memory).

    Stands in for a GPU tensor: pb_utils never reads the data of non-CPU capsules.
    """

    def __init__(self, array: np.ndarray, device: tuple[int, int] = (1, 0)) -> None:
        self.array = array
        self.device = device
        self.streams: list[object] = []

    def __dlpack__(self, stream: object = None) -> object:
        self.streams.append(stream)
        capsule = self.array.__dlpack__()
        struct = pb_utils_tensor._tensor_struct(capsule)
        struct.device.device_type, struct.device.device_id = self.device
        return capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device


def test_gpu_producer_is_kept_and_exported_again() -> None:
    producer = _FakeProducer(np.zeros((2, 5), np.float16), device=(2, 1))
    tensor = pb.Tensor.from_dlpack("G", producer)
    assert tensor.is_cpu() is False
    assert (tensor.shape(), tensor.triton_dtype(), tensor.__dlpack_device__()) == (
        [2, 5],
        10,
        (2, 1),
    )
    with pytest.raises(pb.TritonModelException, match="GPU"):
        tensor.as_numpy()
    first = tensor.__dlpack__(stream=7)
    second = tensor.to_dlpack()
    assert pb_utils_tensor.inspect_capsule(first).device == (2, 1)
    assert pb_utils_tensor.inspect_capsule(second).shape == (2, 5)
    assert producer.streams == [None, 7, None]  # probe, then one per export


def test_gpu_capsule_exports_once() -> None:
    capsule = _FakeProducer(np.zeros(3, np.int8), device=(2, 0)).__dlpack__()
    tensor = pb.Tensor.from_dlpack("G", capsule)
    assert (tensor.is_cpu(), tensor.shape(), tensor.triton_dtype()) == (False, [3], 6)
    assert tensor.to_dlpack() is capsule
    with pytest.raises(pb.TritonModelException, match="only once"):
        tensor.to_dlpack()


# --------------------------------------------------------------------------- responses


def test_inference_response_defaults() -> None:
    response = pb.InferenceResponse()
    assert response.output_tensors() == []
    assert response.has_error() is False
    assert response.error() is None
    assert response.parameters() == "{}"


def test_inference_response_fields() -> None:
    out = pb.Tensor("OUT", np.ones(2, np.float32))
    error = pb.TritonError("bad", pb.TritonError.INVALID_ARG)
    response = pb.InferenceResponse(
        output_tensors=[out], error=error, parameters={"a": 1, "b": True, "c": "x"}
    )
    assert response.output_tensors() == [out]
    assert response.has_error() is True
    assert response.error() is error
    assert response.parameters() == '{"a": 1, "b": true, "c": "x"}'
    assert json.loads(response.parameters()) == {"a": 1, "b": True, "c": "x"}
    assert pb.get_output_tensor_by_name(response, "OUT") is out
    assert pb.get_output_tensor_by_name(response, "NOPE") is None


def test_inference_response_validation() -> None:
    with pytest.raises(TypeError):
        pb.InferenceResponse("OUT")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        pb.InferenceResponse([np.zeros(1)])  # type: ignore[list-item]
    with pytest.raises(pb.TritonModelException):
        pb.InferenceResponse([None])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        pb.InferenceResponse([], error="bad")  # type: ignore[arg-type]
    with pytest.raises(pb.TritonModelException, match="keys must be str"):
        pb.InferenceResponse(parameters={1: "x"})  # type: ignore[dict-item]
    with pytest.raises(pb.TritonModelException, match="'f' has type float"):
        pb.InferenceResponse(parameters={"f": 1.5})  # type: ignore[dict-item]


# --------------------------------------------------------------------------- requests


def test_bls_request_defaults() -> None:
    request = pb.InferenceRequest(model_name="m", requested_output_names=["OUT"])
    assert request.request_id() == ""
    assert request.correlation_id() == 0
    assert request.inputs() == []
    assert request.requested_output_names() == ["OUT"]
    assert request.flags() == 0
    assert request.timeout() == 0
    assert request.parameters() == "{}"
    assert request.trace().get_context() is None
    assert request.is_cancelled() is False
    assert request._model_name == "m"
    assert request._model_version == -1
    assert request._preferred_memory._memory_type is None
    assert request._release_flags == pb.TRITONSERVER_REQUEST_RELEASE_ALL


def test_bls_request_all_arguments() -> None:
    tensor = pb.Tensor("IN", np.zeros(2, np.int32))
    memory = pb.PreferredMemory(pb.TRITONSERVER_MEMORY_CPU, 0)
    request = pb.InferenceRequest(
        request_id="r1",
        correlation_id="seq-7",
        inputs=[tensor],
        requested_output_names=["A", "B"],
        model_name="callee",
        model_version=3,
        flags=pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
        timeout=1500,
        preferred_memory=memory,
        parameters={"k": "v", "n": 2},
    )
    assert request.request_id() == "r1"
    assert request.correlation_id() == "seq-7"
    assert request.inputs() == [tensor]
    assert pb.get_input_tensor_by_name(request, "IN") is tensor
    assert pb.get_input_tensor_by_name(request, "X") is None
    assert request.requested_output_names() == ["A", "B"]
    assert (request._model_name, request._model_version) == ("callee", 3)
    assert request.flags() == 1
    assert request.timeout() == 1500
    assert request._preferred_memory is memory
    assert memory._memory_type == pb.TRITONSERVER_MEMORY_CPU
    assert request.parameters() == '{"k": "v", "n": 2}'
    assert request._parameters == {"k": "v", "n": 2}
    request.set_flags(pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END)
    assert request.flags() == 2
    request.set_release_flags(pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
    assert request._release_flags == 2


def test_bls_request_validation() -> None:
    with pytest.raises(TypeError, match="model_name"):
        pb.InferenceRequest(requested_output_names=["A"])
    with pytest.raises(pb.TritonModelException, match="int or a str"):
        pb.InferenceRequest(model_name="m", correlation_id=1.5)  # type: ignore[arg-type]
    with pytest.raises(pb.TritonModelException, match="negative"):
        pb.InferenceRequest(model_name="m", correlation_id=-1)
    with pytest.raises(pb.TritonModelException, match="empty"):
        pb.InferenceRequest(model_name="m", requested_output_names=[""])
    with pytest.raises(TypeError):
        pb.InferenceRequest(model_name="m", requested_output_names="OUT")
    with pytest.raises(pb.TritonModelException):
        pb.InferenceRequest(model_name="m", inputs=[None])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        pb.InferenceRequest(model_name="m", timeout=-1)
    with pytest.raises(pb.TritonModelException, match="'p' has type list"):
        pb.InferenceRequest(model_name="m", parameters={"p": [1]})  # type: ignore[dict-item]


def test_user_built_request_has_no_sender() -> None:
    request = pb.InferenceRequest(model_name="m")
    sender = request.get_response_sender()
    assert sender.is_cancelled() is False
    with pytest.raises(pb.TritonModelException, match=r"^Unable to send response"):
        sender.send(pb.InferenceResponse(), flags=pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[pb.InferenceResponse | None, bool]] = []
        self.fail_next = False

    def __call__(self, response: pb.InferenceResponse | None, final: bool) -> None:
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("socket closed")
        self.calls.append((response, final))


def _server_request(
    hook: _Recorder | None = None, decoupled: bool = True, cancelled: bool = False
) -> pb.InferenceRequest:
    inputs = [
        pb.Tensor._from_server("IN", np.arange(3, dtype=np.int64), types.BY_WIRE_NAME["INT64"])
    ]
    return pb.InferenceRequest._from_server(
        request_id="abc",
        correlation_id=42,
        inputs=inputs,
        requested_output_names=["OUT"],
        parameters={"temperature": 1, "stream": True, "user": "u\u00e9"},
        flags=3,
        timeout=250,
        send_hook=hook,
        origin=_Origin(cancelled),
        decoupled=decoupled,
    )


class _Origin:
    """The server's request a delivered one is for (what ``is_cancelled`` reads)."""

    def __init__(self, cancelled: bool = False) -> None:
        self.cancelled = cancelled


class _Responder:
    """Makes the send hook on the model's first ``get_response_sender``."""

    def __init__(self) -> None:
        self.origins: list[object] = []
        self.hook = _Recorder()

    def send_hook(self, origin: object) -> _Recorder:
        self.origins.append(origin)
        return self.hook


def test_server_request_makes_its_send_hook_when_first_asked() -> None:
    responder, origin = _Responder(), _Origin()
    request = pb.InferenceRequest._from_server(
        request_id="",
        correlation_id=0,
        inputs=[],
        requested_output_names=[],
        parameters={},
        flags=0,
        timeout=0,
        responder=responder,
        origin=origin,
        decoupled=False,
    )
    assert responder.origins == []  # nothing made for a model that never asks
    assert request.is_cancelled() is False
    sender = request.get_response_sender()
    assert request.get_response_sender() is sender
    assert responder.origins == [origin]
    response = pb.InferenceResponse()
    sender.send(response, flags=pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert responder.hook.calls == [(response, True)]
    origin.cancelled = True
    assert request.is_cancelled() is True
    assert sender.is_cancelled() is True


def test_server_request_accessors() -> None:
    request = _server_request(cancelled=True)
    assert request.request_id() == "abc"
    assert request.correlation_id() == 42
    assert [t.name() for t in request.inputs()] == ["IN"]
    assert request.requested_output_names() == ["OUT"]
    assert request.flags() == 3
    assert request.timeout() == 250
    assert request.parameters() == '{"temperature": 1, "stream": true, "user": "u\\u00e9"}'
    assert json.loads(request.parameters())["user"] == "u\u00e9"
    assert request.is_cancelled() is True
    assert request.get_response_sender().is_cancelled() is True
    assert request.get_response_sender() is request.get_response_sender()
    assert request._release_flags == pb.TRITONSERVER_REQUEST_RELEASE_ALL


def test_sender_flag_rules() -> None:
    sender = _server_request(_Recorder()).get_response_sender()
    with pytest.raises(
        pb.TritonModelException, match=r"^Unable to send response\. Unsupported flag provided\.$"
    ):
        sender.send(pb.InferenceResponse(), flags=2)
    with pytest.raises(pb.TritonModelException, match="required unless flags"):
        sender.send(None, flags=0)
    with pytest.raises(TypeError):
        sender.send("text")  # type: ignore[arg-type]


def test_decoupled_sender_streams_then_closes() -> None:
    hook = _Recorder()
    sender = _server_request(hook).get_response_sender()
    first, second = pb.InferenceResponse(), pb.InferenceResponse()
    sender.send(first)
    sender.send(second, flags=0)
    sender.send(flags=pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert hook.calls == [(first, False), (second, False), (None, True)]
    closed = r"^Unable to send response\. Response sender has been closed\.$"
    with pytest.raises(pb.TritonModelException, match=closed):
        sender.send(pb.InferenceResponse())
    with pytest.raises(pb.TritonModelException, match=closed):
        sender.send(flags=pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert len(hook.calls) == 3


def test_decoupled_sender_final_with_response() -> None:
    hook = _Recorder()
    sender = _server_request(hook).get_response_sender()
    last = pb.InferenceResponse()
    sender.send(last, flags=pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert hook.calls == [(last, True)]
    with pytest.raises(pb.TritonModelException, match="has been closed"):
        sender.send(pb.InferenceResponse())


def test_default_mode_sender_rules() -> None:
    hook = _Recorder()
    sender = _server_request(hook, decoupled=False).get_response_sender()
    with pytest.raises(pb.TritonModelException, match="cannot send complete final before"):
        sender.send(flags=pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    only = pb.InferenceResponse()
    sender.send(only)
    with pytest.raises(pb.TritonModelException, match="cannot send more than one response"):
        sender.send(pb.InferenceResponse())
    sender.send(flags=pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert hook.calls == [(only, False), (None, True)]
    with pytest.raises(pb.TritonModelException, match="has been closed"):
        sender.send(flags=pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


def test_sender_state_unchanged_when_the_hook_fails() -> None:
    hook = _Recorder()
    sender = _server_request(hook).get_response_sender()
    hook.fail_next = True
    with pytest.raises(RuntimeError, match="socket closed"):
        sender.send(flags=pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    sender.send(flags=pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)  # not closed by the failure
    assert hook.calls == [(None, True)]


def test_sender_from_many_threads_keeps_final_last() -> None:
    hook = _Recorder()
    sender = _server_request(hook).get_response_sender()

    def worker() -> None:
        for _ in range(50):
            sender.send(pb.InferenceResponse())

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sender.send(flags=pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert len(hook.calls) == 201
    assert [final for _, final in hook.calls].index(True) == 200


# --------------------------------------------------------------------------- BLS bridge


class _CancellableStream:
    def __init__(self, responses: list[pb.InferenceResponse], fail_after: int | None) -> None:
        self._responses = iter(responses)
        self._left = fail_after
        self.cancelled = False

    def __iter__(self) -> _CancellableStream:
        return self

    def __next__(self) -> pb.InferenceResponse:
        if self._left is not None:
            if self._left == 0:
                raise NotFoundError("callee vanished")
            self._left -= 1
        return next(self._responses)

    def cancel(self) -> None:
        self.cancelled = True


class _FakeBridge:
    def __init__(self) -> None:
        self.requests: list[pb.InferenceRequest] = []
        self.raise_on_infer: BaseException | None = None
        self.stream: _CancellableStream | None = None
        self.loaded: list[tuple[str, str, Mapping[str, bytes]]] = []
        self.unloaded: list[tuple[str, bool]] = []
        self.ready_queries: list[tuple[str, int]] = []
        self.model_dirs: list[str] = []

    def infer(self, request: pb.InferenceRequest) -> pb.InferenceResponse:
        self.requests.append(request)
        try:
            self.model_dirs.append(pb.get_model_dir())
        except pb.TritonModelException:
            pass
        if self.raise_on_infer is not None:
            raise self.raise_on_infer
        value = request.inputs()[0].as_numpy() * 2
        return pb.InferenceResponse._from_server(
            [pb.Tensor._from_server("OUT", value, types.BY_WIRE_NAME["INT32"])],
            parameters={"seen": True},
        )

    def infer_decoupled(self, request: pb.InferenceRequest) -> Iterator[pb.InferenceResponse]:
        self.requests.append(request)
        if self.raise_on_infer is not None:
            raise self.raise_on_infer
        assert self.stream is not None
        return self.stream

    async def infer_async(self, request: pb.InferenceRequest) -> pb.InferenceResponse:
        await asyncio.sleep(0)
        return self.infer(request)

    async def infer_decoupled_async(
        self, request: pb.InferenceRequest
    ) -> Iterator[pb.InferenceResponse]:
        await asyncio.sleep(0)
        return self.infer_decoupled(request)

    def load_model(self, name: str, config: str, files: Mapping[str, bytes]) -> None:
        if name == "broken":
            raise RuntimeError("bad config")
        self.loaded.append((name, config, files))

    def unload_model(self, name: str, unload_dependents: bool) -> None:
        self.unloaded.append((name, unload_dependents))

    def is_model_ready(self, name: str, version: int) -> bool:
        self.ready_queries.append((name, version))
        return name == "ready"


@pytest.fixture
def bridge() -> Iterator[_FakeBridge]:
    fake = _FakeBridge()
    with pb.server_context(fake, "execute"):
        yield fake


def _bls_request() -> pb.InferenceRequest:
    inputs = [pb.Tensor("IN", np.array([1, 2], np.int32))]
    return pb.InferenceRequest(
        model_name="callee", inputs=inputs, requested_output_names=["OUT"], parameters={"x": 1}
    )


def test_bls_outside_execute_raises() -> None:
    only_in_execute = r"^BLS is only supported during the 'execute' function\.$"
    management = "is only supported during the 'initialize' and 'execute' functions"
    for phase in (None, "initialize", "finalize"):
        with pb.server_context(None if phase is None else _FakeBridge(), phase or ""):
            with pytest.raises(pb.TritonModelException, match=only_in_execute):
                _bls_request().exec()
            with pytest.raises(pb.TritonModelException, match=only_in_execute):
                _bls_request().async_exec()
            for call in (
                lambda: pb.load_model("m"),
                lambda: pb.unload_model("m"),
                lambda: pb.is_model_ready("m"),
            ):
                if phase == "initialize":
                    call()  # model management is allowed while a model initializes
                else:
                    with pytest.raises(pb.TritonModelException, match=management):
                        call()


def test_a_bytes_model_name_is_decoded() -> None:
    # Triton's own BLS example passes a BYTES input's element (bytes) as the model name.
    request = pb.InferenceRequest(model_name=b"add_sub", requested_output_names=[])
    assert request._model_name == "add_sub"
    with pytest.raises(TypeError, match="model_name must be a str"):
        pb.InferenceRequest(model_name=3, requested_output_names=[])  # type: ignore[arg-type]


def test_exec_returns_the_callee_response(bridge: _FakeBridge) -> None:
    request = _bls_request()
    response = request.exec()
    assert isinstance(response, pb.InferenceResponse)
    assert bridge.requests == [request]
    assert request._parameters == {"x": 1}
    out = pb.get_output_tensor_by_name(response, "OUT")
    assert out is not None and out.as_numpy().tolist() == [2, 4]
    assert response.parameters() == '{"seen": true}'


def test_exec_failures_become_error_responses(bridge: _FakeBridge) -> None:
    bridge.raise_on_infer = NotFoundError("unknown model 'callee'")
    response = _bls_request().exec()
    assert isinstance(response, pb.InferenceResponse)
    error = response.error()
    assert error is not None
    assert (error.code(), error.message()) == (pb.TritonError.NOT_FOUND, "unknown model 'callee'")
    assert response.output_tensors() == []
    bridge.raise_on_infer = RuntimeError("lost")
    response = _bls_request().exec()
    assert isinstance(response, pb.InferenceResponse) and response.error() is not None
    assert response.error().code() == pb.TritonError.INTERNAL  # type: ignore[union-attr]
    bridge.raise_on_infer = pb.TritonModelException("BLS only in execute")
    with pytest.raises(pb.TritonModelException, match="BLS only in execute"):
        _bls_request().exec()


def test_exec_decoupled_iterates_and_cancels(bridge: _FakeBridge) -> None:
    first, last = pb.InferenceResponse(), pb.InferenceResponse()
    bridge.stream = _CancellableStream([first, last], fail_after=None)
    iterator = _bls_request().exec(decoupled=True)
    assert isinstance(iterator, pb.ResponseIterator)
    assert iter(iterator) is iterator
    assert next(iterator) is first
    iterator.cancel()
    assert bridge.stream.cancelled is True
    assert list(iterator) == [last]
    assert list(iterator) == []


def test_exec_decoupled_errors_arrive_as_responses(bridge: _FakeBridge) -> None:
    ok = pb.InferenceResponse()
    bridge.stream = _CancellableStream([ok, pb.InferenceResponse()], fail_after=1)
    items = list(_bls_request().exec(decoupled=True))  # type: ignore[arg-type]
    assert items[0] is ok
    assert len(items) == 2
    assert _error_message(items[1]) == "callee vanished"
    bridge.raise_on_infer = RuntimeError("refused")
    items = list(_bls_request().exec(decoupled=True))  # type: ignore[arg-type]
    assert [_error_message(r) for r in items] == ["refused"]


def _error_message(response: pb.InferenceResponse) -> str:
    error = response.error()
    assert error is not None
    return error.message()


def test_async_exec_awaits_the_bridge_in_the_callers_context(bridge: _FakeBridge) -> None:
    async def main() -> list[pb.InferenceResponse | pb.ResponseIterator]:
        with pb.model_dir_context("/models/caller"):
            return await asyncio.gather(*(_bls_request().async_exec() for _ in range(3)))

    responses = asyncio.run(main())
    for response in responses:
        assert isinstance(response, pb.InferenceResponse)
        out = pb.get_output_tensor_by_name(response, "OUT")
        assert out is not None and out.as_numpy().tolist() == [2, 4]
    assert bridge.model_dirs == ["/models/caller"] * 3

    bridge.raise_on_infer = NotFoundError("gone")
    failed = asyncio.run(main())
    assert [_error_message(r) for r in failed] == ["gone"] * 3  # type: ignore[arg-type]
    bridge.stream = _CancellableStream([pb.InferenceResponse()], fail_after=None)
    bridge.raise_on_infer = None

    async def stream() -> pb.InferenceResponse | pb.ResponseIterator:
        return await _bls_request().async_exec(decoupled=True)

    iterator = asyncio.run(stream())
    assert isinstance(iterator, pb.ResponseIterator) and len(list(iterator)) == 1


def test_model_management_routes_through_the_bridge(bridge: _FakeBridge) -> None:
    pb.load_model("m", config='{"backend": "onnxruntime"}', files={"file:1/model.onnx": b"\x08"})
    pb.load_model("n")
    assert bridge.loaded == [
        ("m", '{"backend": "onnxruntime"}', {"file:1/model.onnx": b"\x08"}),
        ("n", "", {}),
    ]
    pb.unload_model("m")
    pb.unload_model("n", unload_dependents=True)
    assert bridge.unloaded == [("m", False), ("n", True)]
    assert pb.is_model_ready("ready") is True
    assert pb.is_model_ready("other", "2") is False
    assert bridge.ready_queries == [("ready", -1), ("other", 2)]


def test_model_management_errors(bridge: _FakeBridge) -> None:
    with pytest.raises(pb.TritonModelException, match=r"^Failed to load model: bad config$"):
        pb.load_model("broken")
    with pytest.raises(pb.TritonModelException, match="files must be a dict"):
        pb.load_model("m", files=[b"x"])  # type: ignore[arg-type]
    with pytest.raises(pb.TritonModelException, match="map str paths to bytes"):
        pb.load_model("m", files={"file:1/model.onnx": "text"})  # type: ignore[dict-item]
    for bad in ("latest", "-1"):
        with pytest.raises(pb.TritonModelException, match=f"'{bad}' is not an integer"):
            pb.is_model_ready("m", bad)
    assert bridge.loaded == [] and bridge.ready_queries == []


def test_get_model_dir() -> None:
    with pytest.raises(pb.TritonModelException, match="only available"):
        pb.get_model_dir()
    with pb.model_dir_context("/repo/a"):
        assert pb.get_model_dir() == "/repo/a"
        with pb.model_dir_context("/repo/b"):
            assert pb.get_model_dir() == "/repo/b"
        assert pb.get_model_dir() == "/repo/a"
    with pytest.raises(pb.TritonModelException):
        pb.get_model_dir()


# --------------------------------------------------------------------------- logging


def test_logger_levels_and_call_site(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(1, logger="pytriton_core.model")
    pb.Logger.log("plain")
    pb.Logger.log("warned", pb.Logger.WARNING)
    pb.Logger.log_info("info")
    pb.Logger.log_warn("warn")
    pb.Logger.log_error("error")
    pb.Logger.log_verbose("verbose")
    records = [r for r in caplog.records if r.name == "pytriton_core.model"]
    assert [(r.levelname, r.getMessage()) for r in records] == [
        ("INFO", "plain"),
        ("WARNING", "warned"),
        ("INFO", "info"),
        ("WARNING", "warn"),
        ("ERROR", "error"),
        ("DEBUG", "verbose"),
    ]
    assert {r.filename for r in records} == {"test_pb_utils.py"}
    assert {r.funcName for r in records} == {"test_logger_levels_and_call_site"}


# --------------------------------------------------------------------------- metrics


@pytest.fixture
def registry() -> Iterator[pb.MetricRegistry]:
    fresh = pb.MetricRegistry()
    previous = pb.set_metric_registry(fresh)
    yield fresh
    pb.set_metric_registry(previous)


def test_counter(registry: pb.MetricRegistry) -> None:
    family = pb.MetricFamily("requests_total", "Requests seen", pb.MetricFamily.COUNTER)
    metric = family.Metric(labels={"model": "m"})
    metric.increment(2)
    metric.increment(0.5)
    assert metric.value() == 2.5
    with pytest.raises(pb.TritonModelException, match="negative"):
        metric.increment(-1)
    with pytest.raises(pb.TritonModelException, match="does not support set"):
        metric.set(1)
    with pytest.raises(pb.TritonModelException, match="does not support observe"):
        metric.observe(1)
    snap = registry.snapshot()
    assert [(f.name, f.description, f.kind) for f in snap] == [
        ("requests_total", "Requests seen", pb.MetricKind.COUNTER)
    ]
    assert [(s.labels, s.value) for s in snap[0].samples] == [((("model", "m"),), 2.5)]


def test_gauge(registry: pb.MetricRegistry) -> None:
    metric = pb.MetricFamily("queue_depth", "Queue", pb.MetricFamily.GAUGE).Metric()
    metric.set(10)
    metric.increment(-3)
    assert metric.value() == 7.0
    with pytest.raises(pb.TritonModelException):
        metric.observe(1)
    assert registry.snapshot()[0].samples[0].labels == ()


def test_histogram(registry: pb.MetricRegistry) -> None:
    family = pb.MetricFamily("latency_ms", "Latency", pb.MetricFamily.HISTOGRAM)
    metric = family.Metric(labels={"b": "2", "a": "1"}, buckets=[1.0, 5.0, 10.0])
    for value in (0.5, 1.0, 3.0, 7.0, 50.0):
        metric.observe(value)
    for operation in (metric.value, lambda: metric.increment(1), lambda: metric.set(1)):
        with pytest.raises(pb.TritonModelException, match="histogram does not support"):
            operation()
    (sample,) = registry.snapshot()[0].samples
    assert sample.labels == (("a", "1"), ("b", "2"))
    assert (sample.value, sample.count) == (61.5, 5)
    assert sample.buckets == (1.0, 5.0, 10.0)
    assert sample.bucket_counts == (2, 3, 4, 5)


def test_metric_creation_rules(registry: pb.MetricRegistry) -> None:
    histogram = pb.MetricFamily("h", "", pb.MetricFamily.HISTOGRAM)
    with pytest.raises(pb.TritonModelException, match="Missing required buckets"):
        histogram.Metric()
    with pytest.raises(pb.TritonModelException, match="strictly increasing"):
        histogram.Metric(buckets=[2.0, 1.0])
    with pytest.raises(pb.TritonModelException, match="Buckets must be a list"):
        histogram.Metric(buckets=3.0)  # type: ignore[arg-type]
    counter = pb.MetricFamily("c", "", pb.MetricFamily.COUNTER)
    with pytest.raises(pb.TritonModelException, match="Unexpected buckets"):
        counter.Metric(buckets=[1.0])
    with pytest.raises(pb.TritonModelException, match="Labels must be a dictionary"):
        counter.Metric(labels=[("a", "b")])  # type: ignore[arg-type]
    with pytest.raises(pb.TritonModelException, match="Invalid label name"):
        counter.Metric(labels={"bad-name": "x"})
    with pytest.raises(pb.TritonModelException, match="str value"):
        counter.Metric(labels={"n": 1})  # type: ignore[dict-item]
    with pytest.raises(pb.TritonModelException, match="not a valid metric name"):
        pb.MetricFamily("0bad", "", pb.MetricFamily.COUNTER)
    with pytest.raises(pb.TritonModelException, match="Unknown metric kind"):
        pb.MetricFamily("k", "", 9)


def test_metric_families_and_series_are_shared_by_name(registry: pb.MetricRegistry) -> None:
    first = pb.MetricFamily("shared_total", "d", pb.MetricFamily.COUNTER)
    second = pb.MetricFamily("shared_total", "d", pb.MetricFamily.COUNTER)  # second instance
    first.Metric(labels={"i": "0"}).increment(1)
    second.Metric(labels={"i": "0"}).increment(2)
    second.Metric(labels={"i": "1"}).increment(5)
    (family,) = registry.snapshot()
    assert [(s.labels, s.value) for s in family.samples] == [
        ((("i", "0"),), 3.0),
        ((("i", "1"),), 5.0),
    ]
    with pytest.raises(pb.TritonModelException, match="already exists as a counter"):
        pb.MetricFamily("shared_total", "d", pb.MetricFamily.GAUGE)


# --------------------------------------------------------------------------- pure helpers


def test_triton_string_to_numpy_table() -> None:
    assert pb.TRITON_STRING_TO_NUMPY == {
        "TYPE_BOOL": bool,
        "TYPE_UINT8": np.uint8,
        "TYPE_UINT16": np.uint16,
        "TYPE_UINT32": np.uint32,
        "TYPE_UINT64": np.uint64,
        "TYPE_INT8": np.int8,
        "TYPE_INT16": np.int16,
        "TYPE_INT32": np.int32,
        "TYPE_INT64": np.int64,
        "TYPE_FP16": np.float16,
        "TYPE_FP32": np.float32,
        "TYPE_FP64": np.float64,
        "TYPE_STRING": np.object_,
    }
    assert pb.triton_string_to_numpy("TYPE_FP32") is np.float32
    with pytest.raises(KeyError):
        pb.triton_string_to_numpy("TYPE_BF16")


TRITON_TO_NUMPY = [
    (1, np.bool_),
    (2, np.uint8),
    (3, np.uint16),
    (4, np.uint32),
    (5, np.uint64),
    (6, np.int8),
    (7, np.int16),
    (8, np.int32),
    (9, np.int64),
    (10, np.float16),
    (11, np.float32),
    (12, np.float64),
    (13, np.object_),
]


@pytest.mark.parametrize(("value", "numpy_type"), TRITON_TO_NUMPY)
def test_type_conversions(value: int, numpy_type: Any) -> None:
    assert pb.triton_to_numpy_type(value) is numpy_type
    assert pb.numpy_to_triton_type(numpy_type) == value
    assert pb.numpy_to_triton_type(np.dtype(numpy_type)) == value


def test_type_conversion_edges() -> None:
    for value in (0, 14, 99):
        assert pb.triton_to_numpy_type(value) is None
    assert pb.numpy_to_triton_type(bool) == 1
    assert pb.numpy_to_triton_type(np.bytes_) == 13
    assert pb.numpy_to_triton_type(np.dtype("S5")) == 13
    for unmapped in (np.str_, np.complex64, ml_dtypes.bfloat16, None, "no such type"):
        assert pb.numpy_to_triton_type(unmapped) is None


CONFIG = {
    "name": "m",
    "max_batch_size": 4,
    "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [3]}],
    "output": [{"name": "OUT", "data_type": "TYPE_INVALID", "dims": []}],
}


def test_config_dict_helpers() -> None:
    assert pb.get_input_config_by_name(CONFIG, "IN") == CONFIG["input"][0]  # type: ignore[index]
    assert pb.get_input_config_by_name(CONFIG, "OUT") is None
    assert pb.get_output_config_by_name(CONFIG, "OUT") == CONFIG["output"][0]  # type: ignore[index]
    assert pb.get_output_config_by_name({}, "OUT") is None
    assert pb.using_decoupled_model_transaction_policy(CONFIG) is False
    decoupled = {"model_transaction_policy": {"decoupled": True}}
    assert pb.using_decoupled_model_transaction_policy(decoupled) is True


@pytest.fixture
def codec() -> Any:
    return pytest.importorskip("pytriton_core._native.bytes_codec")


def _wire(elements: list[bytes]) -> bytes:
    return b"".join(len(e).to_bytes(4, "little") + e for e in elements)


def test_serialize_byte_tensor(codec: Any) -> None:
    objects = np.array(AWKWARD_BYTES, dtype=np.object_).reshape(2, 2)
    assert pb.serialize_byte_tensor(objects) == _wire(AWKWARD_BYTES)
    assert pb.serialize_byte_tensor(np.array([b"ab", b"c"])) == _wire([b"ab", b"c"])
    text = np.array(["h\u00e9", "x"], dtype=np.object_)
    assert pb.serialize_byte_tensor(text) == _wire(["h\u00e9".encode(), b"x"])
    assert pb.serialize_byte_tensor(text.astype(np.str_)) == _wire(["h\u00e9".encode(), b"x"])
    numbers = np.array([1, 22], dtype=np.object_)
    assert pb.serialize_byte_tensor(numbers) == _wire([b"1", b"22"])  # str(x), as Triton
    assert pb.serialize_byte_tensor(np.array([], dtype=np.object_)) == b""
    assert pb.serialize_byte_tensor(np.zeros(2, np.float32)) is None


def test_deserialize_bytes_tensor(codec: Any) -> None:
    decoded = pb.deserialize_bytes_tensor(_wire(AWKWARD_BYTES))
    assert decoded.dtype == np.object_
    assert decoded.tolist() == AWKWARD_BYTES
    assert pb.deserialize_bytes_tensor(b"").tolist() == []
    as_array = pb.deserialize_bytes_tensor(np.frombuffer(_wire([b"xy"]), np.uint8))
    assert as_array.tolist() == [b"xy"]


def test_bytes_tensor_wire_round_trip(codec: Any) -> None:
    tensor = pb.Tensor("B", np.array(AWKWARD_BYTES, dtype=np.object_))
    wire = pb.serialize_byte_tensor(tensor.as_numpy())
    back = pb.Tensor._from_server(
        "B", pb.deserialize_bytes_tensor(wire), types.BY_WIRE_NAME["BYTES"]
    )
    assert back.as_numpy().tolist() == AWKWARD_BYTES


# --------------------------------------------------------------------------- ModelConfig


def _model_config(**extra: Any) -> pb.ModelConfig:
    return pb.ModelConfig(json.dumps({**json.loads(json.dumps(CONFIG)), **extra}))


def test_model_config_as_dict() -> None:
    config = _model_config()
    assert config.as_dict() == CONFIG
    assert config.as_dict() is config.as_dict()


def test_set_max_batch_size() -> None:
    config = _model_config()
    config.set_max_batch_size(4)
    config.set_max_batch_size(8)
    assert config.as_dict()["max_batch_size"] == 8
    with pytest.raises(ValueError, match=r"sets max_batch_size 8.*smaller 2"):
        config.set_max_batch_size(2)
    with pytest.raises(ValueError, match="negative"):
        config.set_max_batch_size(-1)
    unset = _model_config(max_batch_size=0)
    unset.set_max_batch_size(16)
    assert unset.as_dict()["max_batch_size"] == 16


def test_set_dynamic_batching() -> None:
    config = _model_config()
    config.set_dynamic_batching()
    assert config.as_dict()["dynamic_batching"] == {}
    kept = _model_config(dynamic_batching={"max_queue_delay_microseconds": 100})
    kept.set_dynamic_batching()
    assert kept.as_dict()["dynamic_batching"] == {"max_queue_delay_microseconds": 100}
    for other in ("sequence_batching", "ensemble_scheduling"):
        with pytest.raises(ValueError, match=f"chooses '{other}'"):
            _model_config(**{other: {}}).set_dynamic_batching()


def test_add_input_appends_and_completes() -> None:
    config = _model_config()
    config.add_input({"name": "NEW", "data_type": "TYPE_INT32", "dims": (2, 2), "optional": True})
    config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [3], "optional": False})
    assert config.as_dict()["input"] == [
        {"name": "IN", "data_type": "TYPE_FP32", "dims": [3], "optional": False},
        {"name": "NEW", "data_type": "TYPE_INT32", "dims": [2, 2], "optional": True},
    ]


def test_add_input_rules() -> None:
    config = _model_config()
    with pytest.raises(ValueError, match=r"input 'X' .* has properties \['shape'\]"):
        config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [1], "shape": [1]})
    with pytest.raises(ValueError, match="lacks the 'name' property"):
        config.add_input({"data_type": "TYPE_FP32", "dims": [1]})
    with pytest.raises(ValueError, match=r"input 'X' .* lacks the 'data_type' property"):
        config.add_input({"name": "X", "dims": [1]})
    with pytest.raises(ValueError, match="lacks the 'dims' property"):
        config.add_input({"name": "X", "data_type": "TYPE_FP32"})
    with pytest.raises(
        ValueError,
        match="configuration expects datatype TYPE_FP32 for input 'IN', model provides TYPE_INT8",
    ):
        config.add_input({"name": "IN", "data_type": "TYPE_INT8", "dims": [3]})
    with pytest.raises(
        ValueError,
        match=r"the model expects dims \[4\] but the model configuration specifies dims \[3\]",
    ):
        config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [4]})
    config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [3], "optional": True})
    with pytest.raises(
        ValueError,
        match="the model expects optional False but the model configuration specifies "
        "optional True",
    ):
        config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [3], "optional": False})
    assert config.as_dict()["input"] == [
        {"name": "IN", "data_type": "TYPE_FP32", "dims": [3], "optional": True}
    ]


def test_add_output_rules() -> None:
    config = _model_config()
    config.add_output({"name": "OUT", "data_type": "TYPE_FP16", "dims": [-1, 2]})
    config.add_output({"name": "EXTRA", "data_type": "TYPE_STRING", "dims": [1]})
    assert config.as_dict()["output"] == [
        {"name": "OUT", "data_type": "TYPE_FP16", "dims": [-1, 2]},
        {"name": "EXTRA", "data_type": "TYPE_STRING", "dims": [1]},
    ]
    with pytest.raises(ValueError, match=r"has properties \['optional'\]"):
        config.add_output({"name": "O", "data_type": "TYPE_FP32", "dims": [1], "optional": True})
    with pytest.raises(ValueError, match="lacks the 'dims' property"):
        config.add_output({"name": "O", "data_type": "TYPE_FP32"})
    with pytest.raises(
        ValueError,
        match="configuration expects datatype TYPE_FP16 for output 'OUT', model provides TYPE_FP32",
    ):
        config.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [-1, 2]})
    with pytest.raises(
        ValueError,
        match=r"the model expects dims \[2\] but the model configuration specifies dims \[-1, 2\]",
    ):
        config.add_output({"name": "OUT", "data_type": "TYPE_FP16", "dims": [2]})


def test_set_model_transaction_policy() -> None:
    config = _model_config()
    config.set_model_transaction_policy({})
    assert config.as_dict()["model_transaction_policy"] == {}
    config.set_model_transaction_policy({"decoupled": True})
    config.set_model_transaction_policy({"decoupled": True})
    assert config.as_dict()["model_transaction_policy"] == {"decoupled": True}
    assert pb.using_decoupled_model_transaction_policy(config.as_dict()) is True
    with pytest.raises(ValueError, match="configuration sets to 'True'"):
        config.set_model_transaction_policy({"decoupled": False})
    with pytest.raises(ValueError, match=r"has properties \['streaming'\]"):
        config.set_model_transaction_policy({"streaming": True})
