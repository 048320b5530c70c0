"""The framework-backend models, and their raw throughput at the batch sizes a server formed.

One MLP (``Y = relu(X @ W1 + b1) @ W2 + b2``, FP32, 256 -> 1024 -> 256), built on the spot by
tests/integration/framework_models.py (the tests' builder, imported from there: one
implementation), as an ONNX graph (onnxruntime backend), a TorchScript module (pytorch backend)
or an OpenVINO IR (openvino backend). Each is served with ``dynamic_batching {}``,
``max_batch_size`` 16, one CPU instance, and the framework's intra-op threads set to
``threads`` (1 by default: the other core of a 2-core machine is left to the server and the
client).

"Raw" is the framework's own call in a plain loop in this process (no server, no sockets), with
the same thread setting, at each batch size the server formed (the model's statistics,
``batch_stats``): the raw throughput for a run is its rows divided by the raw time of the same
batches, and served/raw the share of the framework's own speed the server delivers. Used by the
framework scenarios of ``python -m bench`` and by ``bench/backends.py``.

Both compute on the same kind of numbers: standard normal FP32 rows (``sample_rows``), which
perf_analyzer sends from the JSON file ``build_repository`` writes beside the repository
(``input_data_path``). Its default "random" data is random bytes: NaNs, denormals and values
up to 3e38, on which the large MLP's onnxruntime call ran 9 % slower than on normal numbers
(4,131 against 4,535 inf/s at batch 8, the same session): a served run on those against a
raw loop on these compared different work.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import shutil
import sys
import textwrap
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from bench.scenarios import MLP_HIDDEN, MLP_IN_FEATURES, MLP_OUT_FEATURES
from bench.toolbox import REPO_ROOT

INTEGRATION_TESTS = REPO_ROOT / "tests" / "integration"
MAX_BATCH_SIZE = 16
THREADS = 1
RAW_ROUNDS = 5
RAW_WARMUP_CALLS = 20
INPUT_DATA_ROWS = 16  # the distinct requests perf_analyzer cycles through


@dataclass(frozen=True)
class FrameworkModel:
    backend: str  # the model configuration's backend
    name: str  # the model's name in the repository
    input: str
    output: str
    thread_parameter: str  # the backend's parameter for its intra-op thread count
    modules: tuple[str, ...]  # what must be importable to build and serve it
    key: str = ""  # its key in MODELS (and scenarios' ``backend``); the backend by default
    # (in, hidden, out) features of its MLP
    size: tuple[int, int, int] = (MLP_IN_FEATURES, MLP_HIDDEN, MLP_OUT_FEATURES)
    parameters: tuple[tuple[str, str], ...] = ()  # more config parameters

    @property
    def model_key(self) -> str:
        return self.key or self.backend


# The compute-bound MLP: about 10 ms per batch of 16 on one core here (the goal's >= 2 ms).
LARGE_MLP = (1024, 4096, 1024)
# The Python backend's MLP in numpy, executed per request (the list API) or per batch.
NUMPY, NUMPY_BATCHED = "python-numpy", "python-numpy-batched"

MODELS = {
    model.model_key: model
    for model in (
        FrameworkModel(
            "onnxruntime", "onnx_mlp", "X", "Y", "intra_op_thread_count", ("onnx", "onnxruntime")
        ),
        FrameworkModel(
            "pytorch", "torch_mlp", "INPUT__0", "OUTPUT__0", "INTRA_OP_THREAD_COUNT", ("torch",)
        ),
        FrameworkModel(
            "openvino", "openvino_mlp", "X", "Y", "INFERENCE_NUM_THREADS", ("onnx", "openvino")
        ),
        FrameworkModel(
            "onnxruntime",
            "onnx_mlp_large",
            "X",
            "Y",
            "intra_op_thread_count",
            ("onnx", "onnxruntime"),
            key="onnxruntime-large",
            size=LARGE_MLP,
        ),
        FrameworkModel("python", "numpy_mlp", "X", "Y", "", ("numpy",), key=NUMPY),
        FrameworkModel(
            "python",
            "numpy_mlp_batched",
            "X",
            "Y",
            "",
            ("numpy",),
            key=NUMPY_BATCHED,
            parameters=(("BATCHED_EXECUTE", "yes"),),
        ),
    )
}

# The numpy MLP as a Python model: each request of ``requests`` computed on its own (under
# BATCHED_EXECUTE the one request holds the whole batch).
NUMPY_MODEL = """\
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


def one_blas_thread():
    # One BLAS thread, as the framework models get one intra-op thread (the other core is
    # the server's and the client's; OpenBLAS's threads spin while they wait).
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    threadpool_limits(1)


class TritonPythonModel:
    def initialize(self, args):
        one_blas_thread()
        weights = np.load(Path(__file__).with_name("weights.npz"))
        self.w1, self.b1, self.w2, self.b2 = (weights[k] for k in ("W1", "b1", "W2", "b2"))

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            y = np.maximum(x @ self.w1 + self.b1, 0) @ self.w2 + self.b2
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", y)]))
        return responses
"""


def integration_module(name: str) -> ModuleType:
    """``tests/integration/<name>.py``, imported as the tests import it (as ``name``)."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    path = INTEGRATION_TESTS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def framework_models() -> ModuleType:
    """tests/integration/framework_models.py, the MLP's builder."""
    return integration_module("framework_models")


def mlp_size(model: FrameworkModel | None = None) -> Any:
    sizes = model.size if model is not None else (MLP_IN_FEATURES, MLP_HIDDEN, MLP_OUT_FEATURES)
    return framework_models().MlpSize(*sizes)


def missing(backend: str) -> str | None:
    """Why this interpreter (and so the server it starts) cannot build or serve the model."""
    absent = [name for name in MODELS[backend].modules if importlib.util.find_spec(name) is None]
    if absent:
        return f"{', '.join(absent)} not installed in {sys.executable}"
    return None


def _config(model: FrameworkModel, threads: int, io: str = "") -> str:
    parameters = list(model.parameters)
    if threads and model.thread_parameter:
        parameters.append((model.thread_parameter, str(threads)))
    threads_line = "".join(
        f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'
        for key, value in parameters
    )
    return (
        f'backend: "{model.backend}"\nmax_batch_size: {MAX_BATCH_SIZE}\n'
        "dynamic_batching { }\ninstance_group [ { count: 1, kind: KIND_CPU } ]\n"
        + io
        + threads_line
    )


def _io(model: FrameworkModel) -> str:
    return textwrap.dedent(
        f"""\
        input [ {{ name: "{model.input}" data_type: TYPE_FP32 dims: [ {model.size[0]} ] }} ]
        output [ {{ name: "{model.output}" data_type: TYPE_FP32 dims: [ {model.size[2]} ] }} ]
        """
    )


def build_repository(folder: Path, backends: Iterable[str], threads: int = THREADS) -> Path:
    """A fresh model repository under ``folder`` with the MLP for each of ``backends`` (keys
    of MODELS)."""
    fm = framework_models()
    if folder.exists():
        shutil.rmtree(folder)
    repository = folder / "repository"
    repository.mkdir(parents=True)
    backends = list(backends)
    onnx_file = None
    if "onnxruntime" in backends or "openvino" in backends:
        onnx_file = fm.write_onnx_mlp(folder / "source" / "model.onnx", mlp_size())
    for backend in backends:
        model = MODELS[backend]
        size = mlp_size(model)
        target = repository / model.name
        io = ""
        if model.backend == "python":
            (target / "1").mkdir(parents=True)
            (target / "1" / "model.py").write_text(NUMPY_MODEL)
            np.savez(target / "1" / "weights.npz", **fm.mlp_weights(size))
            io = _io(model)
        elif backend == "onnxruntime-large":
            (target / "1").mkdir(parents=True)
            fm.write_onnx_mlp(target / "1" / "model.onnx", size)
        elif backend == "onnxruntime":
            assert onnx_file is not None
            (target / "1").mkdir(parents=True)
            shutil.copyfile(onnx_file, target / "1" / "model.onnx")
        elif backend == "pytorch":
            with warnings.catch_warnings():  # torch 2.10+: "torch.jit.script is deprecated"
                warnings.simplefilter("ignore", FutureWarning)
                fm.write_torch_mlp(target / "1" / "model.pt", size)
            io = _io(model)
        else:
            assert onnx_file is not None
            fm.write_openvino_mlp(onnx_file, target / "1" / "model.xml")
        (target / "config.pbtxt").write_text(_config(model, threads, io))
        write_input_data(input_data_path(repository, backend), model)
    return repository


def sample_rows(rows: int, features: int) -> np.ndarray:
    """The MLPs' inputs, served and raw alike: standard normal FP32, ``rows`` x ``features``."""
    return np.random.default_rng(0).standard_normal((rows, features), np.float32)


def input_data_path(repository: Path, backend: str) -> Path:
    """perf_analyzer's ``--input-data`` file for ``backend``'s model (beside ``repository``)."""
    return repository.parent / "input-data" / f"{MODELS[backend].name}.json"


def write_input_data(path: Path, model: FrameworkModel) -> None:
    """``INPUT_DATA_ROWS`` requests of one row each, as perf_analyzer reads them."""
    features = model.size[0]
    entries = [
        {model.input: {"content": row.tolist(), "shape": [features]}}
        for row in sample_rows(INPUT_DATA_ROWS, features)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"data": entries}))


def raw_runner(backend: str, repository: Path, threads: int = THREADS) -> Callable[[Any], Any]:
    """The framework's own call on a batch, with the options the served model has."""
    model = MODELS[backend]
    model_dir = repository / model.name / "1"
    if model.backend == "python":  # the model's numpy, on the whole batch at once
        with contextlib.suppress(ImportError):  # one BLAS thread, as in the served model
            from threadpoolctl import threadpool_limits

            threadpool_limits(1)
        weights = np.load(model_dir / "weights.npz")
        w1, b1, w2, b2 = (weights[k] for k in ("W1", "b1", "W2", "b2"))
        return lambda x: np.maximum(x @ w1 + b1, 0) @ w2 + b2
    if model.backend == "onnxruntime":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        session = ort.InferenceSession(str(model_dir / "model.onnx"), options)
        return lambda x: session.run([model.output], {model.input: x})
    if backend == "pytorch":
        import torch

        if threads:
            torch.set_num_threads(threads)
        with warnings.catch_warnings():  # torch 2.10+: "torch.jit.load is deprecated"
            warnings.simplefilter("ignore", FutureWarning)
            module = torch.jit.load(str(model_dir / "model.pt"))  # type: ignore[no-untyped-call]
        module.eval()

        def run(x: Any) -> Any:
            with torch.inference_mode():
                return module(torch.from_numpy(x)).numpy()

        return run
    import openvino as ov

    properties = {"INFERENCE_NUM_THREADS": str(threads)} if threads else {}
    compiled = ov.Core().compile_model(str(model_dir / "model.xml"), "CPU", properties)
    request = compiled.create_infer_request()
    return lambda x: request.infer({model.input: x}, share_inputs=True, share_outputs=False)


def raw_throughputs(
    run: Callable[[Any], Any],
    sizes: Iterable[int],
    seconds: float,
    rounds: int = RAW_ROUNDS,
    features: int = MLP_IN_FEATURES,
) -> dict[int, float]:
    """Inferences/s of ``run`` in a loop, per batch size: the best of ``rounds`` windows of
    ``seconds / rounds`` each.

    Rounds go over every size in turn, so a burst of other work on the machine spoils one
    window of several sizes rather than every window of one; the best window is the one
    least disturbed (so served/raw errs low).
    """
    batches = {n: sample_rows(n, features) for n in sorted(sizes)}
    for x in batches.values():
        for _ in range(RAW_WARMUP_CALLS):
            run(x)
    rates: dict[int, list[float]] = {n: [] for n in batches}
    for _ in range(rounds):
        for n, x in batches.items():
            calls, start = 0, time.perf_counter()
            while (elapsed := time.perf_counter() - start) < seconds / rounds:
                run(x)
                calls += 1
            rates[n].append(calls * n / elapsed)
    return {n: max(r) for n, r in rates.items()}


@dataclass(frozen=True)
class RawMix:
    """The raw framework's throughput on the batches a served run executed."""

    batches: Mapping[int, int]  # batch size -> executions the server ran
    raw_by_size: Mapping[int, float]  # batch size -> raw inferences/s

    @property
    def rows(self) -> int:
        return sum(size * count for size, count in self.batches.items())

    @property
    def average_batch(self) -> float | None:
        executions = sum(self.batches.values())
        return self.rows / executions if executions else None

    @property
    def inf_per_s(self) -> float | None:
        seconds = sum(count * size / self.raw_by_size[size] for size, count in self.batches.items())
        return self.rows / seconds if seconds else None

    def formed(self) -> str:
        """ "size:count ..." of the batches formed."""
        return " ".join(f"{size}:{count}" for size, count in sorted(self.batches.items()))


def raw_mixes(
    backend: str,
    repository: Path,
    runs: list[Mapping[int, int]],
    *,
    seconds_per_size: float,
    threads: int = THREADS,
) -> list[RawMix]:
    """For each served run's batches (size -> executions), the raw throughput on them; every
    batch size is measured once, for all runs."""
    runs = [{size: count for size, count in batches.items() if count} for batches in runs]
    sizes = sorted({size for batches in runs for size in batches})
    raw_by_size = (
        raw_throughputs(
            raw_runner(backend, repository, threads),
            sizes,
            seconds_per_size,
            features=MODELS[backend].size[0],
        )
        if sizes
        else {}
    )
    return [
        RawMix(dict(sorted(batches.items())), {size: raw_by_size[size] for size in batches})
        for batches in runs
    ]
