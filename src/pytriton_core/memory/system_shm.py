"""System shared memory regions: a client's POSIX shared-memory object, mapped.

The mapping, every range check and every copy are the compiled ``_native.shm``; this module
names the region and turns the extension's exceptions into Triton's errors and messages.
A region is unmapped when its last reference goes: the registry holds one while it is
registered, and each request that uses it holds its own (input arrays through their views,
outputs through ``ShmOutput``), so unregistering a region in use unmaps it only once those
requests are done.

A client may shrink its object under the mapping; the compiled guard keeps the server alive
and marks the region (see ``_native.shm``). Every later use of the region, and each request
that was reading or writing it then, fails with ``truncated_error``.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import numpy.typing as npt

from pytriton_core._native.shm import (
    OutputTooLargeError,
    RegionMapError,
    RegionOpenError,
    RegionRangeError,
    RegionTruncatedError,
    RegionView,
    SystemRegion,
)
from pytriton_core.errors import InternalError, InvalidArgumentError
from pytriton_core.inference.tensor_data import Buffer
from pytriton_core.memory.device import DeviceArray


def truncated_error(region_name: str) -> InvalidArgumentError:
    """The answer once a client has shrunk a region's object under the mapping."""
    return InvalidArgumentError(
        f"shared memory region '{region_name}' was truncated by its client while mapped "
        "(its object is smaller than the registered range): unregister it and register it "
        "again"
    )


def range_error(error: RegionRangeError, region_name: str) -> InvalidArgumentError:
    """Triton's message for a request's offset / byte size outside a region."""
    part = "offset" if error.part == "offset" else "offset + byte size"
    return InvalidArgumentError(f"Invalid {part} for shared memory region: '{region_name}'")


class SystemSharedMemoryRegion:
    """A registered system region (``name``) over ``[offset, offset + byte_size)`` of ``key``."""

    kind = "system"

    def __init__(self, name: str, native: SystemRegion) -> None:
        self.name = name
        self._native = native

    @property
    def key(self) -> str:
        return self._native.key

    @property
    def offset(self) -> int:
        return self._native.offset

    @property
    def byte_size(self) -> int:
        return self._native.byte_size

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "key": self.key,
            "offset": self.offset,
            "byte_size": self.byte_size,
        }

    def check(self, offset: int, byte_size: int) -> None:
        """InvalidArgumentError unless the range lies inside the region."""
        try:
            self._native.check(offset, byte_size)
        except RegionRangeError as exc:
            raise range_error(exc, self.name) from None
        except RegionTruncatedError:
            raise truncated_error(self.name) from None

    def lost(self) -> InvalidArgumentError | None:
        """The error to answer with once the client has shrunk the object, else None."""
        return None if self._native.backed() else truncated_error(self.name)

    def read(self, offset: int, byte_size: int) -> Buffer:
        """The range's bytes as a read-only zero-copy view (which keeps the region mapped)."""
        try:
            return memoryview(self._native.view(offset, byte_size))
        except RegionRangeError as exc:
            raise range_error(exc, self.name) from None
        except RegionTruncatedError:
            raise truncated_error(self.name) from None

    def write(self, offset: int, byte_size: int, data: Buffer) -> None:
        """Copy ``data`` into the range; OutputTooLargeError when it exceeds ``byte_size``."""
        try:
            self._native.write(offset, byte_size, data)
        except RegionRangeError as exc:
            raise range_error(exc, self.name) from None
        except RegionTruncatedError:
            raise truncated_error(self.name) from None

    def write_device(self, offset: int, byte_size: int, array: DeviceArray) -> None:
        """Copy a GPU backend's output straight into the range: one device -> host copy."""
        self.check(offset, byte_size)
        if array.nbytes > byte_size:
            raise OutputTooLargeError(array.nbytes, byte_size)
        array.copy_to(self._native.address + offset)
        lost = self.lost()
        if lost is not None:  # the copy met a shrunk object
            raise lost


def open_system_region(
    name: str, key: str, offset: int, byte_size: int
) -> SystemSharedMemoryRegion:
    """Map the region a client registers; Triton's errors when it cannot be."""
    try:
        native = SystemRegion.open(key, offset, byte_size)
    except RegionOpenError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise InternalError(f"Unable to open shared memory region: '{key}': {reason}") from None
    except RegionRangeError as exc:
        if exc.part == "byte size":
            detail = "byte_size must be greater than 0"
        else:
            detail = (
                f"offset {offset} and byte_size {byte_size} do not lie within the object's "
                f"{exc.extent} bytes"
            )
        raise InternalError(f"Invalid shared memory region: '{key}': {detail}") from None
    except RegionMapError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise InternalError(f"Unable to map shared memory region: '{key}': {reason}") from None
    except ValueError as exc:
        raise InvalidArgumentError(f"Invalid shared memory key: {exc}") from None
    return SystemSharedMemoryRegion(name, native)


# From this size on, a writable copy of an input read from a region is a private mapping of
# its pages (copy-on-write) rather than a copy of its bytes. Measured on the 2-vCPU machine,
# an input read, made writable and copied into another region (docs/benchmarks.md, "A large
# shared-memory input made writable without a copy"): 256 KiB 12 us copied, 20 mapped (the
# open, mmap and munmap a mapping costs); 1 MiB 100 against 93; 2 MiB 293 against 241;
# 4 MiB 628 against 480.
PRIVATE_COPY_MIN_BYTES = 1 << 20


def writable_copy(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A writable copy of a read-only input ``array``: for a large one read from a system
    region (its base a region's view), the range mapped again copy-on-write, where a page is
    copied only if written; else ``array.copy()``."""
    if array.nbytes >= PRIVATE_COPY_MIN_BYTES and array.flags.c_contiguous:
        view = array.base  # a reshaped view's base is the array it came from
        while isinstance(view, np.ndarray):
            view = view.base
        if isinstance(view, memoryview):  # an array made by ``frombuffer`` keeps the memoryview
            view = view.obj
        if isinstance(view, RegionView):
            region: SystemRegion = view.region
            offset = array.__array_interface__["data"][0] - region.address
            try:
                copy = region.private_copy(offset, array.nbytes)
            except (RegionRangeError, RegionTruncatedError):
                copy = None  # the copy below meets the same condition, and the guard marks it
            if copy is not None:
                return np.ndarray(array.shape, array.dtype, copy)
    copied: npt.NDArray[Any] = array.copy()
    return copied


__all__ = [
    "PRIVATE_COPY_MIN_BYTES",
    "OutputTooLargeError",
    "SystemSharedMemoryRegion",
    "open_system_region",
    "range_error",
    "truncated_error",
    "writable_copy",
]
