"""inference.GRPCInferenceService: each RPC reads its message, calls the core, answers.

The method table comes from the service descriptor, so every RPC the proto declares has a
handler (a missing one fails at start, not on the first call). A handler takes the parsed
request message and returns the response message; core errors (``ServerError``) end the
call with the status their code maps to (``status.status_of``), in ``calls.Call.fail``.
``ModelInfer`` and ``ModelStreamInfer`` read and write their messages' bytes themselves
(``infer_codec``, over ``csrc/grpc/proto_wire``): ``calls.InferCall`` and
``stream.InferStream``.
"""

from __future__ import annotations

import re
from typing import Any

from google.protobuf import json_format

from pytriton_core import proto
from pytriton_core.errors import InternalError, InvalidArgumentError, UnsupportedError
from pytriton_core.frontends.grpc.calls import InferCall, Method, StreamCall, TaskCall
from pytriton_core.frontends.grpc.restricted import restriction_of
from pytriton_core.frontends.grpc.settings import log_settings, trace_setting
from pytriton_core.frontends.grpc.shm_service import SharedMemoryRpcs
from pytriton_core.frontends.grpc.stream import InferStream
from pytriton_core.repository.overrides import FILE_PREFIX
from pytriton_core.service import InferenceService

SERVICE_NAME = proto.GRPC_INFERENCE_SERVICE.full_name
# The handler names Triton's verbose log gives RPCs that are not named after the RPC.
_VERBOSE_NAMES = {"ModelInfer": "ModelInferHandler", "ModelStreamInfer": "ModelStreamInferHandler"}


def _message(name: str) -> Any:
    return proto.inference(name)


def _snake_case(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class GrpcInferenceService(SharedMemoryRpcs):
    """The RPC handlers over one ``InferenceService``."""

    def __init__(self, service: InferenceService) -> None:
        self._service = service

    def methods(self) -> list[tuple[str, Method]]:
        """Every RPC of the service: (its path, how it is served)."""
        restricted = self._service.options.restricted.grpc
        methods = []
        for descriptor in proto.GRPC_INFERENCE_SERVICE.methods:
            rpc = descriptor.name
            restriction = restriction_of(restricted, rpc)
            verbose_name = _VERBOSE_NAMES.get(rpc, rpc)
            if rpc == "ModelInfer":
                method = Method(
                    rpc, InferCall.start, restriction=restriction, verbose_name=verbose_name
                )
            elif rpc == "ModelStreamInfer":
                method = Method(
                    rpc,
                    stream_body=self._model_stream_infer,
                    restriction=restriction,
                    verbose_name=verbose_name,
                )
            else:
                request_class = proto.message_class(descriptor.input_type.full_name)
                method = Method(
                    rpc,
                    TaskCall.start,
                    handler=getattr(self, _snake_case(rpc)),
                    parse=request_class.FromString,
                    restriction=restriction,
                    verbose_name=verbose_name,
                )
            methods.append((f"/{SERVICE_NAME}/{rpc}", method))
        return methods

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

    async def _model_stream_infer(self, call: StreamCall) -> None:
        await InferStream(self._service, call).run(call.messages())

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


def _reject_named_repository(request: Any) -> None:
    if request.repository_name:
        raise UnsupportedError("'repository_name' specification is not supported")
