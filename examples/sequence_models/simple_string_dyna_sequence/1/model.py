"""An accumulator per sequence, keyed by the string CORRID control.

START sets the accumulator to INPUT, every later request adds INPUT, and the END request
also adds the correlation ID read as an integer; each response returns the accumulator.
A slot's filler (READY 0) changes nothing.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.accumulators = {}

    def execute(self, requests):
        responses = []
        for request in requests:

            def control(name):
                return pb_utils.get_input_tensor_by_name(request, name).as_numpy()

            correlation_id = control("CORRID").reshape(-1)[0].decode()
            value = int(control("INPUT").reshape(-1)[0])
            if control("READY").reshape(-1)[0]:
                if control("START").reshape(-1)[0]:
                    self.accumulators[correlation_id] = value
                else:
                    self.accumulators[correlation_id] += value
                if control("END").reshape(-1)[0]:
                    self.accumulators[correlation_id] += int(correlation_id)
            total = self.accumulators.get(correlation_id, 0)
            if control("END").reshape(-1)[0]:
                self.accumulators.pop(correlation_id, None)
            output = np.full((1, 1), total, np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", output)]))
        return responses
