"""identity_fp32: OUTPUT0 = INPUT0 (FP32, batched, variable length)."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        # The per-request work is one lookup and one Tensor: this model measures the server,
        # not the model, so it avoids any copy or conversion of its own.
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            output = pb_utils.Tensor("OUTPUT0", data)
            responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
        return responses
