# The typed parts of pb_utils_tensor.py (compiled from it, csrc/compiled_modules.txt).

cimport cython

from pytriton_core cimport types
from pytriton_core.types cimport DataType


cdef class Tensor:
    cdef public object _array
    cdef public DataType _datatype
    cdef public tuple _device
    cdef public object _external
    cdef public object _name
    cdef public tuple _shape
    cdef public bint _server_input

    cpdef name(self)
    cpdef as_numpy(self)
    cpdef _cpu_array(self)
    cpdef void _set_cpu(
        self, object name, object datatype, object array, bint server_input=*
    ) except *


@cython.locals(tensor=Tensor)
cpdef Tensor tensor_from_server(object name, object array, DataType datatype)
