"""Python models the process-mode tests share."""

# Doubles IN and appends "!" to each TEXT element: FP32 and BYTES through the worker's arenas.
IDENTITY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            s = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", x * 2),
                pb_utils.Tensor("TEXT_OUT", np.array([b + b"!" for b in s.reshape(-1)],
                                                     dtype=np.object_).reshape(s.shape)),
            ]))
        return out
"""
