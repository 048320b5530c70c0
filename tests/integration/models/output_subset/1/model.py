"""OUTPUT0 = INPUT0, OUTPUT1 = 2 * INPUT0 (INT64), OUTPUT2 = INPUT0 / 2 (FP32).

The model always produces all three; the server returns only those the request names.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            outputs = [
                pb_utils.Tensor("OUTPUT0", data),
                pb_utils.Tensor("OUTPUT1", data.astype(np.int64) * 2),
                pb_utils.Tensor("OUTPUT2", data.astype(np.float32) / 2),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
