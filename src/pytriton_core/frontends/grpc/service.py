"""inference.GRPCInferenceService: each RPC reads its message, calls the core, answers.

The method table comes from the service descriptor, so every RPC the proto declares has a
handler (a missing one fails at start, not on the first call). Core errors are
ServerErrors; ``answering_errors`` turns them into the gRPC status their code maps to
(``ServerError.grpc_status_name``), with the core's message, in one place.
"""

from __future__ import annotations

import itertools
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf import json_format

from pytriton_core import proto
from pytriton_core.errors import InternalError, InvalidArgumentError, ServerError, UnsupportedError
from pytriton_core.frontends.grpc.infer_codec import (
    DecodedInfer,
    decode_infer_request,
    encode_infer_response,
    forward_metadata,
)
from pytriton_core.frontends.grpc.restricted import refuse_unless_allowed, restriction_of
from pytriton_core.frontends.grpc.settings import log_settings, trace_setting
from pytriton_core.frontends.grpc.shm_service import SharedMemoryRpcs
from pytriton_core.frontends.grpc.stream import InferStream
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.options import Restriction
from pytriton_core.repository.overrides import FILE_PREFIX
from pytriton_core.service import InferenceService

log = logging.getLogger(__name__)

SERVICE_NAME = proto.GRPC_INFERENCE_SERVICE.full_name
# The RPCs whose inference messages skip protobuf's (de)serialization (csrc/grpc/proto_wire).
_RAW_RPCS = ("ModelInfer", "ModelStreamInfer")
# The handler names Triton's verbose log gives RPCs that are not named after the RPC.
_VERBOSE_NAMES = {"ModelInfer": "ModelInferHandler", "ModelStreamInfer": "ModelStreamInferHandler"}
# RPCs whose implementation reads the call's metadata (forwarded headers).
_CONTEXT_RPCS = frozenset({"ModelInfer"})
# RPCs of extensions this server does not have yet: the feature named in the answer.
_UNSUPPORTED_FEATURES: dict[str, str] = {}

Unary = Callable[..., Awaitable[Any]]


def _message(name: str) -> Any:
    return proto.inference(name)


def answering_errors(
    method: Unary, rpc: str, restriction: Restriction | None = None
) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]:
    # --log-verbose=1 logs each call's steps, as Triton names them.
    handler = _VERBOSE_NAMES.get(rpc, rpc)
    calls = itertools.count()

    pass_context = rpc in _CONTEXT_RPCS

    async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        verbose = log.isEnabledFor(logging.DEBUG)
        if verbose:
            number = next(calls)
            log.debug("Process for %s, rpc_ok=1, %d step START", handler, number)
        if restriction is not None:
            await refuse_unless_allowed(restriction, context)
        failure: ServerError | None = None
        try:
            if pass_context:
                return await method(request, context)
            return await method(request)
        except ServerError as exc:
            failure = exc
        except Exception as exc:
            log.exception("%s failed", rpc)
            failure = InternalError(f"{type(exc).__name__}: {exc}")
        finally:
            if verbose:
                log.debug("Process for %s, rpc_ok=1, %d step COMPLETE", handler, number)
                log.debug("Done for %s, %d", handler, number)
        status, message = status_of(failure)
        del failure
        await context.abort(status, message)

    return call


def status_of(failure: ServerError | None) -> tuple[grpc.StatusCode, str]:
    """The gRPC status ``failure``'s code maps to, and its message.

    The callers drop the error (and the request) before they abort, outside the except
    clause: grpc.aio keeps the exception its abort raises after the call ends, and that one
    would otherwise hold ours (as its context, or through the caller's frame), whose
    traceback holds the request's frames, tensors and all (found by the leak check,
    tests/integration/leaks.py).
    """
    assert failure is not None
    return grpc.StatusCode[failure.grpc_status_name], failure.message


def _snake_case(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class GrpcInferenceService(SharedMemoryRpcs):
    """The RPC handlers over one ``InferenceService``."""

    def __init__(self, service: InferenceService) -> None:
        self._service = service

    def generic_handler(self) -> grpc.GenericRpcHandler:
        handlers: dict[str, grpc.RpcMethodHandler] = {}
        restricted = self._service.options.restricted.grpc
        for method in proto.GRPC_INFERENCE_SERVICE.methods:
            rpc = method.name
            restriction = restriction_of(restricted, rpc)
            if rpc == "ModelStreamInfer":
                handlers[rpc] = grpc.stream_stream_rpc_method_handler(self._model_stream_infer)
                continue
            if rpc in _UNSUPPORTED_FEATURES:
                implementation: Unary = _unsupported(_UNSUPPORTED_FEATURES[rpc])
            else:
                implementation = getattr(self, _snake_case(rpc))
            answering = answering_errors(implementation, rpc, restriction)
            if rpc == "ModelInfer" and restriction is None:
                answering = self._direct_model_infer(answering)
            raw = rpc in _RAW_RPCS
            request_class = proto.message_class(method.input_type.full_name)
            response_class = proto.message_class(method.output_type.full_name)
            handlers[rpc] = grpc.unary_unary_rpc_method_handler(
                answering,
                request_deserializer=None if raw else request_class.FromString,
                response_serializer=None if raw else response_class.SerializeToString,
            )
        return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)

    # --------------------------------------------------------------- health

    async def server_live(self, request: Any) -> Any:
        return _message("ServerLiveResponse")(live=self._service.is_live())

    async def server_ready(self, request: Any) -> Any:
        return _message("ServerReadyResponse")(ready=self._service.is_ready())

    async def model_ready(self, request: Any) -> Any:
        ready = self._service.is_model_ready(request.name, request.version)
        return _message("ModelReadyResponse")(ready=ready)

    # ------------------------------------------------------------- metadata

    async def server_metadata(self, request: Any) -> Any:
        return json_format.ParseDict(
            self._service.server_metadata(), _message("ServerMetadataResponse")()
        )

    async def model_metadata(self, request: Any) -> Any:
        metadata = self._service.model_metadata(request.name, request.version)
        return json_format.ParseDict(metadata, _message("ModelMetadataResponse")())

    async def model_config(self, request: Any) -> Any:
        response = _message("ModelConfigResponse")()
        response.config.CopyFrom(self._service.model_config(request.name, request.version))
        return response

    async def model_statistics(self, request: Any) -> Any:
        statistics = self._service.statistics(request.name, request.version)
        return json_format.ParseDict(statistics, _message("ModelStatisticsResponse")())

    # ---------------------------------------------------------------- infer

    async def model_infer(self, data: bytes, context: grpc.aio.ServicerContext) -> bytes:
        decoded = self._infer_request(data, context)
        # A client's cancel or deadline cancels this task; ``infer`` cancels the request.
        response = await self._service.infer(decoded.model, decoded.request)
        return _infer_answer(decoded, response)

    def _infer_request(self, data: bytes, context: grpc.aio.ServicerContext) -> DecodedInfer:
        received_ns = time.monotonic_ns()
        decoded = decode_infer_request(self._service, data, unary=True)
        decoded.received_ns = received_ns
        forward_metadata(decoded.request, context, self._service.options.grpc)
        return decoded

    def _direct_model_infer(
        self, answering: Callable[[bytes, grpc.aio.ServicerContext], Awaitable[Any]]
    ) -> Callable[[bytes, grpc.aio.ServicerContext], Awaitable[bytes]]:
        """ModelInfer in one coroutine of ours (``answering`` awaits ``model_infer``'s): the
        hot RPC. With ``--log-verbose`` on, the call goes through ``answering``, which logs
        its steps."""
        infer = self._service.infer

        async def call(data: bytes, context: grpc.aio.ServicerContext) -> bytes:
            if log.isEnabledFor(logging.DEBUG):
                answer: bytes = await answering(data, context)
                return answer
            failure: ServerError | None = None
            decoded: DecodedInfer | None = None
            try:
                decoded = self._infer_request(data, context)
                return _infer_answer(decoded, await infer(decoded.model, decoded.request))
            except ServerError as exc:
                failure = exc
            except Exception as exc:
                log.exception("ModelInfer failed")
                failure = InternalError(f"{type(exc).__name__}: {exc}")
            status, message = status_of(failure)
            del failure, decoded  # (status_of says why)
            await context.abort(status, message)
            raise AssertionError("context.abort returned")  # it always raises

        return call

    async def _model_stream_infer(
        self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> None:
        restriction = restriction_of(self._service.options.restricted.grpc, "ModelStreamInfer")
        await refuse_unless_allowed(restriction, context)
        await InferStream(self._service, context).run(requests)

    # ------------------------------------------------- logging and trace

    async def log_settings(self, request: Any) -> Any:
        return await log_settings(self._service, request)

    async def trace_setting(self, request: Any) -> Any:
        return await trace_setting(self._service, request)

    # ----------------------------------------------------- model repository

    async def repository_index(self, request: Any) -> Any:
        _reject_named_repository(request)
        response = _message("RepositoryIndexResponse")()
        for entry in self._service.repository_index(request.ready):
            model = response.models.add(name=entry.name)
            if entry.version is not None:
                model.version = str(entry.version)
            if entry.state is not None:
                model.state = entry.state.value
                model.reason = entry.reason
        return response

    async def repository_model_load(self, request: Any) -> Any:
        _reject_named_repository(request)
        config: str | None = None
        files: dict[str, bytes] = {}
        for key, parameter in request.parameters.items():
            which = parameter.WhichOneof("parameter_choice")
            if key == "config" and which == "string_param":
                config = parameter.string_param
            elif key.startswith(FILE_PREFIX) and which == "bytes_param":
                files[key] = parameter.bytes_param
            else:
                raise InternalError("unexpected error on creating Triton parameter")
        await self._service.load_model(request.model_name, config, files)
        return _message("RepositoryModelLoadResponse")()

    async def repository_model_unload(self, request: Any) -> Any:
        _reject_named_repository(request)
        unload_dependents = False
        if "unload_dependents" in request.parameters:
            parameter = request.parameters["unload_dependents"]
            if parameter.WhichOneof("parameter_choice") != "bool_param":
                raise InvalidArgumentError("Unable to parse 'unload_dependents', expecting a bool")
            unload_dependents = parameter.bool_param
        await self._service.unload_model(request.model_name, unload_dependents)
        return _message("RepositoryModelUnloadResponse")()


def _infer_answer(decoded: DecodedInfer, response: InferenceResponse) -> bytes:
    """The serialized ModelInferResponse, or the response's error raised."""
    trace = decoded.request.trace
    if trace is not None:
        # grpc.aio hands over the whole message and sends the answer itself: the read is
        # stamped as a moment, the send around the encoding.
        trace.stamp("GRPC_WAITREAD_START", decoded.received_ns)
        trace.stamp("GRPC_WAITREAD_END", decoded.received_ns)
        trace.stamp("GRPC_SEND_START")
    try:
        if response.error is not None:
            raise response.error
        return encode_infer_response(decoded, response)
    finally:
        if trace is not None:
            trace.stamp("GRPC_SEND_END")
            trace.finish()


def _reject_named_repository(request: Any) -> None:
    if request.repository_name:
        raise UnsupportedError("'repository_name' specification is not supported")


def _unsupported(feature: str) -> Unary:
    async def handler(request: Any) -> Any:
        raise UnsupportedError(f"the {feature} extension is not supported by this server yet")

    return handler
