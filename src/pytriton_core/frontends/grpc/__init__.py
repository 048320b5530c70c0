"""inference.GRPCInferenceService and grpc.health.v1, over grpc.aio."""

from pytriton_core.frontends.grpc.server import GrpcFrontend

__all__ = ["GrpcFrontend"]
