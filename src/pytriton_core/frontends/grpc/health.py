"""grpc.health.v1.Health/Check, for Kubernetes gRPC probes: SERVING iff the server is ready.

As in Triton, the ``service`` field is ignored and there is no ``Watch``; while the server
exits, the readiness check's error is the answer.
"""

from __future__ import annotations

from typing import Any

import grpc

from pytriton_core import proto
from pytriton_core.frontends.grpc.restricted import restriction_of
from pytriton_core.frontends.grpc.service import answering_errors
from pytriton_core.service import InferenceService

SERVICE_NAME = proto.HEALTH_SERVICE.full_name
_HealthCheckRequest: Any = proto.message_class("grpc.health.v1.HealthCheckRequest")
_HealthCheckResponse: Any = proto.message_class("grpc.health.v1.HealthCheckResponse")


def health_handler(service: InferenceService) -> grpc.GenericRpcHandler:
    async def check(request: Any) -> Any:
        status = "SERVING" if service.is_ready() else "NOT_SERVING"
        return _HealthCheckResponse(status=status)

    return grpc.method_handlers_generic_handler(
        SERVICE_NAME,
        {
            "Check": grpc.unary_unary_rpc_method_handler(
                answering_errors(
                    check, "Health/Check", restriction_of(service.options.restricted.grpc, "Check")
                ),
                request_deserializer=_HealthCheckRequest.FromString,
                response_serializer=_HealthCheckResponse.SerializeToString,
            )
        },
    )
