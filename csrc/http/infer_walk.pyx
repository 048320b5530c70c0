# cython: language_level=3, autotestdict=False
"""The common binary infer request, read from its parsed JSON header in one pass.

What tritonclient sends with ``binary_data=True``: an ``id`` string, at most the
``binary_data_output`` request parameter, inputs that each take ``binary_data_size`` bytes of
the binary section (all of it, exactly), outputs named with at most a ``binary_data`` flag. Anything else (or anything the general decode would refuse) is
answered None, so that the general decode (``frontends/http/infer_codec.py``) reads it and
words its errors alone. ``HeaderMemo`` keeps the walk's reading of a header, so that the
same header sent again skips the JSON parse and the walk.
"""

cimport cython
from cpython.dict cimport PyDict_CheckExact, PyDict_GetItem, PyDict_Size
from cpython.list cimport PyList_CheckExact
from cpython.long cimport PyLong_CheckExact
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.object cimport PyObject
from libc.string cimport memcmp
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


@cython.final
cdef class _Plan:
    """What a remembered header says: everything of the walk's answer but the arrays."""

    cdef str request_id
    cdef object binary_by_default
    cdef tuple inputs  # (name, datatype, shape, numpy dtype, byte size), in body order
    cdef Py_ssize_t binary_size  # the binary section's size: the inputs' sizes summed
    cdef tuple outputs  # the requested outputs' names; None when the request names none
    cdef dict binary_outputs

    cdef tuple apply(self, body, Py_ssize_t offset, tensor_type, output_type):
        """The walk's answer for ``body``, or None when its binary section is not the size
        the header gives (the general decode then words the error)."""
        cdef dict inputs = {}
        cdef dict requested = None
        cdef Py_ssize_t size
        if len(body) - offset != self.binary_size:
            return None
        view = memoryview(body) if self.inputs else None
        for name, datatype, shape, numpy_dtype, size in self.inputs:
            inputs[name] = tensor_type(name, datatype, _ndarray(shape, numpy_dtype, view, offset))
            offset += size
        if self.outputs is not None:
            requested = {}
            for name in self.outputs:
                requested[name] = output_type(name, 0, False)
        return (self.request_id, self.binary_by_default, inputs, requested,
                dict(self.binary_outputs))


cdef bint _same_bytes(data, bytes key) except -1:
    """Whether the bytes-like ``data`` holds exactly ``key``'s bytes (False for no key)."""
    cdef Py_buffer view
    cdef bint same
    if key is None:
        return False
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    same = (view.len == PyBytes_GET_SIZE(key)
            and memcmp(view.buf, PyBytes_AS_STRING(key), view.len) == 0)
    PyBuffer_Release(&view)
    return same


@cython.final
cdef class HeaderMemo:
    """The walk's reading of common binary requests, by the exact bytes of their JSON header.

    Clients that send one request over and over (perf_analyzer, a service calling a model)
    send the same header each time: a header seen before skips the JSON parse and the walk,
    and only its arrays are made again, views of the new body. A whole JSON body whose
    tensors are all in shared memory is kept likewise (``remember_document``), with the
    front end's reading of it. Only what the walk read in
    full is kept (no BYTES inputs: their elements come from the body), for headers of at
    most ``max_header_bytes``; at ``capacity`` headers the memo starts over, so a client
    sending ever new headers costs one dict of bounded size. One memo serves one server:
    its JSON limits decided each header's first reading.
    """

    cdef dict _plans
    cdef dict _documents
    cdef Py_ssize_t _capacity
    cdef Py_ssize_t _max_header_bytes
    # The last key each dict answered, with its value: a client repeating one request
    # finds it by comparing bytes, without copying the key out of the body and hashing it.
    cdef bytes _last_header
    cdef _Plan _last_plan
    cdef bytes _last_document
    cdef object _last_document_plan

    def __cinit__(self, Py_ssize_t capacity=256, Py_ssize_t max_header_bytes=2048):
        self._plans = {}
        self._documents = {}
        self._capacity = capacity
        self._max_header_bytes = max_header_bytes

    def __len__(self):
        return len(self._plans) + len(self._documents)

    def recall_document(self, body):
        """What ``remember_document`` kept for a whole JSON body (a bytes-like object), or
        None."""
        cdef PyObject* found
        if not self._documents or len(body) > self._max_header_bytes:
            return None
        if _same_bytes(body, self._last_document):
            return self._last_document_plan
        key = bytes(body)
        found = PyDict_GetItem(self._documents, key)
        if found is NULL:
            return None
        self._last_document = key
        self._last_document_plan = <object>found
        return self._last_document_plan

    def remember_document(self, body, plan not None):
        """Keep the general decode's reading ``plan`` of a whole JSON body (no binary
        section): the front end's to make and to apply (``frontends/http/infer_codec.py``
        keeps one for requests whose tensors are all in shared memory)."""
        if len(body) > self._max_header_bytes:
            return
        if len(self._documents) >= self._capacity:
            self._documents.clear()
        self._documents[bytes(body)] = plan

    def recall(self, header, body, Py_ssize_t offset, tensor_type, output_type):
        """The walk's answer for a remembered ``header`` (a bytes-like object) over
        ``body``'s binary section from ``offset``; None when not remembered, or when the
        section is not the size the header gives."""
        cdef PyObject* found
        if not self._plans or len(header) > self._max_header_bytes:
            return None
        if not _same_bytes(header, self._last_header):
            key = bytes(header)
            found = PyDict_GetItem(self._plans, key)
            if found is NULL:
                return None
            self._last_header = key
            self._last_plan = <_Plan>found
        return self._last_plan.apply(body, offset, tensor_type, output_type)

    def remember(self, header, tuple walked not None):
        """Keep the walk's answer ``walked`` for ``header`` (its inputs, in body order, give
        each one's layout); a header with a BYTES input, or too long, is not kept."""
        cdef _Plan plan
        cdef Py_ssize_t binary_size = 0
        if len(header) > self._max_header_bytes:
            return
        request_id, binary_by_default, inputs, requested, binary_outputs = walked
        entries = []
        for tensor in (<dict>inputs).values():
            datatype = tensor.datatype
            if datatype.is_bytes:  # its elements come from the body
                return
            array = tensor.data
            entries.append((tensor.name, datatype, array.shape, datatype.numpy_dtype,
                            array.nbytes))
            binary_size += array.nbytes
        plan = _Plan.__new__(_Plan)
        plan.request_id = request_id
        plan.binary_by_default = binary_by_default
        plan.inputs = tuple(entries)
        plan.binary_size = binary_size
        plan.outputs = None if requested is None else tuple(requested)
        plan.binary_outputs = dict(binary_outputs)
        if len(self._plans) >= self._capacity:
            self._plans.clear()
        self._plans[bytes(header)] = plan
