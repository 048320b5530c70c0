"""Starting a model version: what a failure after the backend's load leaves behind."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from pytriton_core.backends.registry import BackendRegistry
from pytriton_core.config.parse import parse_config_text
from pytriton_core.memory.device import DevicePools
from pytriton_core.options import ServerOptions
from pytriton_core.repository.identity import ModelId
from pytriton_core.repository.polling import PolledModel
from pytriton_core.repository.timestamps import ModelTimestamp
from pytriton_core.repository.version_start import VersionStarter

CONFIG = """
name: "finalizes"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""

MODEL = """
class TritonPythonModel:
    def execute(self, requests):
        return []
"""


def test_a_statistics_failure_lets_the_loaded_backend_model_go(tmp_path: Path) -> None:
    """With --workers N the board can be full: the version fails to start, and the backend
    model is finalized (the Python backend forgets the model's private modules; before,
    they stayed in ``sys.modules`` until the server exited)."""
    model_dir = tmp_path / "finalizes"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(CONFIG)
    (model_dir / "1" / "model.py").write_text(MODEL)

    def full_board(*_args: object) -> object:
        raise RuntimeError("more than 4 model versions loaded at once")

    loop = asyncio.new_event_loop()
    starter = VersionStarter(
        ServerOptions(), BackendRegistry(), loop, (), None, DevicePools({}), statistics=full_board
    )
    polled = PolledModel(
        ModelId("", "finalizes"),
        model_dir,
        parse_config_text(CONFIG, "config.pbtxt"),
        ModelTimestamp.read(model_dir, model_dir / "config.pbtxt"),
    )

    def model_modules() -> set[str]:
        return {
            name
            for name, module in list(sys.modules.items())
            if str(getattr(module, "__file__", None) or "").startswith(str(model_dir))
        }

    try:
        with pytest.raises(RuntimeError, match="more than 4 model versions"):
            starter.start(polled, 1)
    finally:
        loop.close()
    assert model_modules() == set()
