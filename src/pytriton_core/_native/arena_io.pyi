import numpy as np

class ArenaMemory:
    """The shared mapping of ``fd``'s first ``size`` bytes (unmapped with its last
    reference: the arrays viewing it hold it), read and written by offset; every offset
    and size is checked against ``size``."""

    size: int
    def __init__(self, fd: int, size: int) -> None: ...
    def write(self, offset: int, source: object) -> None:
        """Copy ``source`` (a C-contiguous array, bytes, or a contiguous buffer) to
        ``offset``."""
    def array(
        self, offset: int, nbytes: int, dtype: np.dtype, shape: tuple[int, ...], copy: bool
    ) -> np.ndarray:
        """The bytes at ``offset`` as an array: a copy, or a read-only view."""
    def written(self) -> int: ...
    def taken(self) -> int: ...
    def set_written(self, value: int) -> None: ...
    def add_taken(self, count: int) -> None: ...
    def __buffer__(self, flags: int) -> memoryview: ...
