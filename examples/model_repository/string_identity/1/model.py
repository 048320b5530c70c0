"""string_identity: OUTPUT0 = INPUT0 (BYTES [-1]), OUTPUT1 = byte length of each element (INT32)."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.length_dtype = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(config, "OUTPUT1")["data_type"]
        )

    def execute(self, requests):
        responses = []
        for request in requests:
            # BYTES tensors arrive as numpy object arrays whose elements are `bytes`.
            strings = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            lengths = np.array([len(s) for s in strings.flat], dtype=self.length_dtype)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUTPUT0", strings),
                        pb_utils.Tensor("OUTPUT1", lengths.reshape(strings.shape)),
                    ]
                )
            )
        return responses
