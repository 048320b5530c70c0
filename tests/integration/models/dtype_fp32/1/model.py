"""Identity: OUTPUT0 = INPUT0, converted to the output datatype the config declares."""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        output_config = pb_utils.get_output_config_by_name(config, "OUTPUT0")
        self.output_dtype = pb_utils.triton_string_to_numpy(output_config["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            output = pb_utils.Tensor("OUTPUT0", data.astype(self.output_dtype))
            responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
        return responses
