"""Inference responses: what a model sends back for one request."""

from __future__ import annotations

from dataclasses import dataclass, field

from pytriton_core.errors import ServerError
from pytriton_core.inference.tensor import Tensor

ParameterValue = bool | int | float | str


@dataclass(slots=True)
class InferenceResponse:
    """One response; ``error`` set means the request (or this response of it) failed."""

    outputs: list[Tensor] = field(default_factory=list)
    parameters: dict[str, ParameterValue] = field(default_factory=dict)
    error: ServerError | None = None
    # Bytes this response holds of its request's ResponseWindow (flow control), released by
    # the front end once the response has left.
    window_bytes: int = 0

    @classmethod
    def failed(cls, error: ServerError) -> InferenceResponse:
        return cls(error=error)

    def output(self, name: str) -> Tensor | None:
        for tensor in self.outputs:
            if tensor.name == name:
                return tensor
        return None
