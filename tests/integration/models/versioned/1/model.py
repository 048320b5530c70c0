"""OUTPUT0 = [the version number of this model file's version directory]."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.version = int(args["model_version"])

    def execute(self, requests):
        output = np.array([self.version], dtype=np.int32)
        return [
            pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", output)])
            for _ in requests
        ]
