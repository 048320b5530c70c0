# The typed parts of pb_utils_server.py (compiled from it, csrc/compiled_modules.txt): the
# block every execute runs in.

cdef class ExecuteScope:
    cdef object _context
