"""The scenarios and the presets that group them.

A scenario is one request shape sent one way (HTTP with JSON tensors, HTTP with binary
tensors, gRPC, or system shared memory), at a list of concurrencies, through one or both client
kinds, with the model's dynamic batcher on or off. Shapes are [1, N] FP32 (batch 1 of the
identity model's [-1] input), so inferences per second = requests per second.

A framework scenario (``backend`` set) sends the same kind of request to an MLP served by one
of pytriton-core's framework backends (bench.frameworks) instead of the identity model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

HTTP_BINARY = "http-binary"
HTTP_JSON = "http-json"
GRPC = "grpc"
SHM_SYSTEM = "shm-system"
PROTOCOLS = (HTTP_BINARY, HTTP_JSON, GRPC, SHM_SYSTEM)

PERF_ANALYZER = "perf_analyzer"
HTTP_LOAD = "http-load"  # the common HTTP load generator: wrk, or the Python one without wrk

SMALL, MEDIUM, LARGE = 16, 1 << 16, 1 << 20

# The framework scenarios' MLP (bench.frameworks): FP32, in -> hidden -> out features.
MLP_IN_FEATURES, MLP_HIDDEN, MLP_OUT_FEATURES = 256, 1024, 256
ONNX, TORCHSCRIPT = "onnxruntime", "pytorch"  # the backends, as bench.frameworks.MODELS names them
# More models of bench.frameworks.MODELS: the compute-bound MLP (1024 -> 4096 -> 1024), the
# MLP in numpy in a Python model, per request (the list API) and per batch (BATCHED_EXECUTE).
ONNX_LARGE, NUMPY, NUMPY_BATCHED = "onnxruntime-large", "python-numpy", "python-numpy-batched"
LARGE_MLP_IN_FEATURES = 1024
# model key -> (scenario key prefix, title prefix)
FRAMEWORK_LABELS = {
    ONNX: ("onnx-mlp", "ONNX MLP"),
    TORCHSCRIPT: ("torchscript-mlp", "TorchScript MLP"),
    ONNX_LARGE: ("onnx-mlp-large", "ONNX MLP 1024-4096-1024"),
    NUMPY: ("numpy-mlp", "Python numpy MLP"),
    NUMPY_BATCHED: ("numpy-mlp-batched", "Python numpy MLP BATCHED_EXECUTE"),
}


def shape_label(elements: int) -> str:
    if elements >= 1 << 20 and elements % (1 << 20) == 0:
        return f"{elements >> 20}Mi"
    if elements >= 1 << 10 and elements % (1 << 10) == 0:
        return f"{elements >> 10}Ki"
    return str(elements)


@dataclass(frozen=True)
class Scenario:
    elements: int
    protocol: str
    concurrencies: tuple[int, ...]
    clients: tuple[str, ...]
    dynamic_batching: bool = False
    http_window_s: int = 1  # one window of the HTTP load generator (wrk takes whole seconds)
    pa_window_ms: int = 500  # one perf_analyzer measurement (-p); a run takes 3 of them
    backend: str | None = None  # a framework backend's MLP instead of the identity model

    @property
    def key(self) -> str:
        batching = "-dynbatch" if self.dynamic_batching else ""
        model = f"{FRAMEWORK_LABELS[self.backend][0]}-" if self.backend else ""
        return f"{model}{shape_label(self.elements)}-{self.protocol}{batching}"

    @property
    def title(self) -> str:
        batching = " +dyn. batching" if self.dynamic_batching else ""
        model = f"{FRAMEWORK_LABELS[self.backend][1]} " if self.backend else ""
        return f"{model}[{shape_label(self.elements)}] {self.protocol}{batching}"


@dataclass(frozen=True)
class Preset:
    name: str
    scenarios: tuple[Scenario, ...]
    raw_batch_sizes: tuple[int, ...]
    raw_window_s: float


_BOTH = (PERF_ANALYZER, HTTP_LOAD)
_CONCURRENCIES = (1, 8, 64)

DEFAULT = Preset(
    "default",
    (
        Scenario(SMALL, HTTP_BINARY, _CONCURRENCIES, _BOTH),
        Scenario(SMALL, HTTP_JSON, _CONCURRENCIES, (HTTP_LOAD,)),
        Scenario(SMALL, GRPC, _CONCURRENCIES, (PERF_ANALYZER,)),
        Scenario(SMALL, SHM_SYSTEM, _CONCURRENCIES, (PERF_ANALYZER,)),
        # 4 MiB per request: fewer concurrencies, longer windows.
        Scenario(LARGE, HTTP_BINARY, (1, 8), _BOTH, http_window_s=2, pa_window_ms=1000),
        Scenario(LARGE, HTTP_JSON, (1,), (HTTP_LOAD,), http_window_s=5),
        Scenario(LARGE, GRPC, (1, 8), (PERF_ANALYZER,), pa_window_ms=1000),
        Scenario(LARGE, SHM_SYSTEM, (1, 8), (PERF_ANALYZER,), pa_window_ms=1000),
        # 256 KiB per request: between the per-request overhead and the copies.
        Scenario(MEDIUM, HTTP_BINARY, (8,), (PERF_ANALYZER,)),
        Scenario(MEDIUM, SHM_SYSTEM, (8,), (PERF_ANALYZER,)),
        # The batcher only matters with requests in flight together.
        Scenario(SMALL, HTTP_BINARY, (8, 64), _BOTH, dynamic_batching=True),
        # Framework backends (pytriton-core only), served vs the framework's raw loop.
        *(
            Scenario(
                MLP_IN_FEATURES,
                HTTP_BINARY,
                (1, 16),
                (PERF_ANALYZER,),
                dynamic_batching=True,
                backend=backend,
            )
            for backend in (ONNX, TORCHSCRIPT)
        ),
        # Compute-bound: served vs raw at the same batch sizes.
        Scenario(
            LARGE_MLP_IN_FEATURES,
            HTTP_BINARY,
            (16,),
            (PERF_ANALYZER,),
            dynamic_batching=True,
            backend=ONNX_LARGE,
            pa_window_ms=2000,
        ),
        # A Python model's batch: the list API vs one stacked request (BATCHED_EXECUTE).
        *(
            Scenario(
                MLP_IN_FEATURES,
                HTTP_BINARY,
                (64,),
                (PERF_ANALYZER,),
                dynamic_batching=True,
                backend=backend,
            )
            for backend in (NUMPY, NUMPY_BATCHED)
        ),
    ),
    raw_batch_sizes=(1, 8),
    raw_window_s=1.0,
)

QUICK = Preset(
    "quick",
    (Scenario(SMALL, HTTP_BINARY, (1, 8), _BOTH),),
    raw_batch_sizes=(1,),
    raw_window_s=0.5,
)

PRESETS = {preset.name: preset for preset in (DEFAULT, QUICK)}


def select(preset: Preset, patterns: tuple[str, ...]) -> Preset:
    """``preset`` with only the scenarios whose key contains one of ``patterns``."""
    kept = tuple(s for s in preset.scenarios if any(p in s.key for p in patterns))
    return dataclasses.replace(preset, scenarios=kept)
