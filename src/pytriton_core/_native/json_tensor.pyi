"""KServe v2 JSON ``data`` fields <-> numpy arrays (csrc/tensor_codec/json_tensor.pyx)."""

from collections.abc import Sequence
from typing import Any, Final

import numpy.typing as npt

SHAPE_MISMATCH: Final[str]
"""Triton's text for an element count that does not match the shape:
``"Shape does not match true shape of 'data' field"``."""

def array_from_json_data(data: object, datatype: str, shape: Sequence[int]) -> npt.NDArray[Any]:
    """A new C-contiguous array of ``datatype`` (wire name) and ``shape`` from ``data``.

    ``data`` is what orjson decoded: a list, nested to any depth up to 100 levels (ragged
    nesting is fine: elements are counted in row-major order), or a bare scalar, which
    counts as one element. The count must equal ``product(shape)`` (1 for ``()``).

    Elements: BOOL takes JSON true/false only; UINTn non-negative integers in range; INTn
    integers in range; FP32/FP64 integers or floats (FP32 rounds, out-of-range values
    become +-inf as in Triton); BYTES strings, stored as UTF-8 ``bytes`` in an object array.
    A bool is not an integer here, nor an integer a bool.

    Raises:
        ValueError: ``SHAPE_MISMATCH`` for a count mismatch (checked before any element,
            and before allocating); an integer out of range; nesting deeper than 100;
            ``"receiving FP16 data via JSON is not supported"`` (and BF16); an unknown
            datatype; a negative or non-integer shape entry (TypeError for the latter).
        TypeError: an element of the wrong JSON kind; the message names the datatype, the
            expected kind, what was found and the element's row-major index.
    """

def array_to_json_data(
    array: npt.NDArray[Any], widen_float32: bool = False
) -> list[str] | npt.NDArray[Any]:
    """The value for an output's JSON ``data`` field: the elements in C order, flat.

    BYTES (object, ``S`` or ``U`` arrays): a list of ``str``, each element decoded as
    UTF-8 (``bytes``/``bytearray``), kept (``str``) or ``str(x)`` (anything else).
    BOOL and numeric arrays: a 1-D C-contiguous native-endian array (a view when
    possible), which ``orjson.dumps(..., option=orjson.OPT_SERIALIZE_NUMPY)`` writes as a
    JSON array; that beats ``ndarray.tolist()`` plus orjson (~1.2x at [16], ~2.8x at [1M]
    float32) and writes float32 at float32 precision: ~45% fewer bytes, same float32 values.
    ``widen_float32``: a float32 array as float64 instead (what Triton writes: each float32
    as the double it converts to, 0.1 as 0.10000000149011612).

    Raises ValueError for a BYTES element that is not valid UTF-8 (JSON cannot carry it:
    the front end tells the client to ask for binary output) and for FP16/BF16 arrays
    (``"sending FP16 data via JSON is not supported"``); TypeError for other dtypes.
    """
