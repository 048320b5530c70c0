"""The pipeline as BLS: preprocess, classifier and postprocess, called in turn.

Each call goes through the called model's own scheduler (the classifier batches calls from
concurrent requests), and tensors pass from one call to the next without copies.
"""

import triton_python_backend_utils as pb_utils


def call(model, outputs, inputs):
    """Run ``model`` and return its response; its error becomes this model's error."""
    response = pb_utils.InferenceRequest(
        model_name=model, requested_output_names=outputs, inputs=inputs
    ).exec()
    if response.has_error():
        raise pb_utils.TritonModelException(response.error().message())
    return response


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            image = pb_utils.get_input_tensor_by_name(request, "IMAGE")
            pixels = pb_utils.get_output_tensor_by_name(
                call("preprocess", ["PIXELS"], [image]), "PIXELS"
            )
            # The classifier batches: give it this image as a batch of one.
            batch = pb_utils.Tensor("INPUT", pixels.as_numpy()[None])
            scores = pb_utils.get_output_tensor_by_name(
                call("classifier", ["PROBABILITIES"], [batch]), "PROBABILITIES"
            )
            probabilities = pb_utils.Tensor("PROBABILITIES", scores.as_numpy()[0])
            top = call("postprocess", ["LABELS", "SCORES"], [probabilities])
            responses.append(pb_utils.InferenceResponse(top.output_tensors()))
        return responses
