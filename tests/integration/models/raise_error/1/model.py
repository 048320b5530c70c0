"""Raises from execute(): a negative INPUT0 element -> ValueError, a NaN -> TritonModelException.

An exception fails every request of the batch; the model must keep serving afterwards.
Otherwise OUTPUT0 = INPUT0.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if np.any(np.isnan(data)):
                raise pb_utils.TritonModelException("INPUT0 contains NaN")
            if np.any(data < 0):
                raise ValueError("INPUT0 must not be negative")
            output = pb_utils.Tensor("OUTPUT0", data)
            responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
        return responses
