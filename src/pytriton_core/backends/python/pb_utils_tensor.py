"""``pb_utils.Tensor`` and the BYTES helpers, with the DLPack plumbing they need.

CPU tensors are numpy arrays (BF16 as ``ml_dtypes.bfloat16``), shared with the server and
with DLPack consumers, never copied except where noted. numpy does the DLPack work
(``np.from_dlpack``, ``ndarray.__dlpack__``); this module adds what numpy lacks through
``ctypes`` views of the C structs of ``dlpack.h``:

* reading a capsule's device, dtype and shape without consuming it. GPU tensors are kept as
  their producer gave them (this process has no GPU array library of its own) and exported
  again on demand;
* BF16: numpy has no bfloat16, so a BF16 capsule is relabelled UINT16 before numpy imports
  it (then viewed as bfloat16), and an exported UINT16 view is relabelled BF16. The
  consumer of a capsule owns its struct until it calls the deleter, and no deleter reads
  the dtype, so relabelling is safe;
* read-only arrays (e.g. inputs viewed over a received body): numpy will not put them in a
  legacy (unversioned) capsule, which cannot say "read-only"; those are copied first, and
  the copy is logged. Consumers that ask for a versioned capsule get the data shared.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import logging
from dataclasses import dataclass
from typing import Any, Protocol, cast

import ml_dtypes
import numpy as np
import numpy.typing as npt
from numpy import ndarray

from pytriton_core import types
from pytriton_core.backends.python.pb_utils_errors import TritonModelException
from pytriton_core.memory.device import DeviceArray
from pytriton_core.memory.pinned import StagingPool
from pytriton_core.memory.system_shm import writable_copy

DEVICE_CPU = 1  # kDLCPU
DEVICE_CUDA = 2  # kDLCUDA
DEVICE_CUDA_HOST = 3  # kDLCUDAHost: pinned host memory, readable as CPU memory
CPU_DEVICES = (DEVICE_CPU, DEVICE_CUDA_HOST)
SUPPORTED_DEVICES = (DEVICE_CPU, DEVICE_CUDA, DEVICE_CUDA_HOST)
_ON_CPU = (DEVICE_CPU, 0)  # a host tensor's DLPack device

_KDL_UINT = 1
_KDL_BFLOAT = 4
# kDLInt, kDLUInt, kDLFloat, kDLBool by numpy dtype kind
_DL_CODE_BY_NUMPY_KIND = {"i": 0, "u": _KDL_UINT, "f": 2, "b": 6}
_BF16 = types.BY_WIRE_NAME["BF16"]
_BF16_DTYPE = np.dtype(ml_dtypes.bfloat16)

_log = logging.getLogger(__name__)
# Exports that had to copy a read-only array (see the module docstring). The first is
# logged at INFO, the rest at DEBUG: a model may do this for every request.
readonly_export_copies = 0


def _dl_dtype(dt: types.DataType) -> tuple[int, int] | None:
    if dt.is_bytes:
        return None
    if dt is _BF16:
        return (_KDL_BFLOAT, 16)
    return (_DL_CODE_BY_NUMPY_KIND[dt.numpy_dtype.kind], dt.itemsize * 8)


_DATATYPE_BY_DL_DTYPE: dict[tuple[int, int], types.DataType] = {
    code_bits: dt for dt in types.DATATYPES if (code_bits := _dl_dtype(dt)) is not None
}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", _DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version_major", ctypes.c_uint32),
        ("version_minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


# Private prototypes: setting argtypes on ctypes.pythonapi's shared function objects would
# change them for every other user in the process.
_capsule_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
    ("PyCapsule_GetName", ctypes.pythonapi)
)
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)

CAPSULE_TYPE: type[Any] = type(np.empty(0, np.uint8).__dlpack__())


def is_capsule(obj: object) -> bool:
    return type(obj) is CAPSULE_TYPE


@dataclass(frozen=True)
class CapsuleInfo:
    device: tuple[int, int]  # (DLDeviceType, device id)
    datatype: types.DataType
    shape: tuple[int, ...]
    c_contiguous: bool
    address: int  # of the first element (data + byte_offset)


def _tensor_struct(capsule: object) -> _DLTensor:
    name = _capsule_name(capsule)
    if name == b"dltensor":
        managed: ctypes.Structure = _DLManagedTensor.from_address(_capsule_pointer(capsule, name))
    elif name == b"dltensor_versioned":
        managed = _DLManagedTensorVersioned.from_address(_capsule_pointer(capsule, name))
    elif name in (b"used_dltensor", b"used_dltensor_versioned"):
        raise TritonModelException(
            "the DLPack capsule was already consumed (a capsule imports once)"
        )
    else:
        raise TritonModelException(f"a PyCapsule named {name!r} is not a DLPack tensor")
    tensor: _DLTensor = managed.dl_tensor
    return tensor  # a view into the capsule's struct, not a copy


def _c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...] | None) -> bool:
    if strides is None or 0 in shape:
        return True
    expected = 1
    for dim, stride in zip(reversed(shape), reversed(strides), strict=True):
        if dim != 1 and stride != expected:
            return False
        expected *= dim
    return True


def inspect_capsule(capsule: object) -> CapsuleInfo:
    """Read a capsule's header without consuming it."""
    tensor = _tensor_struct(capsule)
    dtype = tensor.dtype
    if dtype.lanes != 1:
        raise TritonModelException(f"DLPack tensors with {dtype.lanes} lanes are unsupported")
    datatype = _DATATYPE_BY_DL_DTYPE.get((dtype.code, dtype.bits))
    if datatype is None:
        raise TritonModelException(
            f"DLPack dtype (code {dtype.code}, {dtype.bits} bits) has no Triton datatype"
        )
    device = (int(tensor.device.device_type), int(tensor.device.device_id))
    if device[0] not in SUPPORTED_DEVICES:
        raise TritonModelException(
            f"DLPack device type {device[0]} is not supported by the Python backend"
        )
    shape = tuple(int(tensor.shape[i]) for i in range(tensor.ndim))
    strides = tuple(int(tensor.strides[i]) for i in range(tensor.ndim)) if tensor.strides else None
    address = int(tensor.data or 0) + int(tensor.byte_offset)
    return CapsuleInfo(device, datatype, shape, _c_contiguous(shape, strides), address)


class _CapsuleProducer:
    """Presents a bare capsule to ``np.from_dlpack``, which only takes producer objects."""

    def __init__(self, capsule: object, device: tuple[int, int]) -> None:
        self._capsule = capsule
        self._device = device

    def __dlpack__(self, *, stream: None = None, **_: object) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._device


def capsule_to_numpy(capsule: object, info: CapsuleInfo) -> npt.NDArray[Any]:
    """Import a CPU capsule without copying (consumes it); BF16 comes back as bfloat16."""
    if info.datatype is _BF16:
        _tensor_struct(capsule).dtype.code = _KDL_UINT
    array: npt.NDArray[Any] = np.from_dlpack(_CapsuleProducer(capsule, info.device))
    return array.view(_BF16_DTYPE) if info.datatype is _BF16 else array


def numpy_to_capsule(
    array: npt.NDArray[Any],
    *,
    max_version: tuple[int, int] | None = None,
    dl_device: tuple[int, int] | None = None,
    copy: bool | None = None,
) -> object:
    """Export a CPU array as a capsule (legacy unless ``max_version`` asks for 1.x)."""
    is_bf16 = array.dtype == _BF16_DTYPE
    source = array.view(np.uint16) if is_bf16 else array
    versioned = max_version is not None and max_version[0] >= 1
    if not source.flags.writeable and not versioned:
        global readonly_export_copies
        readonly_export_copies += 1
        _log.log(
            logging.INFO if readonly_export_copies == 1 else logging.DEBUG,
            "copying a read-only %s tensor %s to export it as a legacy DLPack capsule, "
            "which cannot mark memory read-only (the consumer did not ask for DLPack 1.x)",
            array.dtype,
            array.shape,
        )
        source = source.copy()
    kwargs: dict[str, Any] = {}
    if max_version is not None:
        kwargs["max_version"] = max_version
    if dl_device is not None:
        kwargs["dl_device"] = dl_device
    if copy is not None:
        kwargs["copy"] = copy
    try:
        capsule = source.__dlpack__(**kwargs)
    except (BufferError, TypeError) as exc:
        raise TritonModelException(
            f"cannot export a {array.dtype} array through DLPack: {exc}"
        ) from exc
    if is_bf16:
        dtype = _tensor_struct(capsule).dtype
        dtype.code, dtype.bits = _KDL_BFLOAT, 16
    return capsule


# --------------------------------------------------------------------------- tensors


class _ExternalDLPack:
    """A tensor outside CPU memory, kept as its producer gave it.

    An object with ``__dlpack__`` exports again on each request; a bare capsule can be
    consumed once only (that is all a capsule allows).
    """

    __slots__ = ("_capsule", "_producer")

    def __init__(self, producer: Any, capsule: object | None) -> None:
        self._producer = producer
        self._capsule = capsule

    def export(self, stream: Any) -> object:
        if self._producer is not None:
            return self._producer.__dlpack__(stream=stream)
        capsule, self._capsule = self._capsule, None
        if capsule is None:
            raise TritonModelException(
                "this GPU tensor was made from a bare DLPack capsule, which can be exported "
                "only once; pass the framework tensor itself to Tensor.from_dlpack instead"
            )
        return capsule


def tensor_from_server(name: str, array: npt.NDArray[Any], datatype: types.DataType) -> Tensor:
    """``Tensor._from_server`` (the server's hook, see ``pb_utils``), a function the compiled
    backend calls directly: a CPU array wrapped without a copy or a check."""
    # (numpy's dtypes of the builtin types are singletons: ``is`` settles most cases)
    if (
        array.dtype is not datatype.numpy_dtype
        and not datatype.is_bytes
        and array.dtype != datatype.numpy_dtype
    ):
        array = array.view(datatype.numpy_dtype)
    tensor = Tensor.__new__(Tensor)
    tensor._set_cpu(name, datatype, array, True)
    return tensor


class Tensor:
    """A named tensor: numpy-backed on the CPU, or a DLPack producer on a GPU.

    An extension type (pb_utils_tensor.pxd): every request's inputs and outputs are made
    and read as C fields, by the compiled backend and by model code alike."""

    _array: npt.NDArray[Any] | None
    _datatype: types.DataType
    _device: tuple[int, int]
    _external: _ExternalDLPack | None
    _name: str
    _shape: tuple[int, ...]

    def __init__(self, name: str, numpy_array: Any) -> None:
        """From a numpy array (or anything ``np.asarray`` takes); non-contiguous data is copied.

        Object, ``S`` and ``U`` arrays become BYTES; ``ml_dtypes.bfloat16`` arrays BF16.
        """
        if type(name) is not str or not name:
            _check_name(name)
        array = numpy_array if isinstance(numpy_array, ndarray) else np.asarray(numpy_array)
        datatype = types.from_numpy(array.dtype)
        if datatype is None:
            raise TritonModelException(f"numpy dtype {array.dtype} has no Triton datatype")
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        self._set_cpu(name, datatype, array)

    def _set_cpu(
        self,
        name: str,
        datatype: types.DataType,
        array: npt.NDArray[Any],
        server_input: bool = False,
    ) -> None:
        """A CPU tensor; ``server_input``: a request's input, copied on its first
        ``as_numpy`` if it is read-only (see ``as_numpy``)."""
        self._name = name
        self._datatype = datatype
        self._array = array
        self._shape = array.shape
        self._device = _ON_CPU
        self._external = None
        self._server_input = server_input

    _from_server = staticmethod(tensor_from_server)

    @staticmethod
    def from_dlpack(name: str, tensor: Any) -> Tensor:
        """From a DLPack capsule or a ``__dlpack__`` producer (torch, cupy, jax, numpy...).

        CPU data is shared, not copied. The data must be C-contiguous. This is the route
        for BF16 (kept as ``ml_dtypes.bfloat16``).
        """
        _check_name(name)
        if isinstance(tensor, np.ndarray):
            if not tensor.flags.c_contiguous:
                raise _not_contiguous()
            return Tensor(name, tensor)
        if is_capsule(tensor):
            producer, capsule = None, tensor
        elif hasattr(tensor, "__dlpack__") and hasattr(tensor, "__dlpack_device__"):
            producer, capsule = tensor, tensor.__dlpack__()
        else:
            raise TritonModelException(
                "Tensor.from_dlpack takes a DLPack capsule or an object with __dlpack__ and "
                f"__dlpack_device__, not {type(tensor).__name__}"
            )
        info = inspect_capsule(capsule)
        if not info.c_contiguous:
            raise _not_contiguous()
        result = Tensor.__new__(Tensor)
        if info.device[0] in CPU_DEVICES:
            result._set_cpu(name, info.datatype, capsule_to_numpy(capsule, info))
            return result
        # A GPU producer is asked again on export; its probe capsule is dropped here.
        result._name = name
        result._datatype = info.datatype
        result._array = None
        result._shape = info.shape
        result._device = info.device
        result._external = _ExternalDLPack(producer, None if producer is not None else capsule)
        result._server_input = False
        return result

    def name(self) -> str:
        return self._name

    def triton_dtype(self) -> int:
        """The TRITONSERVER datatype value (FP32 = 11, BYTES = 13, BF16 = 14...)."""
        return self._datatype.config_value

    def shape(self) -> list[int]:
        return list(self._shape)

    def is_cpu(self) -> bool:
        return self._array is not None

    def as_numpy(self) -> npt.NDArray[Any]:
        """The data as numpy, writable. BYTES: an object array.

        Shared, not copied, except for a request's input over immutable memory (a gRPC
        message, a client's shared-memory region): that one is copied once, on first use,
        so that a model may write its inputs, as under Triton's stub, whose inputs are its
        own copies. Refused, as in Triton, for GPU
        tensors and for BF16 (numpy has no bfloat16; use DLPack, e.g.
        ``torch.from_dlpack(tensor)``).
        """
        array = self._cpu_array()
        if self._datatype is _BF16:
            raise TritonModelException(
                "a BF16 tensor has no numpy form; use to_dlpack() / from_dlpack() instead"
            )
        if self._server_input and not array.flags.writeable:
            array = writable_copy(array)
            self._array = array
            self._server_input = False
        return array

    def to_dlpack(self) -> Any:  # a PyCapsule
        """A legacy ``dltensor`` capsule over this tensor's data (BYTES: refused)."""
        return self.__dlpack__()

    def __dlpack__(
        self,
        stream: Any = None,
        *,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:  # a PyCapsule
        if self._datatype.is_bytes:
            raise TritonModelException("DLPack cannot carry BYTES (string) tensors")
        if self._external is not None:
            return self._external.export(stream)
        return numpy_to_capsule(
            self._cpu_array(), max_version=max_version, dl_device=dl_device, copy=copy
        )

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._device

    def _cpu_array(self) -> npt.NDArray[Any]:
        if self._array is None:
            raise TritonModelException("the tensor is in GPU memory and has no numpy form")
        return self._array

    def _server_array(self) -> npt.NDArray[Any]:
        return self._cpu_array()

    def _server_device_array(self, staging: StagingPool | None) -> DeviceArray:
        """A GPU tensor as the server's ``DeviceArray``: a fresh export, kept (unconsumed)
        as the array's owner so that the memory lives while the server uses it."""
        assert self._external is not None
        capsule = self._external.export(None)
        info = inspect_capsule(capsule)
        return DeviceArray(
            info.address,
            info.shape,
            info.datatype.numpy_dtype,
            info.device[1],
            (capsule, self._external),
            staging,
        )

    def __repr__(self) -> str:
        where = "cpu" if self.is_cpu() else f"device={self._device}"
        return f"Tensor({self._name!r}, {self._datatype.wire_name}, {list(self._shape)}, {where})"


def _check_name(name: object) -> None:
    if not isinstance(name, str):
        raise TypeError(f"a tensor name must be a str, not {type(name).__name__}")
    if not name:
        raise TritonModelException("Tensor name cannot be an empty string.")


def _not_contiguous() -> TritonModelException:
    return TritonModelException(
        "the DLPack tensor is not C-contiguous; only C-order contiguous tensors are supported"
    )


# --------------------------------------------------------------------------- BYTES helpers


class _BytesCodec(Protocol):
    def serialize_bytes_tensor(self, array: npt.NDArray[Any]) -> bytes: ...

    def deserialize_bytes_tensor(self, buffer: Any, count: int = -1) -> npt.NDArray[Any]: ...


@functools.cache
def _bytes_codec() -> _BytesCodec:
    try:
        module = importlib.import_module("pytriton_core._native.bytes_codec")
    except ImportError as exc:
        raise ImportError(
            "pytriton_core._native.bytes_codec is not built; run `pip install -e .` or "
            "`python setup.py build_ext --inplace`"
        ) from exc
    return cast(_BytesCodec, module)


def serialize_byte_tensor(input_tensor: npt.NDArray[Any]) -> bytes | None:
    """Object/bytes/str array → the BYTES wire form: each element as 4-byte LE length + data.

    Returns ``bytes`` as Triton does (``b""`` for an empty array), and None for arrays of
    other dtypes. Non-bytes objects are written as ``str(obj)`` in UTF-8.
    """
    if input_tensor.dtype.kind not in ("O", "S", "U"):
        return None
    if input_tensor.size == 0:
        return b""
    return _bytes_codec().serialize_bytes_tensor(input_tensor)


def deserialize_bytes_tensor(encoded_tensor: Any) -> npt.NDArray[Any]:
    """The BYTES wire form (bytes or any buffer) → a 1-D object array of ``bytes``."""
    return _bytes_codec().deserialize_bytes_tensor(encoded_tensor)
