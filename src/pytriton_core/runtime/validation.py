"""Request validation against a model's config, with Triton's messages.

Runs on the event loop before a request is queued, so a bad request never reaches a
backend. The per-model facts it needs are computed once at load (the ``ModelSpec``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from pytriton_core.config.spec import CONTROL_CORRID, ModelSpec
from pytriton_core.errors import InvalidArgumentError, ServerError
from pytriton_core.inference.request import InferenceRequest


def _format_shape(shape: list[int] | tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _names(names: list[str]) -> str:
    return "[" + ",".join(f"'{n}'" for n in names) + "]"


_BATCH_NOTE = (
    " NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension "
    "to be prepended to each input shape. If you want to specify the full shape including the "
    "batch dim in your input dims config, try setting max_batch_size to zero. See the model "
    "configuration docs for more info on max_batch_size."
)


def validate_request(request: InferenceRequest, spec: ModelSpec) -> None:
    """Check inputs and requested outputs; set ``request.batch_size`` (``RequestRules``
    made for this one request: a model keeps its own, made once)."""
    RequestRules(spec).check(request)


class RequestRules:
    """What a model's requests must be, read from its spec once (an extension type,
    validation.pxd: ``Model`` checks every request with one).

    Messages and their ``[request id: ...]`` prefixes follow Triton's: the core's request
    checks carry the prefix, the unknown-name checks do not. Every request passes here (a
    BLS call's too), so the common case is one loop over the inputs; the order in which
    errors are found is Triton's (an unknown input before any input's datatype).
    """

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.model_name = spec.name
        # input name -> (datatype, dims without the batch dimension)
        self.inputs = {name: (t.datatype, t.dims) for name, t in spec.inputs.items()}
        self.required = spec.required_inputs
        self.max_batch_size = spec.max_batch_size
        self.outputs = spec.outputs
        self.sequences = spec.sequence_batching is not None

    def check(self, request: InferenceRequest) -> None:
        """Check ``request``; set its ``batch_size``."""
        spec = self.spec
        model_name = self.model_name
        inputs = request.inputs
        declared = self.inputs
        required = self.required
        given = len(inputs)
        if given < len(required) or given > len(declared):
            raise _missing_inputs(request, spec)

        max_batch_size = self.max_batch_size
        batch_size = 0
        for name, tensor in inputs.items():
            expected = declared.get(name)
            if expected is None:
                raise _unexpected_input(name, model_name)
            datatype, want_dims = expected
            if tensor.datatype is not datatype:
                _before_input_error(request, spec)
                raise _error(
                    request,
                    f"inference input '{name}' data-type is '{tensor.datatype.wire_name}', but "
                    f"model '{model_name}' expects '{datatype.wire_name}'",
                )
            shape = tensor.shape
            first = 0  # where the dims the config declares begin
            if max_batch_size > 0:
                if shape:
                    if batch_size == 0:
                        batch_size = shape[0]
                        if batch_size > max_batch_size:
                            _before_input_error(request, spec)
                            raise _error(
                                request,
                                f"inference request batch-size must be <= {max_batch_size} "
                                f"for '{model_name}'",
                            )
                    elif shape[0] != batch_size:
                        _before_input_error(request, spec)
                        raise _error(
                            request,
                            f"input '{name}' batch size does not match other inputs for "
                            f"'{model_name}'",
                        )
                    first = 1
            mismatch = len(shape) - first != len(want_dims)
            if not mismatch:
                for index in range(len(want_dims)):
                    want = want_dims[index]
                    if want != -1 and want != shape[first + index]:
                        mismatch = True
                        break
            if mismatch:
                _before_input_error(request, spec)
                note = _BATCH_NOTE if max_batch_size > 0 else " "
                full = spec.full_shape(spec.inputs[name])
                raise _error(
                    request,
                    f"unexpected shape for input '{name}' for model '{model_name}'. "
                    f"Expected {_format_shape(full)}, got {_format_shape(shape)}.{note}",
                )
        # Every declared input given (the common case) leaves none missing.
        if given < len(declared) and _lacks_required(inputs, required):
            raise _missing_inputs(request, spec)
        request.batch_size = max(batch_size, 1) if max_batch_size > 0 else 1

        requested = request.requested_outputs
        if requested is not None:
            for name in requested:
                if name not in self.outputs:
                    raise InvalidArgumentError(
                        f"unexpected inference output '{name}' for model '{model_name}'"
                    )

        if self.sequences and request.correlation_id not in (0, ""):
            _check_correlation_id(request, spec)


def _lacks_required(inputs: Collection[str], required: Iterable[str]) -> bool:
    return any(n not in inputs for n in required)


def _error(request: InferenceRequest, message: str) -> ServerError:
    return InvalidArgumentError(message).with_request_id(request.id)


def _unexpected_input(name: str, model_name: str) -> ServerError:
    return InvalidArgumentError(f"unexpected inference input '{name}' for model '{model_name}'")


def _before_input_error(request: InferenceRequest, spec: ModelSpec) -> None:
    """Before one input's error, what Triton reports first: an unknown input name, then
    a missing required input."""
    for name in request.inputs:
        if name not in spec.inputs:
            raise _unexpected_input(name, spec.name)
    if _lacks_required(request.inputs, spec.required_inputs):
        raise _missing_inputs(request, spec)


def _missing_inputs(request: InferenceRequest, spec: ModelSpec) -> ServerError:
    required = spec.required_inputs
    missing = [n for n in required if n not in request.inputs]
    return _error(
        request,
        f"expected {len(required)} inputs but got {len(request.inputs)} inputs for model "
        f"'{spec.name}'. Got input(s) {_names(list(request.inputs))}, but missing "
        f"required input(s) {_names(missing)}. Please provide all required input(s).",
    )


def _check_correlation_id(request: InferenceRequest, spec: ModelSpec) -> None:
    """The ID's kind must suit the CORRID control (Triton's ValidateCorrelationId: string
    IDs need TYPE_STRING, integer IDs one of the integer types)."""
    assert spec.sequence_batching is not None
    found = spec.sequence_batching.control(CONTROL_CORRID)
    if found is None:
        return
    name, control = found
    expected = control.datatype
    if expected is None:
        return
    is_string = isinstance(request.correlation_id, str)
    if is_string == expected.is_bytes:
        return
    given = "BYTES" if is_string else "UINT64"
    raise _error(
        request,
        f"sequence batching control '{name}' data-type is '{given}', but model "
        f"'{spec.name}' expects '{expected.wire_name}'",
    )
