"""Per-request errors returned (not raised) through pb_utils.TritonError.

* request parameter ``error_code`` = a TritonError code name (``"NOT_FOUND"``, ...): that code;
  ``"DEFAULT"``: a TritonError built without a code;
* otherwise any negative element of INPUT0: INVALID_ARG;
* otherwise OUTPUT0 = INPUT0.
Only the failing request of a batch fails; the others get their outputs.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            code_name = json.loads(request.parameters() or "{}").get("error_code")
            if code_name == "DEFAULT":
                error = pb_utils.TritonError("error requested without a code")
            elif code_name is not None:
                code = getattr(pb_utils.TritonError, code_name)
                error = pb_utils.TritonError(f"error requested with code {code_name}", code)
            elif np.any(data < 0):
                error = pb_utils.TritonError(
                    "INPUT0 must not be negative", pb_utils.TritonError.INVALID_ARG
                )
            else:
                error = None
            if error is not None:
                responses.append(pb_utils.InferenceResponse(error=error))
            else:
                output = pb_utils.Tensor("OUTPUT0", data)
                responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
        return responses
