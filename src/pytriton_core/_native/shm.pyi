"""Client system shared memory (csrc/shm): mapped regions, range checks and copies."""

from typing import Any, final

from typing_extensions import Buffer

UINT64_MAX: int

class RegionRangeError(ValueError):
    """A range not inside a region or object. ``part``: "offset" (the offset itself is
    outside, negative or above 2**64 - 1), "offset + byte size" (the end is outside) or
    "byte size" (an empty region)."""

    part: str
    offset: Any
    byte_size: Any
    extent: int | None

    def __init__(self, part: str, offset: Any, byte_size: Any, extent: int | None) -> None: ...

class RegionTruncatedError(ValueError):
    """The client shrank the region's object under the mapping (seen by the SIGBUS guard at
    a touch past the object's new end): the region cannot be used any more."""

    key: str

    def __init__(self, key: str) -> None: ...

class RegionOpenError(OSError):
    """shm_open failed for the key (errno set)."""

class RegionMapError(OSError):
    """fstat or mmap failed for an object that could be opened (errno set)."""

class OutputTooLargeError(ValueError):
    """Data larger than the byte size reserved for it."""

    needed: int
    byte_size: int

    def __init__(self, needed: int, byte_size: int) -> None: ...

def check_range(extent: int, offset: int, byte_size: int) -> None:
    """Raise RegionRangeError unless [offset, offset + byte_size) lies in [0, extent);
    negative values and values above 2**64 - 1 are refused, the sum is never formed."""

@final
class SystemRegion:
    """A mapped client region, holding no file descriptor; unmapped when the last reference
    (views and the arrays over them included) goes. A touch of a page past the end of an
    object its client shrank completes on anonymous memory and marks the region truncated
    (the compiled SIGBUS guard), instead of killing the process."""

    @staticmethod
    def open(key: str, offset: int, byte_size: int) -> SystemRegion:
        """Map [offset, offset + byte_size) of the object ``key`` read/write.

        RegionOpenError: the object cannot be opened; RegionRangeError: the range is empty
        or not inside the object; RegionMapError: mmap failed; ValueError: a key with NUL.
        """

    @property
    def key(self) -> str: ...
    @property
    def offset(self) -> int: ...
    @property
    def byte_size(self) -> int: ...
    @property
    def address(self) -> int: ...
    def backed(self) -> bool:
        """False once a touch found the object shrunk under the mapping (seen at the first
        touch of a page past the new end, not before)."""

    def check(self, offset: int, byte_size: int) -> None:
        """RegionRangeError unless the range is inside the region; RegionTruncatedError
        once it is not backed."""

    def view(self, offset: int, byte_size: int) -> RegionView:
        """A read-only zero-copy view of the checked range."""

    def private_copy(self, offset: int, byte_size: int) -> PrivateCopy | None:
        """A writable copy-on-write mapping of the checked range, or None where the object
        is no longer the one registered (or gone, or shrunk): copy instead."""

    def write(self, offset: int, byte_size: int, data: Buffer) -> int:
        """Copy C-contiguous ``data`` to the region at ``offset`` (checked range;
        OutputTooLargeError when it exceeds ``byte_size``; RegionTruncatedError when the
        region is, or the copy found it, truncated); returns the bytes copied. A source
        that is a private copy of bytes the range overlaps is copied through a buffer."""

@final
class RegionView:
    """Read-only bytes of a SystemRegion (buffer protocol); keeps the region mapped."""

    @property
    def nbytes(self) -> int: ...
    @property
    def region(self) -> SystemRegion: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

@final
class PrivateCopy:
    """Writable copy-on-write bytes of a SystemRegion's range (buffer protocol): reads see
    the client's bytes, writes stay here; keeps the region mapped."""

    @property
    def nbytes(self) -> int: ...
    @property
    def region(self) -> SystemRegion: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
