"""A model without config.pbtxt: auto_complete_config() declares its batching and tensors.

OUTPUT0 (FP32 [2]) = 2 * INPUT0 (FP32 [2]), max_batch_size 4.
"""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.set_max_batch_size(4)
        auto_complete_model_config.add_input(
            {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [2]}
        )
        auto_complete_model_config.add_output(
            {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [2]}
        )
        return auto_complete_model_config

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            output = pb_utils.Tensor("OUTPUT0", data * 2)
            responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
        return responses
