"""The face the front ends call: one object with every method HTTP, gRPC and the in-process
API need, so that none of them reaches into the repository, the tracer, the log settings or
the shared-memory registry behind it."""

from pytriton_core.service.inference_service import EXTENSIONS, InferenceService, parse_version

__all__ = ["EXTENSIONS", "InferenceService", "parse_version"]
