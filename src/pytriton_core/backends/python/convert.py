"""Tensors between the server (``inference.tensor``) and ``pb_utils``, without copies.

Host arrays are shared as they are; GPU tensors cross as DLPack exports of the same memory.
"""

from __future__ import annotations

from pytriton_core.backends.python import pb_utils
from pytriton_core.backends.python.pb_utils_tensor import tensor_from_server
from pytriton_core.inference.tensor import DeviceTensor, Tensor
from pytriton_core.memory.pinned import StagingPool


def to_pb_tensor(tensor: Tensor, gpu: bool) -> pb_utils.Tensor:
    """A server tensor for model code; ``gpu``: a GPU tensor stays on its device."""
    if (
        gpu
        and isinstance(tensor, DeviceTensor)
        and not tensor.on_host
        and tensor.datatype.wire_name != "BF16"  # DLPack through cupy has no bfloat16
    ):
        return pb_utils.Tensor.from_dlpack(tensor.name, tensor.device)
    return tensor_from_server(tensor.name, tensor.data, tensor.datatype)


def from_pb_tensor(tensor: pb_utils.Tensor, staging: StagingPool | None) -> Tensor:
    """A tensor model code made, for the server (a GPU one is copied to the host, or to a
    client's region, only when that is where it goes)."""
    # (its fields read here, not through an accessor: every output of every response
    # passes here)
    array = tensor._array
    if array is not None:
        return Tensor(tensor._name, tensor._datatype, array)
    return DeviceTensor(tensor._name, tensor._datatype, tensor._server_device_array(staging))
