"""OUTPUT = (INPUT + START + END * CORRID) * READY: the last request adds the sequence's ID."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:

            def control(name):
                return pb_utils.get_input_tensor_by_name(request, name).as_numpy()

            value = control("INPUT").astype(np.int64)
            total = value + control("START") + control("END") * control("CORRID").astype(np.int64)
            output = (total * control("READY")).astype(np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", output)]))
        return responses
