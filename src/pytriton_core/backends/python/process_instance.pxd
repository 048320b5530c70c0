# The typed parts of process_instance.py (compiled from it, csrc/compiled_modules.txt):
# the server's side of every process-mode bundle, its inputs placed and its answer read.

from pytriton_core cimport clock

cimport cython

from pytriton_core.backends.python.process_transport cimport Arena
from pytriton_core.inference.request cimport InferenceRequest
from pytriton_core.inference.statistics cimport ComputeTiming
from pytriton_core.inference.tensor cimport Tensor


@cython.locals(
    request=InferenceRequest,
    tensor=Tensor,
    arena=Arena,
    end=Py_ssize_t,
    nbytes=Py_ssize_t,
    offset=Py_ssize_t,
    position=Py_ssize_t,
    placed=list,
    refs=list,
    batch=list,
    items=list,
)
cpdef tuple _place(object worker, object batches, Py_ssize_t slot, long long key)

@cython.locals(
    timing=ComputeTiming,
    request=InferenceRequest,
    arena=Arena,
    position=Py_ssize_t,
    outcomes=list,
)
cpdef list _answered(object worker, object executions, dict done, list fds)
