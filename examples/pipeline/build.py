"""Builds the pipeline example's classifier: a small ONNX model, made here, no downloads.

It names the dominant colour of an image: the mean of each RGB channel, then the nearest of
ten reference colours (a linear layer: for reference c, 2 c.x - |c|^2 is largest for the
nearest c), then softmax. The labels come from postprocess/labels.txt, in the same order.

    python examples/pipeline/build.py                       # into this example's repository
    python examples/pipeline/build.py --repository DIR      # into a copy of it
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE / "model_repository"

# The reference colours (RGB in [0, 1]), in the order of postprocess/labels.txt.
COLOURS = {
    "red": (0.9, 0.1, 0.1),
    "green": (0.1, 0.7, 0.2),
    "blue": (0.1, 0.2, 0.9),
    "yellow": (0.95, 0.9, 0.1),
    "cyan": (0.1, 0.85, 0.9),
    "magenta": (0.85, 0.1, 0.85),
    "orange": (1.0, 0.55, 0.05),
    "white": (0.97, 0.97, 0.97),
    "gray": (0.5, 0.5, 0.5),
    "black": (0.03, 0.03, 0.03),
}
SIZE = 64  # the classifier takes [batch, 3, 64, 64] FP32 pixels in [0, 1]


def classifier() -> onnx.ModelProto:
    references = np.array(list(COLOURS.values()), np.float32)  # [classes, 3]
    weights = (2 * references).T.astype(np.float32)  # [3, classes]
    bias = -(references**2).sum(axis=1).astype(np.float32)  # [classes]
    # A sharp softmax: the scores read as confidences.
    scale = np.array(20.0, np.float32)
    nodes = [
        helper.make_node("ReduceMean", ["INPUT"], ["mean"], axes=[2, 3], keepdims=0),
        helper.make_node("MatMul", ["mean", "weights"], ["scores"]),
        helper.make_node("Add", ["scores", "bias"], ["logits"]),
        helper.make_node("Mul", ["logits", "scale"], ["scaled"]),
        helper.make_node("Softmax", ["scaled"], ["PROBABILITIES"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "colour_classifier",
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["batch", 3, SIZE, SIZE])],
        [
            helper.make_tensor_value_info(
                "PROBABILITIES", TensorProto.FLOAT, ["batch", len(COLOURS)]
            )
        ],
        initializer=[
            numpy_helper.from_array(weights, "weights"),
            numpy_helper.from_array(bias, "bias"),
            numpy_helper.from_array(scale, "scale"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8  # readable by every onnxruntime the server supports
    onnx.checker.check_model(model)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, default=REPOSITORY)
    args = parser.parse_args()
    target = args.repository / "classifier" / "1" / "model.onnx"
    target.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(classifier(), target)
    labels = (args.repository / "postprocess" / "labels.txt").read_text().split()
    if labels != list(COLOURS):
        raise SystemExit(f"postprocess/labels.txt does not list {list(COLOURS)} in order")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
