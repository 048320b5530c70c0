# cython: language_level=3, autotestdict=False
"""The common binary infer request, read from its parsed JSON header in one pass.

What tritonclient sends with ``binary_data=True``: an ``id`` string, at most the
``binary_data_output`` request parameter, inputs that each take ``binary_data_size`` bytes of
the binary section (all of it, exactly), outputs named with at most a ``binary_data`` flag. Anything else (or anything the general decode would refuse) is
answered None, so that the general decode (``frontends/http/infer_codec.py``) reads it and
words its errors alone.
"""

from cpython.dict cimport PyDict_CheckExact, PyDict_GetItem, PyDict_Size
from cpython.list cimport PyList_CheckExact
from cpython.long cimport PyLong_CheckExact
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_CheckExact

import numpy as np

from pytriton_core._native.bytes_codec import deserialize_bytes_tensor

# An array over a buffer in one call (no frombuffer, then reshape): given a memoryview, the
# array's base is the view, which holds the body's buffer (a bytearray cannot be resized
# under it), as frombuffer's does.
cdef object _ndarray = np.ndarray


cdef inline object _member(dict mapping, str key):
    """``mapping[key]``, or None when absent (JSON null reads as None too)."""
    cdef PyObject* found = PyDict_GetItem(mapping, key)
    return None if found is NULL else <object>found


cdef bint _only(dict mapping, tuple allowed):
    """Whether every key of ``mapping`` is one of ``allowed``."""
    for key in mapping:
        if key not in allowed:
            return False
    return True


cdef tuple _DOCUMENT_KEYS = ("inputs", "parameters", "outputs", "id")
cdef tuple _INPUT_KEYS = ("name", "datatype", "shape", "parameters")
cdef tuple _OUTPUT_KEYS = ("name", "parameters")
cdef tuple _OUTPUT_PARAMETER_KEYS = ("binary_data",)


def walk_binary_infer(dict document not None, body, Py_ssize_t offset, dict datatypes not None,
                      tensor_type, output_type, Py_ssize_t max_bytes_elements):
    """The common request's parts, or None for the general decode.

    ``body``: the whole body, its binary section from ``offset``; ``datatypes``: wire name
    -> DataType; ``tensor_type(name, datatype, array)`` and ``output_type(name, 0, False)``
    make the inputs and requested outputs; a BYTES input of more than
    ``max_bytes_elements`` elements is the general decode's to refuse. Returns (id, binary_data_output, inputs: name ->
    tensor, requested outputs: name -> output or None when the request names none, outputs'
    binary_data: name -> bool); the arrays are views of ``body``.
    """
    if not _only(document, _DOCUMENT_KEYS):
        return None
    request_id = _member(document, "id")
    if request_id is None:
        if "id" in document:
            return None
        request_id = ""
    elif not PyUnicode_CheckExact(request_id):
        return None
    binary_by_default = False
    parameters = _member(document, "parameters")
    if parameters is not None:
        if not PyDict_CheckExact(parameters) or PyDict_Size(parameters) > 1:
            return None
        if PyDict_Size(parameters):
            binary_by_default = _member(parameters, "binary_data_output")
            if binary_by_default is not True and binary_by_default is not False:
                return None
    entries = _member(document, "inputs")
    if entries is None or not PyList_CheckExact(entries):
        return None
    cdef Py_ssize_t end = len(body)
    cdef Py_ssize_t size, count, dim, itemsize
    cdef dict inputs = {}
    view = None
    for entry in <list>entries:
        if not PyDict_CheckExact(entry) or not _only(<dict>entry, _INPUT_KEYS):
            return None
        name = _member(<dict>entry, "name")
        shape = _member(<dict>entry, "shape")
        wire_name = _member(<dict>entry, "datatype")
        tensor_parameters = _member(<dict>entry, "parameters")
        if (
            name is None or not PyUnicode_CheckExact(name) or name in inputs
            or shape is None or not PyList_CheckExact(shape)
            or wire_name is None or not PyUnicode_CheckExact(wire_name)
            or tensor_parameters is None or not PyDict_CheckExact(tensor_parameters)
            or PyDict_Size(tensor_parameters) != 1
        ):
            return None
        size_value = _member(<dict>tensor_parameters, "binary_data_size")
        datatype = _member(datatypes, wire_name)
        if size_value is None or not PyLong_CheckExact(size_value) or datatype is None:
            return None
        count = 1
        try:
            for dim_value in <list>shape:
                if not PyLong_CheckExact(dim_value):
                    return None
                dim = dim_value
                if dim < 0 or (dim and count > end // dim):
                    return None  # negative, or more elements than the body has bytes
                count *= dim
            size = size_value
        except OverflowError:  # past Py_ssize_t: not a common request
            return None
        if size < 0 or size > end - offset:
            return None
        if view is None:
            view = memoryview(body)
        if datatype.is_bytes:
            if count > max_bytes_elements:
                return None
            try:
                array = deserialize_bytes_tensor(view[offset:offset + size], count).reshape(shape)
            except ValueError:  # not ``count`` well-formed elements: the general decode says
                return None
        else:
            itemsize = datatype.itemsize
            if size != count * itemsize:
                return None
            array = _ndarray(shape, datatype.numpy_dtype, view, offset)
        inputs[name] = tensor_type(name, datatype, array)
        offset += size
    if offset != end:
        return None
    requested = None
    cdef dict binary_outputs = {}
    outputs = _member(document, "outputs")
    if outputs is not None:
        if not PyList_CheckExact(outputs):
            return None
        requested = {}
        for entry in <list>outputs:
            if not PyDict_CheckExact(entry) or not _only(<dict>entry, _OUTPUT_KEYS):
                return None
            name = _member(<dict>entry, "name")
            if name is None or not PyUnicode_CheckExact(name):
                return None
            binary = False
            output_parameters = _member(<dict>entry, "parameters")
            if output_parameters is not None:  # null reads as no parameters
                if (
                    not PyDict_CheckExact(output_parameters)
                    or not _only(<dict>output_parameters, _OUTPUT_PARAMETER_KEYS)
                ):
                    return None
                if PyDict_Size(output_parameters):
                    binary = _member(<dict>output_parameters, "binary_data")
                    if binary is not True and binary is not False:
                        return None
            requested[name] = output_type(name, 0, False)
            binary_outputs[name] = binary
    return request_id, binary_by_default, inputs, requested, binary_outputs
