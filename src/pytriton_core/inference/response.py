"""Inference responses: what a model sends back for one request."""

from __future__ import annotations

from pytriton_core.errors import ServerError
from pytriton_core.inference.tensor import Tensor

ParameterValue = bool | int | float | str


class InferenceResponse:
    """One response; ``error`` set means the request (or this response of it) failed.

    An extension type (response.pxd): every request's answer is one, read by the compiled
    runtime and front end as C fields."""

    def __init__(
        self,
        outputs: list[Tensor] | None = None,
        parameters: dict[str, ParameterValue] | None = None,
        error: ServerError | None = None,
        window_bytes: int = 0,
    ) -> None:
        self.outputs: list[Tensor] = [] if outputs is None else outputs
        self.parameters: dict[str, ParameterValue] = {} if parameters is None else parameters
        self.error = error
        # Bytes this response holds of its request's ResponseWindow (flow control),
        # released by the front end once the response has left.
        self.window_bytes = window_bytes

    def __repr__(self) -> str:
        return (
            f"InferenceResponse(outputs={self.outputs!r}, parameters={self.parameters!r}, "
            f"error={self.error!r})"
        )

    @classmethod
    def failed(cls, error: ServerError) -> InferenceResponse:
        return cls(error=error)

    def output(self, name: str) -> Tensor | None:
        for tensor in self.outputs:
            if tensor.name == name:
                return tensor
        return None
