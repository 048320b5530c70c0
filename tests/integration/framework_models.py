"""Small framework models built on the spot (no downloads), shared by the tests and bench/.

The same two-layer MLP (``Y = relu(X @ W1 + b1) @ W2 + b2``, FP32, dynamic batch) as:
an ONNX graph made with ``onnx.helper``, a TorchScript module made with ``torch.jit.script``,
and an OpenVINO IR converted from the ONNX file. Each ``write_*`` needs its framework
installed; import this module freely, the frameworks are imported inside the functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

IN_FEATURES = 16
HIDDEN = 32
OUT_FEATURES = 8


@dataclass(frozen=True)
class MlpSize:
    in_features: int = IN_FEATURES
    hidden: int = HIDDEN
    out_features: int = OUT_FEATURES


def mlp_weights(size: MlpSize = MlpSize(), seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    scale1, scale2 = 2.0 / size.in_features**0.5, 2.0 / size.hidden**0.5
    return {
        "W1": rng.standard_normal((size.in_features, size.hidden), dtype=np.float32) * scale1,
        "b1": rng.standard_normal(size.hidden, dtype=np.float32) * 0.1,
        "W2": rng.standard_normal((size.hidden, size.out_features), dtype=np.float32) * scale2,
        "b2": rng.standard_normal(size.out_features, dtype=np.float32) * 0.1,
    }


def write_onnx_mlp(
    path: Path, size: MlpSize = MlpSize(), *, input_name: str = "X", output_name: str = "Y"
) -> Path:
    """The MLP as ONNX with a symbolic batch dimension ("batch") on input and output."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = mlp_weights(size)
    nodes = [
        helper.make_node("MatMul", [input_name, "W1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "W2"], ["h3"]),
        helper.make_node("Add", ["h3", "b2"], [output_name]),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, ["batch", size.in_features])],
        [
            helper.make_tensor_value_info(
                output_name, TensorProto.FLOAT, ["batch", size.out_features]
            )
        ],
        initializer=[numpy_helper.from_array(v, name=k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # readable by every onnxruntime the extras admit
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def torch_mlp(size: MlpSize = MlpSize()) -> Any:
    """The MLP as a scripted ``torch.nn.Module`` (same weights as the ONNX graph)."""
    import torch

    weights = {k: torch.from_numpy(v.copy()) for k, v in mlp_weights(size).items()}

    class Mlp(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w1 = torch.nn.Parameter(weights["W1"], requires_grad=False)
            self.b1 = torch.nn.Parameter(weights["b1"], requires_grad=False)
            self.w2 = torch.nn.Parameter(weights["W2"], requires_grad=False)
            self.b2 = torch.nn.Parameter(weights["b2"], requires_grad=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x @ self.w1 + self.b1) @ self.w2 + self.b2

    return torch.jit.script(Mlp().eval())


def write_torch_mlp(path: Path, size: MlpSize = MlpSize()) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch_mlp(size).save(str(path))
    return path


def write_torch_two_io(path: Path) -> Path:
    """``forward(self, lhs, rhs) -> (lhs + rhs, lhs - rhs)``: for the naming conventions."""
    import torch

    class AddSub(torch.nn.Module):
        def forward(
            self, lhs: torch.Tensor, rhs: torch.Tensor
        ) -> tuple[torch.Tensor, torch.Tensor]:
            return lhs + rhs, lhs - rhs

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.script(AddSub()).save(str(path))
    return path


def write_openvino_mlp(onnx_path: Path, xml_path: Path) -> Path:
    """The ONNX MLP converted to OpenVINO IR (``model.xml`` + ``model.bin``), kept in FP32."""
    import openvino as ov

    model = ov.convert_model(str(onnx_path))
    xml_path.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(model, str(xml_path), compress_to_fp16=False)
    return xml_path
