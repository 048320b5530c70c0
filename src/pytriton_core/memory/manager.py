"""The shared-memory registry both front ends use: one namespace for system and CUDA regions.

Registration (``register_system`` / ``register_cuda``), status and unregistration answer
with Triton's errors and messages; ``allow_client`` (``--allow-client-shm``) gates register
and unregister (status always works), as in Triton 2.73.

Inference: a front end parses an input's or output's shared-memory parameters into a
``ShmReference``; ``input_tensor`` makes the input tensor (a zero-copy view of a system
region; for a CUDA region a ``DeviceTensor`` over the region, which GPU backends read in
place and anything else copies to the host once) and ``output_target`` resolves and checks
an output's range before the model runs, so that the response writes the output there with
one copy (``ShmOutput.write``: from host memory, or from a GPU backend's device memory).
Both hold the region they use, so a region unregistered meanwhile stays mapped until the
request lets go.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Protocol

from pytriton_core import types
from pytriton_core.errors import (
    AlreadyExistsError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    UnsupportedError,
)
from pytriton_core.inference.tensor import DeviceTensor, GuardedTensor, Tensor
from pytriton_core.inference.tensor_data import Buffer, array_from_bytes, array_to_bytes
from pytriton_core.memory import cuda_shm
from pytriton_core.memory.device import DeviceArray
from pytriton_core.memory.pinned import DEFAULT_PINNED_POOL_BYTE_SIZE, StagingPool
from pytriton_core.memory.system_shm import (
    OutputTooLargeError,
    SystemSharedMemoryRegion,
    open_system_region,
)

CLIENT_SHM_DISABLED = (
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
)


class Region(Protocol):
    """What inference needs of a registered region, system or CUDA."""

    name: str
    kind: str  # "system" or "cuda"

    def status(self) -> dict[str, Any]: ...
    def check(self, offset: int, byte_size: int) -> None: ...
    def read(self, offset: int, byte_size: int) -> Buffer: ...
    def write(self, offset: int, byte_size: int, data: Buffer) -> None: ...
    def write_device(self, offset: int, byte_size: int, array: DeviceArray) -> None: ...


@dataclass(frozen=True, slots=True)
class ShmReference:
    """A tensor's ``shared_memory_region`` / ``_offset`` / ``_byte_size`` parameters.

    ``offset`` and ``byte_size`` are what the client sent: the compiled checks refuse
    negative values and values above 2**64 - 1 when the region is used.
    """

    region: str
    offset: int
    byte_size: int


@dataclass(slots=True)
class ShmOutput:
    """Where one requested output goes: a checked range of a region the request holds."""

    name: str
    region: Region
    offset: int
    byte_size: int

    def write(self, tensor: Tensor) -> None:
        """Copy the output into the range: its binary form (one copy for a contiguous
        fixed-size tensor), or straight from the device for a GPU backend's output that
        has no host copy; INTERNAL, in Triton's words, when it does not fit."""
        try:
            if isinstance(tensor, DeviceTensor) and not tensor.on_host:
                device = tensor.device
                assert isinstance(device, DeviceArray)
                self.region.write_device(self.offset, self.byte_size, device)
            else:
                self.region.write(self.offset, self.byte_size, array_to_bytes(tensor))
        except OutputTooLargeError as exc:
            raise InternalError(
                f"shared memory size specified with the request for output '{self.name}' "
                f"({self.byte_size} bytes) should be at least {exc.needed} bytes to hold the "
                "results"
            ) from None


class SharedMemoryManager:
    """Registered client regions (see the module docstring). Thread-safe."""

    def __init__(
        self,
        *,
        allow_client: bool,
        pinned_pool_byte_size: int = DEFAULT_PINNED_POOL_BYTE_SIZE,
        staging: StagingPool | None = None,
    ) -> None:
        self.allow_client = allow_client
        # One pool per server: the model instances' GPU batch buffers draw from it too.
        self.staging = staging if staging is not None else StagingPool(pinned_pool_byte_size)
        self._lock = threading.Lock()
        self._regions: dict[str, Region] = {}

    # ------------------------------------------------------------ registration

    def require_client_shm(self) -> None:
        """UNSUPPORTED unless clients may register regions (``--allow-client-shm``)."""
        if not self.allow_client:
            raise UnsupportedError(CLIENT_SHM_DISABLED)

    def _add(self, name: str, open_region: Any) -> None:
        with self._lock:
            if name in self._regions:
                raise AlreadyExistsError(f"shared memory region '{name}' already in manager")
            self._regions[name] = open_region()

    def register_system(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self.require_client_shm()
        if not name:
            raise InvalidArgumentError(
                "'region name' is necessary to register system shared memory region"
            )
        self._add(name, lambda: open_system_region(name, key, offset, byte_size))

    def register_cuda(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        self.require_client_shm()
        if not name:
            raise InvalidArgumentError(
                "'region name' is necessary to register cuda shared memory region"
            )
        self.require_gpu(name)
        self._add(
            name,
            lambda: cuda_shm.open_cuda_region(name, raw_handle, device_id, byte_size, self.staging),
        )

    @staticmethod
    def require_gpu(name: str) -> None:
        """The answer of a server without GPU support to a CUDA registration."""
        if cuda_shm.gpu_unavailable_reason() is not None:
            raise InvalidArgumentError(
                f"failed to register CUDA shared memory region: '{name}', GPUs not supported"
            )

    def unregister(self, kind: str, name: str | None) -> None:
        """Forget one region of ``kind`` (a name that is not one: nothing to do) or, with no
        name, all of them. A region in use stays mapped until its requests finish."""
        self.require_client_shm()
        with self._lock:
            names = [name] if name else list(self._regions)
            dropped = [
                self._regions.pop(n)
                for n in names
                if n in self._regions and self._regions[n].kind == kind
            ]
        # Unmapped here, outside the lock, unless a request still holds one.
        del dropped

    def status(self, kind: str, name: str | None) -> list[dict[str, Any]]:
        """The regions of ``kind`` sorted by name, or just ``name`` (NOT_FOUND if unknown)."""
        with self._lock:
            if name:
                region = self._regions.get(name)
                if region is None or region.kind != kind:
                    label = "system" if kind == "system" else "cuda"
                    raise NotFoundError(f"Unable to find {label} shared memory region: '{name}'")
                return [region.status()]
            return [r.status() for n, r in sorted(self._regions.items()) if r.kind == kind]

    # ---------------------------------------------------------------- inference

    def find(self, name: str) -> Region:
        region = self._regions.get(name)  # one dict read: atomic under the GIL
        if region is None:
            raise NotFoundError(f"Unable to find shared memory region: '{name}'")
        return region

    def input_tensor(
        self,
        ref: ShmReference,
        datatype: types.DataType,
        shape: list[int],
        *,
        input_name: str,
        model_name: str,
        request_id: str,
        max_bytes_elements: int | None = None,
    ) -> Tensor:
        """The input of ``shape`` the range holds: a read-only view of a system region, or
        a tensor left on the device for a CUDA region (BYTES elements are read on the host)."""
        region = self.find(ref.region)
        if isinstance(region, cuda_shm.CudaSharedMemoryRegion) and not datatype.is_bytes:
            # The range is checked first (its error comes before a size mismatch).
            device = region.device_array(
                ref.offset, ref.byte_size, datatype.numpy_dtype, tuple(shape)
            )
            if device.nbytes != ref.byte_size:
                raise InvalidArgumentError(
                    f"input byte size mismatch for input '{input_name}' for model "
                    f"'{model_name}'. Expected {device.nbytes}, got {ref.byte_size}"
                ).with_request_id(request_id)
            return DeviceTensor(input_name, datatype, device)
        data = region.read(ref.offset, ref.byte_size)
        array = array_from_bytes(
            data,
            datatype,
            shape,
            input_name=input_name,
            model_name=model_name,
            request_id=request_id,
            max_bytes_elements=max_bytes_elements,
        )
        if isinstance(region, SystemSharedMemoryRegion):
            # Its client can shrink the object while the model reads: the request fails then.
            return GuardedTensor(input_name, datatype, array, region.lost)
        return Tensor(input_name, datatype, array)

    def output_target(self, output_name: str, ref: ShmReference) -> ShmOutput:
        """Where the output goes; its range checked now, before the model runs."""
        region = self.find(ref.region)
        region.check(ref.offset, ref.byte_size)
        return ShmOutput(output_name, region, ref.offset, ref.byte_size)
