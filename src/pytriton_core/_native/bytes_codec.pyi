"""BYTES tensors <-> their wire form (csrc/tensor_codec/bytes_codec.pyx).

Wire form (spec/protocol.md §0.3): for each element in row-major (C) order, a 4-byte
little-endian uint32 length followed by that many raw bytes; no padding.
"""

from typing import Any

import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer

def serialize_bytes_tensor(array: npt.NDArray[Any]) -> bytes:
    """The wire form of a BYTES tensor of any shape and strides, in one ``bytes``.

    ``array`` may be an object array or a numpy ``S`` / ``U`` array (whose elements lose
    trailing NULs, as numpy hands them out). Object elements become:

    * ``bytes`` and subclasses (``numpy.bytes_``): as they are;
    * ``str`` and subclasses (``numpy.str_``): UTF-8;
    * ``bytearray``: its contents;
    * anything else, ``None`` included: ``str(x).encode("utf-8")``, as tritonclient's
      ``serialize_byte_tensor`` does.

    tritonclient differs for ``numpy.bytes_`` and ``bytearray`` elements of object arrays,
    which it turns into their repr (``"b'abc'"``); a ``U`` array it refuses.

    Raises TypeError for other dtypes, UnicodeEncodeError for a str that UTF-8 cannot
    encode (lone surrogates), ValueError for an element over 4 GiB - 1 bytes.
    """

def bytes_tensor_byte_size(array: npt.NDArray[Any]) -> int:
    """``len(serialize_bytes_tensor(array))``, without building it (same errors)."""

def deserialize_bytes_tensor(buffer: Buffer, count: int = -1) -> npt.NDArray[np.object_]:
    """Split a serialized BYTES tensor into a 1-D object array of ``bytes`` (copies).

    ``buffer``: any C-contiguous buffer (bytes, bytearray, memoryview, numpy array), read
    as raw bytes. ``count >= 0``: exactly that many elements must fill the buffer;
    ``count == -1``: as many as the buffer holds.

    Raises ValueError naming the element and byte offset when a length prefix is cut short
    or runs past the end, or when the buffer holds fewer or more than ``count`` elements.
    A non-contiguous buffer fails as its exporter says (BufferError; numpy: ValueError).
    Never reads outside the buffer.
    """

def count_bytes_elements(buffer: Buffer) -> int:
    """Number of elements in a serialized BYTES tensor, validating the whole framing
    (the ValueErrors of ``deserialize_bytes_tensor``) without creating any."""
