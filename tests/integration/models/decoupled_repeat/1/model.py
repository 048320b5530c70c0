"""Decoupled: for each element v of IN, a response OUT = [v], INDEX = [its position].

Request parameters:
* ``fail_at`` (int): the response at that position is an error response instead;
* ``delay_ms`` (int): sleep that long before each response;
* ``final_with_last`` (bool): the last response carries the FINAL flag; otherwise FINAL is
  sent on its own, without a response (what ``enable_empty_final_response`` makes visible).
"""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            parameters = json.loads(request.parameters() or "{}")
            fail_at = parameters.get("fail_at", -1)
            delay_s = parameters.get("delay_ms", 0) / 1000
            final_with_last = parameters.get("final_with_last", False)
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            sender = request.get_response_sender()
            for index, value in enumerate(values):
                if delay_s:
                    time.sleep(delay_s)
                if index == fail_at:
                    response = pb_utils.InferenceResponse(
                        error=pb_utils.TritonError(f"failed at index {index}")
                    )
                else:
                    response = pb_utils.InferenceResponse(
                        output_tensors=[
                            pb_utils.Tensor("OUT", np.array([value], dtype=np.int32)),
                            pb_utils.Tensor("INDEX", np.array([index], dtype=np.uint32)),
                        ]
                    )
                last = index == len(values) - 1
                sender.send(response, flags=FINAL if last and final_with_last else 0)
            if not (final_with_last and len(values)):
                sender.send(flags=FINAL)
        return None
