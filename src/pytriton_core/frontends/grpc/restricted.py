"""``--grpc-restricted-protocol`` over gRPC: which protocol each RPC belongs to, and the
check Triton makes before running a call of a restricted one (UNAVAILABLE, its message)."""

from __future__ import annotations

from collections.abc import Iterable

from pytriton_core.errors import UnavailableError
from pytriton_core.options import ApiCategory, RestrictedApis, Restriction
from pytriton_core.restricted import grpc_denial

# Every RPC of GRPCInferenceService and grpc.health.v1.Health (as Triton groups them); the
# service builder looks each one up, so a new RPC without a protocol fails at start.
CATEGORY_BY_RPC: dict[str, ApiCategory] = {
    "ServerLive": ApiCategory.HEALTH,
    "ServerReady": ApiCategory.HEALTH,
    "ModelReady": ApiCategory.HEALTH,
    "Check": ApiCategory.HEALTH,
    "ServerMetadata": ApiCategory.METADATA,
    "ModelMetadata": ApiCategory.METADATA,
    "ModelInfer": ApiCategory.INFERENCE,
    "ModelStreamInfer": ApiCategory.INFERENCE,
    "ModelConfig": ApiCategory.MODEL_CONFIG,
    "ModelStatistics": ApiCategory.STATISTICS,
    "RepositoryIndex": ApiCategory.MODEL_REPOSITORY,
    "RepositoryModelLoad": ApiCategory.MODEL_REPOSITORY,
    "RepositoryModelUnload": ApiCategory.MODEL_REPOSITORY,
    "SystemSharedMemoryStatus": ApiCategory.SHARED_MEMORY,
    "SystemSharedMemoryRegister": ApiCategory.SHARED_MEMORY,
    "SystemSharedMemoryUnregister": ApiCategory.SHARED_MEMORY,
    "CudaSharedMemoryStatus": ApiCategory.SHARED_MEMORY,
    "CudaSharedMemoryRegister": ApiCategory.SHARED_MEMORY,
    "CudaSharedMemoryUnregister": ApiCategory.SHARED_MEMORY,
    "TraceSetting": ApiCategory.TRACE,
    "LogSettings": ApiCategory.LOGGING,
}


def restriction_of(restricted: RestrictedApis, rpc: str) -> Restriction | None:
    return restricted.get(CATEGORY_BY_RPC[rpc])


def refuse_unless_allowed(
    restriction: Restriction | None, metadata: Iterable[tuple[str, object]]
) -> None:
    """Refuse the call with Triton's status (UNAVAILABLE) and message when its metadata
    lacks the restriction's key."""
    if restriction is None:
        return
    denial = grpc_denial(restriction, metadata)
    if denial is not None:
        raise UnavailableError(denial)
