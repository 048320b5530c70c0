"""The batch path shared by the framework backends: requests in, one framework call, responses out.

A framework backend's ``execute`` gets a list of requests (the dynamic batcher merged them).
``BatchRunner.execute`` turns that list into one call of the framework and back:

1. gather: each input's per-request arrays are concatenated along the batch dimension by
   the compiled ``gather_batch`` into one pooled, page-aligned buffer (one copy; a batch
   of one request is handed over as is, no copy), then viewed in the model's own shape
   when the config has a ``reshape``;
2. run: the backend's ``run(batch)`` calls the framework once and returns its outputs as
   numpy arrays with the batch dimension first;
3. scatter: ``scatter_batch`` cuts each output into per-request views (no copy), and each
   request gets a response with the outputs it asked for. On the host this is deferred
   (``DeferredResponses``): the core runs it on the event loop, so the instance's thread
   goes back to the framework at once (docs/architecture.md, "Where a batch's responses
   are built").

Models without a batch dimension (``max_batch_size: 0``) run once per request. A failure
in ``run`` (or a malformed output, named in the message) fails every request of that call.

GPU instances (a runner made with ``device_id``) keep tensors on the device where they are
there already: inputs that every request of the batch has in CUDA shared memory are gathered
device-to-device (``Batch.device_inputs``, a single request's range as it is), and ``run``
may return a ``DeviceArray`` for the outputs in ``Batch.device_outputs`` (those some request
wants in a shared-memory region), scattered into per-request device views.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from pytriton_core import types
from pytriton_core._native.batching import BufferPool, gather_batch, scatter_batch
from pytriton_core.backends.base import DeferredResponses, ModelLocation
from pytriton_core.config.spec import ModelSpec, TensorSpec
from pytriton_core.errors import InternalError, ServerError
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.statistics import ComputeTiming
from pytriton_core.inference.tensor import DeviceTensor, Tensor
from pytriton_core.memory.device import DeviceArray, DevicePools
from pytriton_core.memory.pinned import StagingPool


@dataclass(slots=True)
class Batch:
    """One framework call: the gathered inputs in the model's shapes and what to compute."""

    requests: Sequence[InferenceRequest]
    sizes: list[int]  # each request's batch size (1 each for a model without batching)
    inputs: dict[str, np.ndarray]  # name -> array with the batch dimension first
    output_names: list[str]  # outputs any request of the batch asked for, in config order
    # GPU instances: inputs left on the instance's device (not in ``inputs``)...
    device_inputs: dict[str, DeviceArray] = field(default_factory=dict)
    # ...and the outputs that ``run`` may return as a DeviceArray.
    device_outputs: frozenset[str] = frozenset()

    @property
    def size(self) -> int:
        return sum(self.sizes)


_Array = np.ndarray | DeviceArray  # a host array, or (GPU instances) a device one

RunBatch = Callable[[Batch], Mapping[str, _Array]]


class BatchRunner:
    """Gathers, runs and scatters batches for one backend instance (one worker thread)."""

    def __init__(
        self,
        spec: ModelSpec,
        model_name: str,
        pool: BufferPool | None = None,
        staging: StagingPool | None = None,
        device_id: int | None = None,
        device_pools: DevicePools | None = None,
    ) -> None:
        """``staging``: gather into the server's (pinned) staging pool instead of ``pool``,
        for instances that copy each batch to a GPU; ``device_id``: the GPU such an instance
        runs on, where inputs already on a device are gathered (from ``device_pools``)."""
        self.spec = spec
        self._output_names = list(spec.model_outputs)  # config order, then the state outputs
        self._model_name = model_name
        self._pool = pool if pool is not None else BufferPool()
        self._staging = staging
        self._device_id = device_id
        self._device_pools = device_pools if device_pools is not None else DevicePools({})

    @classmethod
    def for_instance(
        cls, spec: ModelSpec, location: ModelLocation, gpu: int | None = None
    ) -> BatchRunner:
        """The runner of a framework instance: on the CPU, or on GPU ``gpu``, where batches
        gather into the server's staging pool and device inputs on the device."""
        if gpu is None:
            return cls(spec, location.name)
        return cls(
            spec,
            location.name,
            staging=location.host_staging,
            device_id=gpu,
            device_pools=location.device_pools,
        )

    @property
    def pool_in_use_bytes(self) -> int:
        """Bytes of this runner's pool handed out and not yet back (a leak check's count)."""
        return int(self._pool.stats()["in_use_bytes"])

    @property
    def staging(self) -> StagingPool | None:
        """The host staging pool of a GPU instance (None on the CPU)."""
        return self._staging

    @property
    def device_pools(self) -> DevicePools:
        return self._device_pools

    def execute(
        self, requests: Sequence[InferenceRequest], timing: ComputeTiming, run: RunBatch
    ) -> Sequence[InferenceResponse | None]:
        """Run ``requests`` through ``run``: once, or once per request without batching.

        When the one framework call of a batch fails, this raises (a ServerError), so the
        core fails the whole execution; when one of several per-request calls fails, only
        that request gets an error response. The responses of one call on the host are
        deferred (``DeferredResponses``): the scatter runs where the core finishes them.
        """
        if self.spec.batching or len(requests) == 1:
            batch, outputs = self._run_group(requests, timing, run, first=True, last=True)
            if self._device_id is not None:  # (device views: scattered on this thread)
                return self._scattered(batch, outputs)
            # What the scatter reads, without the gathered inputs (back to the pool now).
            scattered = Batch(batch.requests, batch.sizes, {}, batch.output_names)
            return DeferredResponses(
                len(requests), functools.partial(self._scattered, scattered, outputs)
            )
        responses: list[InferenceResponse] = []
        for index, request in enumerate(requests):
            try:
                batch, outputs = self._run_group(
                    [request], timing, run, first=index == 0, last=index == len(requests) - 1
                )
                responses.extend(self._scattered(batch, outputs))
            except ServerError as exc:
                responses.extend(failed_responses([request], exc))
        return responses

    def _run_group(
        self,
        requests: Sequence[InferenceRequest],
        timing: ComputeTiming,
        run: RunBatch,
        *,
        first: bool,
        last: bool,
    ) -> tuple[Batch, Mapping[str, _Array]]:
        """Gather and run ``requests`` as one call of the framework."""
        try:
            batch = self.gather(requests)
            if first:
                timing.mark_input_done()
            # A batch that asks for no output has nothing to compute.
            outputs = run(batch) if batch.output_names else {}
            if last:
                timing.mark_infer_done()
        except ServerError:
            raise
        except Exception as exc:
            raise self._failed(exc) from exc
        return batch, outputs

    def _scattered(self, batch: Batch, outputs: Mapping[str, _Array]) -> list[InferenceResponse]:
        """``scatter``, its failures worded as the run's."""
        try:
            return self.scatter(batch, outputs)
        except ServerError:
            raise
        except Exception as exc:
            raise self._failed(exc) from exc

    def _failed(self, exc: Exception) -> InternalError:
        return InternalError(
            f"failed to run model '{self._model_name}': {type(exc).__name__}: {exc}"
        )

    def gather(self, requests: Sequence[InferenceRequest]) -> Batch:
        """The batch's inputs, concatenated along the batch dimension by name."""
        model = self.spec
        sizes = [r.batch_size if model.batching else 1 for r in requests]
        total = sum(sizes)
        batch = Batch(requests, sizes, {}, self._wanted_outputs(requests))
        first = requests[0]
        # model_inputs: with a sequence model's control and state inputs.
        for name, spec in model.model_inputs.items():
            if name not in first.inputs:
                if any(name in r.inputs for r in requests):
                    raise InternalError(
                        f"model '{self._model_name}': the requests of one batch disagree on "
                        f"optional input '{name}'"
                    )
                continue
            tensors = [r.inputs[name] for r in requests]
            array: _Array | None = self._gather_on_device(tensors)
            if array is None:
                parts = [t.data for t in tensors]
                array = self._gather(parts) if len(parts) > 1 else parts[0]
            if spec.reshaped:
                leading = (total,) if model.batching else ()
                array = _reshape(array, leading, spec.model_shape, name)
            if isinstance(array, DeviceArray):
                batch.device_inputs[name] = array
            else:
                batch.inputs[name] = array
        if self._device_id is not None:
            # Implicit state stays on the device, where the next request reads it.
            batch.device_outputs = model.state_outputs | frozenset(
                name
                for r in requests
                if r.requested_outputs is not None
                for name, wanted in r.requested_outputs.items()
                if wanted.to_region
            )
        return batch

    def _gather_on_device(self, tensors: Sequence[Tensor]) -> DeviceArray | None:
        """The batch of an input every request has on a device, on this instance's GPU;
        None for the host path (a CPU instance, or some request's data is on the host)."""
        device_id = self._device_id
        if device_id is None:
            return None
        parts = []
        for tensor in tensors:
            if not isinstance(tensor, DeviceTensor) or not isinstance(tensor.device, DeviceArray):
                return None
            parts.append(tensor.device)
        if len(parts) == 1 and parts[0].device_id == device_id:
            return parts[0]
        return self._device_pools.gather(parts, device_id)

    def _gather(self, parts: list[np.ndarray]) -> np.ndarray:
        head = parts[0]
        if self._staging is None or head.dtype.hasobject:
            return gather_batch(parts, pool=self._pool)
        shape = (sum(p.shape[0] for p in parts), *head.shape[1:])
        nbytes = int(np.prod(shape)) * head.dtype.itemsize
        # The staged array keeps its (pinned) buffer until the batch is dropped.
        out = self._staging.acquire(nbytes).view(head.dtype).reshape(shape)
        return gather_batch(parts, out=out)

    def scatter(self, batch: Batch, outputs: Mapping[str, _Array]) -> list[InferenceResponse]:
        """Per-request responses holding views of the outputs each request asked for."""
        model = self.spec
        per_request: list[list[Tensor]] = [[] for _ in batch.requests]
        for name in batch.output_names:
            spec = model.model_outputs[name]
            array = outputs.get(name)
            if array is None:
                raise InternalError(f"model '{self._model_name}' produced no output '{name}'")
            array = _as_config_datatype(array, spec, self._model_name)
            views: Sequence[_Array] = [array]
            if model.batching:
                if not array.shape or array.shape[0] != batch.size:
                    raise InternalError(
                        f"model '{self._model_name}' output '{name}' has shape "
                        f"{list(array.shape)}: expected the batch size {batch.size} first"
                    )
                if len(batch.sizes) > 1:
                    if isinstance(array, DeviceArray):
                        views = array.split(batch.sizes)
                    else:
                        views = scatter_batch(array, batch.sizes)
            for slot, view, size in zip(per_request, views, batch.sizes, strict=True):
                if spec.reshaped:
                    view = _reshape(view, (size,) if model.batching else (), spec.dims, name)
                if isinstance(view, DeviceArray):
                    slot.append(DeviceTensor(name, spec.datatype, view))
                else:
                    slot.append(Tensor(name, spec.datatype, view))
        responses = []
        states = model.state_outputs  # kept for the sequence batcher, which drops them
        for request, tensors in zip(batch.requests, per_request, strict=True):
            wanted = request.requested_outputs
            if wanted is not None and len(wanted) < len(tensors):
                tensors = [t for t in tensors if t.name in wanted or t.name in states]
            responses.append(InferenceResponse(outputs=tensors))
        return responses

    def _wanted_outputs(self, requests: Sequence[InferenceRequest]) -> list[str]:
        """The outputs to compute: what some request asked for, and the implicit state."""
        names = self._output_names
        states = self.spec.state_outputs
        wanted: set[str] = set(states)
        for request in requests:
            if request.requested_outputs is None:
                wanted.update(self.spec.outputs)
                break
            wanted.update(request.requested_outputs)
        return [n for n in names if n in wanted]


def failed_responses(
    requests: Sequence[InferenceRequest], error: ServerError
) -> list[InferenceResponse]:
    """One error response per request (each gets its own object: the core edits them)."""
    return [InferenceResponse.failed(error) for _ in requests]


def _reshape(array: _Array, leading: tuple[int, ...], shape: tuple[int, ...], name: str) -> _Array:
    """``array`` viewed as ``leading + shape``; at most one variable (-1) dim is inferred."""
    if list(shape).count(-1) > 1:
        if tuple(array.shape[len(leading) :]) == shape:
            return array
        raise InternalError(
            f"cannot reshape tensor '{name}' of shape {list(array.shape)} to {list(shape)}: "
            "more than one variable-size dimension"
        )
    try:
        return array.reshape(leading + shape)
    except ValueError as exc:
        raise InternalError(
            f"cannot reshape tensor '{name}' of shape {list(array.shape)} to "
            f"{list(leading + shape)}: {exc}"
        ) from None


def _as_config_datatype(array: _Array, spec: TensorSpec, model_name: str) -> _Array:
    """The output in its config datatype: BYTES elements as ``bytes``; others must match."""
    datatype = spec.datatype
    if datatype.is_bytes and isinstance(array, np.ndarray):
        if array.dtype.kind in ("U", "S") or (
            array.dtype == np.object_ and array.size and isinstance(array.flat[0], str)
        ):
            encoded = [e.encode() if isinstance(e, str) else bytes(e) for e in array.flat]
            result = np.empty(array.shape, dtype=np.object_)
            result.reshape(-1)[:] = encoded
            return result
        return array
    if array.dtype != datatype.numpy_dtype:
        produced = types.from_numpy(array.dtype)
        raise InternalError(
            f"model '{model_name}' output '{spec.name}' has datatype "
            f"{produced.wire_name if produced else array.dtype}, but the model configuration "
            f"says {datatype.wire_name}"
        )
    return array
