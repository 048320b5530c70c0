"""Identity for BF16: OUTPUT0 = INPUT0.

numpy has no bfloat16, so `as_numpy()` refuses BF16 tensors; the Python backend's documented
route is DLPack, which hands the input's memory to the output without a numpy array.
"""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            output = pb_utils.Tensor.from_dlpack("OUTPUT0", tensor.to_dlpack())
            responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
        return responses
