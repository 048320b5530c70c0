"""grpc.health.v1.Health/Check, for Kubernetes gRPC probes: SERVING iff the server is ready.

As in Triton, the ``service`` field is ignored and there is no ``Watch``; while the server
exits, the readiness check's error is the answer.
"""

from __future__ import annotations

from typing import Any

from pytriton_core import proto
from pytriton_core.frontends.grpc.calls import Method, TaskCall
from pytriton_core.frontends.grpc.restricted import restriction_of
from pytriton_core.service import InferenceService

SERVICE_NAME = proto.HEALTH_SERVICE.full_name
_HealthCheckRequest: Any = proto.message_class("grpc.health.v1.HealthCheckRequest")
_HealthCheckResponse: Any = proto.message_class("grpc.health.v1.HealthCheckResponse")


def health_methods(service: InferenceService) -> list[tuple[str, Method]]:
    async def check(request: Any) -> Any:
        status = "SERVING" if service.is_ready() else "NOT_SERVING"
        return _HealthCheckResponse(status=status)

    method = Method(
        "Health/Check",
        TaskCall.start,
        handler=check,
        parse=_HealthCheckRequest.FromString,
        restriction=restriction_of(service.options.restricted.grpc, "Check"),
        verbose_name="Health/Check",
    )
    return [(f"/{SERVICE_NAME}/Check", method)]
