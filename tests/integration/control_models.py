"""Model folders for the control-plane tests: one that loads, and one for each way a load
can fail (as the real Triton classifies them: at the poll step, or when a version starts).

``write_control_repository(root)`` writes them all; each writer can also be used alone.
"""

from __future__ import annotations

from pathlib import Path

# Triton's "simple" example model, as its model-control examples expect it: INPUT0 and
# INPUT1 INT32 [16], OUTPUT0 = sum, OUTPUT1 = difference, max_batch_size 8. The inputs and
# outputs come from auto_complete_config, so a load whose config override gives only
# max_batch_size still loads.
SIMPLE_CONFIG = """
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
        { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
         { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
"""

SIMPLE_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        for name in ("INPUT0", "INPUT1"):
            config.add_input({"name": name, "data_type": "TYPE_INT32", "dims": [16]})
        for name in ("OUTPUT0", "OUTPUT1"):
            config.add_output({"name": name, "data_type": "TYPE_INT32", "dims": [16]})
        return config

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            outputs = [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""

# A Python model with one FP32 [1] input and output, for tests whose model code is the point.
FP32_IO_CONFIG = (
    'backend: "python"\nmax_batch_size: 0\n'
    'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
)

INITIALIZE_RAISES = """
class TritonPythonModel:
    def initialize(self, args):
        raise ValueError("initialize refused")

    def execute(self, requests):
        return []
"""

IMPORT_FAILS = "import no_such_module_of_any_kind\n"

_SIMPLE_WITH_OUTPUT0_DIMS_1 = SIMPLE_CONFIG.replace(
    'name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ]',
    'name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ]',
)

# Each failing model: (config.pbtxt, model.py or None for no version folder at all).
FAILING_MODELS: dict[str, tuple[str, str | None]] = {
    # a version fails to start: INVALID_ARG "load failed for model ..."
    "init_raises": (SIMPLE_CONFIG, INITIALIZE_RAISES),
    "import_fails": (SIMPLE_CONFIG, IMPORT_FAILS),
    # the config says [1], the model's auto_complete_config says [16]
    "autocomplete_mismatch": (_SIMPLE_WITH_OUTPUT0_DIMS_1, SIMPLE_MODEL),
    "unknown_backend": (SIMPLE_CONFIG.replace('"python"', '"no_such_backend"'), SIMPLE_MODEL),
    "no_version": (SIMPLE_CONFIG, None),
    # the poll step fails: INTERNAL "failed to load ..., failed to poll from model repository"
    "malformed_config": ('backend: "python" max_batch_size: {\n', SIMPLE_MODEL),
    "negative_batch": (
        SIMPLE_CONFIG.replace("max_batch_size: 8", "max_batch_size: -3"),
        SIMPLE_MODEL,
    ),
    "wrong_name": ('name: "another_name"\n' + SIMPLE_CONFIG, SIMPLE_MODEL),
}


def write_model_folder(root: Path, name: str, config: str, source: str | None) -> Path:
    model_dir = root / name
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(config)
    if source is not None:
        (model_dir / "1").mkdir(exist_ok=True)
        (model_dir / "1" / "model.py").write_text(source)
    return model_dir


def write_simple(root: Path, name: str = "simple") -> Path:
    return write_model_folder(root, name, SIMPLE_CONFIG, SIMPLE_MODEL)


def write_control_repository(root: Path) -> Path:
    """``simple`` and every failing model under ``root``."""
    write_simple(root)
    for name, (config, source) in FAILING_MODELS.items():
        write_model_folder(root, name, config, source)
    return root
