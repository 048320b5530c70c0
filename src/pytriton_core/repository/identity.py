"""Which model a name means: Triton's model identifiers and ``--model-namespacing``.

Without namespacing a model is its name, and a name found in two repositories is served
by neither. With namespacing every repository is a namespace of its own: the same name may
be served from several repositories at once, and a request that names it without saying
which (all requests do, on the wire) is refused as ambiguous, with Triton's messages.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pytriton_core.errors import InvalidArgumentError, NotFoundError, ServerError


@dataclass(frozen=True, order=True)
class ModelId:
    """A model's identity: its namespace ("" without namespacing) and its name."""

    namespace: str
    name: str

    def __str__(self) -> str:
        # Triton's ModelIdentifier::str(), which is what its messages show.
        return f"{self.namespace}::{self.name}" if self.namespace else self.name


def resolve(name: str, known: Iterable[ModelId], namespacing: bool) -> ModelId:
    """The one model ``name`` means among ``known``, or the error Triton answers."""
    if not namespacing:
        return ModelId("", name)
    matches = [model_id for model_id in known if model_id.name == name]
    if not matches:
        raise InvalidArgumentError(f"Request for unknown model: '{name}' is not found")
    if len(matches) > 1:
        raise InvalidArgumentError(
            f"There are {len(matches)} identifiers of model '{name}' in global map, model "
            "namespace must be provided to resolve ambiguity."
        )
    return matches[0]


def unknown_model(model_id: ModelId) -> ServerError:
    return NotFoundError(f"Request for unknown model: '{model_id}' is not found")
