"""OUTPUT0 = INPUT0 * INPUT1 (row-wise broadcast), FP32 [2, 3]."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            matrix = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            row = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            product = (matrix * row).astype(np.float32)
            output = pb_utils.Tensor("OUTPUT0", product)
            responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
        return responses
