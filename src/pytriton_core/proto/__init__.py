"""The wire-compatible protobuf schemas, loaded into a private descriptor pool.

``setup.py`` compiles the ``.proto`` files beside this module into ``descriptors.binpb``
(a ``FileDescriptorSet``). We load that set into our own ``DescriptorPool`` rather than
importing protoc's ``*_pb2`` modules: those register in the process-wide default pool,
where tritonclient's generated modules already declare the same ``inference.*`` names,
and the server must be importable in the same process as ``tritonclient.grpc``.

Message classes come from ``message_class("inference.ModelConfig")`` or, for the
``inference`` package, ``inference("ModelConfig")``; the most used ones are module
attributes. Their fields are not known to the type checker (they are built at run time).
"""

from __future__ import annotations

import functools
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper
from google.protobuf.message import Message

__all__ = [
    "DESCRIPTOR_SET_PATH",
    "GRPC_INFERENCE_SERVICE",
    "HEALTH_SERVICE",
    "POOL",
    "DataType",
    "ModelConfig",
    "ModelInput",
    "ModelInstanceGroup",
    "ModelOutput",
    "ModelVersionPolicy",
    "enum_type",
    "inference",
    "message_class",
]

DESCRIPTOR_SET_PATH = Path(__file__).with_name("descriptors.binpb")


def _load_pool(path: Path) -> descriptor_pool.DescriptorPool:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ImportError(
            f"{path} is missing: it is generated from the .proto files at build time; "
            "run `pip install -e .` (or `python setup.py --version`) in the project root"
        ) from None
    files = descriptor_pb2.FileDescriptorSet.FromString(data)
    pool = descriptor_pool.DescriptorPool()
    # protoc --include_imports writes dependencies before their dependents.
    for file_proto in files.file:
        pool.Add(file_proto)
    return pool


POOL: descriptor_pool.DescriptorPool = _load_pool(DESCRIPTOR_SET_PATH)
"""The private pool that holds ``inference.*`` and ``grpc.health.v1.*``; never the default one."""


@functools.cache
def message_class(full_name: str) -> type[Message]:
    """The message class for a fully qualified name, e.g. ``"inference.ModelConfig"``.

    Raises ``KeyError`` for a name the schemas do not define.
    """
    cls: type[Message] = message_factory.GetMessageClass(POOL.FindMessageTypeByName(full_name))
    return cls


def inference(name: str) -> type[Message]:
    """A message class of the ``inference`` package; nested names use dots (``"ModelInput"``)."""
    return message_class(f"inference.{name}")


@functools.cache
def enum_type(full_name: str) -> EnumTypeWrapper:
    """Name/value lookups for a top-level or nested enum, e.g. ``"inference.DataType"``."""
    return EnumTypeWrapper(POOL.FindEnumTypeByName(full_name))


ModelConfig = inference("ModelConfig")
ModelInput = inference("ModelInput")
ModelOutput = inference("ModelOutput")
ModelInstanceGroup = inference("ModelInstanceGroup")
ModelVersionPolicy = inference("ModelVersionPolicy")
DataType = enum_type("inference.DataType")

GRPC_INFERENCE_SERVICE: ServiceDescriptor = POOL.FindServiceByName("inference.GRPCInferenceService")
HEALTH_SERVICE: ServiceDescriptor = POOL.FindServiceByName("grpc.health.v1.Health")
