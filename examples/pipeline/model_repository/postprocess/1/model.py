"""Top-k of the classifier's probabilities, with the labels of labels.txt."""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.top_k = int(config["parameters"]["top_k"]["string_value"])
        with open(os.path.join(pb_utils.get_model_dir(), "labels.txt")) as labels:
            self.labels = np.array([line.strip().encode() for line in labels], dtype=np.object_)

    def execute(self, requests):
        responses = []
        for request in requests:
            probabilities = pb_utils.get_input_tensor_by_name(request, "PROBABILITIES").as_numpy()
            best = np.argsort(probabilities)[::-1][: self.top_k]
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("LABELS", self.labels[best]),
                        pb_utils.Tensor("SCORES", probabilities[best].astype(np.float32)),
                    ]
                )
            )
        return responses
