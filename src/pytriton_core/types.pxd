# The typed parts of types.py (compiled from it, csrc/compiled_modules.txt): the datatype
# table's rows, whose fields the compiled request path reads as C fields.

cdef class DataType:
    cdef readonly str wire_name
    cdef readonly str config_name
    cdef readonly int config_value
    cdef readonly object numpy_dtype
    cdef readonly Py_ssize_t itemsize
    cdef readonly bint is_bytes


cpdef DataType from_wire_name(object name)
cpdef DataType from_numpy(object dtype)
cpdef object element_count(object shape)
