"""The wire schemas: same names and numbers as Triton's, in a private descriptor pool."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FileDescriptor

from pytriton_core import proto


def _enum_shape(enum: EnumDescriptor) -> dict[str, int]:
    return {value.name: value.number for value in enum.values}


def _message_shape(message: Descriptor) -> dict[str, Any]:
    """Everything about a message that the wire and the JSON/text forms depend on."""
    fields = {}
    for field in message.fields:
        referenced = field.message_type or field.enum_type
        fields[field.name] = (
            field.number,
            field.type,
            field.is_repeated,
            referenced.full_name if referenced else None,
            field.containing_oneof.name if field.containing_oneof else None,
        )
    return {
        "fields": fields,
        "enums": {enum.name: _enum_shape(enum) for enum in message.enum_types},
        "nested": {nested.name: _message_shape(nested) for nested in message.nested_types},
    }


def _file_shape(file: FileDescriptor) -> dict[str, Any]:
    return {
        "package": file.package,
        "messages": {name: _message_shape(m) for name, m in file.message_types_by_name.items()},
        "enums": {name: _enum_shape(e) for name, e in file.enum_types_by_name.items()},
        "services": {
            name: {
                method.name: (
                    method.input_type.full_name,
                    method.output_type.full_name,
                    method.client_streaming,
                    method.server_streaming,
                )
                for method in service.methods
            }
            for name, service in file.services_by_name.items()
        },
    }


@pytest.mark.parametrize(
    ("ours", "theirs_module"),
    [
        ("model_config.proto", "tritonclient.grpc.model_config_pb2"),
        ("grpc_service.proto", "tritonclient.grpc.service_pb2"),
    ],
)
def test_schema_matches_tritonclient(ours: str, theirs_module: str) -> None:
    theirs = pytest.importorskip(theirs_module).DESCRIPTOR
    mine = proto.POOL.FindFileByName(ours)
    assert _file_shape(mine) == _file_shape(theirs)


def test_service_has_every_rpc_with_streaming_only_on_stream_infer() -> None:
    methods = {m.name: m for m in proto.GRPC_INFERENCE_SERVICE.methods}
    assert len(methods) == 20
    assert proto.GRPC_INFERENCE_SERVICE.full_name == "inference.GRPCInferenceService"
    streaming = [n for n, m in methods.items() if m.client_streaming or m.server_streaming]
    assert streaming == ["ModelStreamInfer"]
    assert methods["ModelConfig"].output_type.fields_by_name["config"].message_type is (
        proto.ModelConfig.DESCRIPTOR
    )


def test_health_service() -> None:
    service = proto.HEALTH_SERVICE
    assert service.full_name == "grpc.health.v1.Health"
    assert [m.name for m in service.methods] == ["Check"]
    request = proto.message_class("grpc.health.v1.HealthCheckRequest")
    response = proto.message_class("grpc.health.v1.HealthCheckResponse")
    assert service.methods[0].input_type is request.DESCRIPTOR
    assert request.DESCRIPTOR.fields_by_name["service"].number == 1
    status = proto.enum_type("grpc.health.v1.HealthCheckResponse.ServingStatus")
    assert dict(status.items()) == {
        "UNKNOWN": 0,
        "SERVING": 1,
        "NOT_SERVING": 2,
        "SERVICE_UNKNOWN": 3,
    }
    assert response(status=status.Value("SERVING")).SerializeToString() == b"\x08\x01"


def test_pool_is_private() -> None:
    assert proto.POOL is not descriptor_pool.Default()
    assert proto.ModelConfig.DESCRIPTOR.file.pool is proto.POOL


def test_accessors() -> None:
    assert proto.inference("ModelConfig") is proto.ModelConfig
    assert proto.message_class("inference.ModelInput") is proto.ModelInput
    nested = proto.inference("ModelVersionPolicy.Latest")
    assert nested.DESCRIPTOR.full_name == "inference.ModelVersionPolicy.Latest"
    assert proto.DataType.Value("TYPE_STRING") == 13
    assert proto.DataType.Name(11) == "TYPE_FP32"
    with pytest.raises(KeyError):
        proto.inference("NoSuchMessage")
    kind = proto.enum_type("inference.ModelInstanceGroup.Kind")
    assert kind.Value("KIND_MODEL") == 3
    config: Any = proto.ModelConfig(name="m", max_batch_size=8)
    config.instance_group.add(kind=kind.Value("KIND_CPU"), count=2)
    assert proto.ModelConfig.FromString(config.SerializeToString()) == config


_SAME_PROCESS = """
import {first}, {second}
from tritonclient.grpc import model_config_pb2, service_pb2
from pytriton_core import proto

ours = proto.ModelConfig(name="m", max_batch_size=4)
ours.input.add(name="INPUT0", data_type=proto.DataType.Value("TYPE_FP32"), dims=[4])
theirs = model_config_pb2.ModelConfig.FromString(ours.SerializeToString())
assert theirs.input[0].dims == [4] and theirs.name == "m"
response = service_pb2.ModelConfigResponse(config=theirs).SerializeToString()
back = proto.inference("ModelConfigResponse").FromString(response)
assert back.config == ours
print("ok")
"""


@pytest.mark.parametrize(
    ("first", "second"),
    [("pytriton_core.proto", "tritonclient.grpc"), ("tritonclient.grpc", "pytriton_core.proto")],
)
def test_importable_with_tritonclient_grpc_in_either_order(first: str, second: str) -> None:
    pytest.importorskip("tritonclient.grpc")
    # A fresh interpreter: the import order is what is under test.
    code = _SAME_PROCESS.format(first=first, second=second)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_descriptor_set_is_up_to_date_with_the_proto_files() -> None:
    grpc_tools = pytest.importorskip("grpc_tools")
    from grpc_tools import protoc

    # The same protoc call as setup.py's.
    proto_dir = proto.DESCRIPTOR_SET_PATH.parent
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    sources = sorted(p.name for p in proto_dir.glob("*.proto"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "descriptors.binpb"
        args = ["protoc", f"-I{proto_dir}", f"-I{well_known}", "--include_imports"]
        assert protoc.main([*args, f"--descriptor_set_out={out}", *sources]) == 0
        fresh = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    shipped = descriptor_pb2.FileDescriptorSet.FromString(proto.DESCRIPTOR_SET_PATH.read_bytes())
    assert shipped == fresh, "descriptors.binpb is stale: run `python setup.py --version`"
