"""PyTorch backend: TorchScript ``model.pt`` (platform ``pytorch_libtorch``).

Inputs reach ``forward`` by Triton's naming conventions, tried in this order:

* the config's input names are ``forward``'s argument names;
* every name is ``<name>__<index>`` (``INPUT__0``...): the index is the argument position;
* otherwise the config's order is the argument order.

A ``forward`` taking one ``Dict[str, Tensor]`` gets every input by its config name.
Outputs are ``<name>__<index>`` into the returned tuple (``OUTPUT__0``...), else in config
order. Each instance holds its own module on its device (``KIND_GPU``: ``cuda:<id>``;
``KIND_CPU`` and ``KIND_MODEL``: inputs on the CPU) and runs under
``torch.inference_mode()``. Inputs become tensors with ``torch.from_numpy`` (no copy;
read-only arrays are copied once, since torch may write into its inputs), and CPU outputs
go back as ``Tensor.numpy()`` views. Like Triton, there is no auto-complete.

Parameters (Triton's names): ``INFERENCE_MODE`` (default true),
``DISABLE_OPTIMIZED_EXECUTION``, ``DISABLE_CUDNN``, ``ENABLE_CACHE_CLEANING``,
``INTRA_OP_THREAD_COUNT`` and ``INTER_OP_THREAD_COUNT`` (process-wide: the first model to
set one wins, as in Triton).
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np
import torch
from google.protobuf.message import Message
from torch.jit._fuser import optimized_execution

from pytriton_core.backends.base import (
    Backend,
    BackendInstance,
    BackendModel,
    InstanceSpec,
    ModelLocation,
)
from pytriton_core.backends.batching import Batch, BatchRunner
from pytriton_core.backends.framework import flag, model_path
from pytriton_core.config import ModelSpec
from pytriton_core.errors import InternalError, ModelConfigError, UnsupportedError
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.statistics import ComputeTiming, MemoryUsage, merge_memory_usage
from pytriton_core.memory.device import DeviceArray
from pytriton_core.memory.pinned import StagingPool

log = logging.getLogger(__name__)

MODEL_FILENAME = "model.pt"
_NAMED_INDEX = re.compile(r"^.*__(\d+)$")
_BF16 = np.dtype(ml_dtypes.bfloat16)

_threads_lock = threading.Lock()
_threads_set: dict[str, int] = {}  # INTRA_/INTER_OP_THREAD_COUNT already applied


class PyTorchBackend(Backend):
    name = "pytorch"

    def load_model(self, spec: ModelSpec, location: ModelLocation, config: Message) -> BackendModel:
        if spec.platform == "torch_aoti":
            raise UnsupportedError(
                f"model '{location.name}': platform 'torch_aoti' (model.pt2) is not supported; "
                "serve a TorchScript model.pt (platform 'pytorch_libtorch')"
            )
        return PyTorchModel(spec, location)


class PyTorchModel(BackendModel):
    def __init__(self, spec: ModelSpec, location: ModelLocation) -> None:
        self.location = location
        self.path = model_path(location, spec.default_model_filename, MODEL_FILENAME)
        self.model_spec = spec
        if not spec.inputs or not spec.outputs:
            raise ModelConfigError(
                f"model '{location.name}': a pytorch model's configuration must list its "
                "inputs and outputs (the pytorch backend has no auto-complete)"
            )
        for tensor in (*spec.inputs.values(), *spec.outputs.values()):
            if tensor.datatype.is_bytes:
                raise UnsupportedError(
                    f"model '{location.name}': '{tensor.name}' is TYPE_STRING, which the "
                    "pytorch backend does not support"
                )
        params = spec.parameters
        self.inference_mode = flag(params.get("INFERENCE_MODE"), default=True)
        self.optimized_execution = not flag(params.get("DISABLE_OPTIMIZED_EXECUTION"))
        self.cudnn = not flag(params.get("DISABLE_CUDNN"))
        self.cache_cleaning = flag(params.get("ENABLE_CACHE_CLEANING"))
        _apply_thread_counts(params, location.name)
        # Output index in the returned tuple, by name.
        # model_outputs: the config's outputs, then a sequence model's state outputs.
        self.output_index = _output_indices(list(spec.model_outputs))

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        return PyTorchInstance(self, spec)


class PyTorchInstance(BackendInstance):
    def __init__(self, model: PyTorchModel, spec: InstanceSpec) -> None:
        self._model = model
        self._spec = spec
        if spec.kind == "GPU":
            if not torch.cuda.is_available():
                raise UnsupportedError(
                    f"model '{model.location.name}' instance '{spec.name}' is KIND_GPU, but "
                    "this torch has no CUDA device (a CPU-only build, or no GPU visible)"
                )
            self._device = torch.device("cuda", spec.device_id)
        else:
            self._device = torch.device("cpu")
        # KIND_MODEL: the module keeps the devices it was saved with.
        map_location = None if spec.kind == "MODEL" else self._device
        try:
            module: Any = torch.jit.load(  # type: ignore[no-untyped-call]
                str(model.path), map_location=map_location
            )
        except Exception as exc:
            raise InternalError(
                f"failed to load model '{model.location.name}' with torch.jit.load: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        module.eval()
        self._module = module
        self._dict_input, self._input_order = _input_layout(module, model)
        self._runner = BatchRunner.for_instance(
            model.model_spec, model.location, spec.device_id if spec.kind == "GPU" else None
        )
        # OpenMP keeps the thread count per calling thread: set it in this worker thread
        # (create_instance and execute run in it), or torch uses every core here.
        intra = _threads_set.get("INTRA_OP_THREAD_COUNT", 0)
        if intra > 0:
            torch.set_num_threads(intra)

    def execute(
        self, requests: Sequence[InferenceRequest], timing: ComputeTiming
    ) -> Sequence[InferenceResponse | None]:
        return self._runner.execute(requests, timing, self._run)

    def memory_usage(self) -> Sequence[MemoryUsage]:
        """The bytes of the module's parameters and buffers, by device (shared storage
        counted once): what this instance's copy of the model holds."""
        seen: set[tuple[str, int | None, int]] = set()
        usages = []
        for tensor in (*self._module.parameters(), *self._module.buffers()):
            storage = tensor.untyped_storage()
            key = (tensor.device.type, tensor.device.index, storage.data_ptr())
            if key in seen:
                continue
            seen.add(key)
            kind = "GPU" if tensor.device.type == "cuda" else "CPU"
            usages.append(MemoryUsage(kind, tensor.device.index or 0, storage.nbytes()))
        return merge_memory_usage(usages)

    def _run(self, batch: Batch) -> dict[str, np.ndarray | DeviceArray]:
        with self._modes():
            tensors = {name: self._to_torch(array) for name, array in batch.inputs.items()}
            for name, on_device in batch.device_inputs.items():
                tensors[name] = _wrap_device(on_device, self._device)
            if self._dict_input:
                result = self._module(tensors)
            else:
                result = self._module(*(tensors[name] for name in self._input_order))
            values = list(result) if isinstance(result, (tuple, list)) else [result]
            outputs: dict[str, np.ndarray | DeviceArray] = {}
            left_on_device = False
            for name in batch.output_names:
                index = self._model.output_index[name]
                if index >= len(values) or not isinstance(values[index], torch.Tensor):
                    raise InternalError(
                        f"model '{self._model.location.name}' returned {len(values)} "
                        f"value(s); output '{name}' is number {index}, which is not a tensor"
                    )
                value = values[index]
                if name in batch.device_outputs and value.is_cuda:
                    outputs[name] = _device_array(value, self._runner.staging)
                    left_on_device = True
                else:
                    outputs[name] = _to_numpy(value)
            if left_on_device:
                # Others copy from these pointers outside torch's stream: let it finish.
                torch.cuda.current_stream(self._device).synchronize()
            if self._model.cache_cleaning and self._device.type == "cuda":
                torch.cuda.empty_cache()
        return outputs

    @contextlib.contextmanager
    def _modes(self) -> Iterator[None]:
        model = self._model
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.inference_mode() if model.inference_mode else torch.no_grad())
            if not model.optimized_execution:
                stack.enter_context(optimized_execution(False))
            if not model.cudnn:
                stack.enter_context(torch.backends.cudnn.flags(enabled=False))
            if self._device.type == "cuda":
                stack.enter_context(torch.cuda.device(self._device))
            yield

    def _to_torch(self, array: np.ndarray) -> torch.Tensor:
        if not array.flags.writeable:
            # torch may write into its inputs; a request's data may be the received bytes.
            array = np.array(array)
        if array.dtype == _BF16:
            tensor = torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
        else:
            tensor = torch.from_numpy(array)
        if self._device.type == "cuda":
            # One host-to-device copy of the whole batch.
            return tensor.to(self._device)
        return tensor


def _wrap_device(array: DeviceArray, device: torch.device) -> torch.Tensor:
    """A device input as a torch tensor over the same memory (no copy)."""
    tensor = torch.as_tensor(array, device=device)
    # bfloat16 crosses __cuda_array_interface__ as its 16 bits.
    return tensor.view(torch.bfloat16) if array.dtype == _BF16 else tensor


def _device_array(tensor: torch.Tensor, staging: StagingPool | None) -> DeviceArray:
    """A CUDA output left on its device; the array keeps the tensor (its memory) alive."""
    tensor = tensor.detach().contiguous()
    if tensor.dtype == torch.bfloat16:
        dtype = _BF16
    else:
        dtype = torch.empty(0, dtype=tensor.dtype).numpy().dtype
    device_id = tensor.device.index or 0
    return DeviceArray(tensor.data_ptr(), tuple(tensor.shape), dtype, device_id, tensor, staging)


def _to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A host numpy array of an output: a view on the CPU, one device-to-host copy else."""
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(_BF16)
    return tensor.numpy()


def _input_layout(module: Any, model: PyTorchModel) -> tuple[bool, list[str]]:
    """(forward takes one dict, the input names in argument order): the config's inputs
    and a sequence model's control and state inputs."""
    names = list(model.model_spec.model_inputs)
    try:
        arguments = list(module.forward.schema.arguments)[1:]  # [0] is self
    except (AttributeError, RuntimeError) as exc:
        raise InternalError(
            f"model '{model.location.name}': cannot read forward()'s signature: {exc}"
        ) from exc
    arg_names = [a.name for a in arguments]
    if len(arguments) == 1 and str(arguments[0].type).startswith("Dict[str"):
        return True, names
    if all(name in arg_names for name in names):
        by_position = {arg_names.index(name): name for name in names}
    elif all(_NAMED_INDEX.match(name) for name in names):
        by_position = {_named_index(name): name for name in names}
    else:
        log.warning(
            "model '%s': input names are neither forward() arguments (%s) nor "
            "<name>__<index>; passing them in configuration order",
            model.location.name,
            ", ".join(arg_names),
        )
        by_position = dict(enumerate(names))
    if len(by_position) != len(names) or sorted(by_position) != list(range(len(names))):
        raise ModelConfigError(
            f"model '{model.location.name}': inputs {names} do not map one-to-one onto "
            f"forward() arguments {arg_names}"
        )
    if len(names) > len(arguments):
        raise ModelConfigError(
            f"model '{model.location.name}': the configuration lists {len(names)} inputs, "
            f"forward() takes {len(arguments)}: {arg_names}"
        )
    return False, [by_position[i] for i in range(len(names))]


def _output_indices(names: list[str]) -> dict[str, int]:
    if all(_NAMED_INDEX.match(name) for name in names):
        return {name: _named_index(name) for name in names}
    return {name: index for index, name in enumerate(names)}


def _named_index(name: str) -> int:
    found = _NAMED_INDEX.match(name)
    assert found is not None
    return int(found.group(1))


def _apply_thread_counts(params: Mapping[str, str], model: str) -> None:
    """Process-wide torch thread pools; the first model that sets a count wins."""
    for key, setter in (
        ("INTRA_OP_THREAD_COUNT", torch.set_num_threads),
        ("INTER_OP_THREAD_COUNT", torch.set_num_interop_threads),
    ):
        value = params.get(key)
        if not value:
            continue
        try:
            count = int(value)
        except ValueError:
            raise ModelConfigError(
                f"model '{model}': parameter '{key}' must be an integer, got '{value}'"
            ) from None
        with _threads_lock:
            if key in _threads_set:
                if _threads_set[key] != count:
                    log.warning(
                        "model '%s': %s=%d ignored, already set to %d by another model",
                        model,
                        key,
                        count,
                        _threads_set[key],
                    )
                continue
            if count > 0:
                try:
                    setter(count)
                except RuntimeError as exc:  # inter-op threads: only before parallel work
                    log.warning("model '%s': %s=%d not applied: %s", model, key, count, exc)
            _threads_set[key] = count


def create_backend() -> Backend:
    return PyTorchBackend()
