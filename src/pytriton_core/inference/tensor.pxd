# The typed parts of tensor.py (compiled from it, csrc/compiled_modules.txt). ``data`` is a
# field here, but ``DeviceTensor`` (a Python subclass) overrides it with a property: typed
# code reads ``name`` and ``datatype`` as fields and ``data`` through the attribute protocol.

cdef class Tensor:
    cdef public object name
    cdef public object datatype
    cdef public object data
