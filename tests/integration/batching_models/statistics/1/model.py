"""Records the batches it executes: see batching_recorder.py at the repository's top."""

import sys
from pathlib import Path

_REPOSITORY = str(Path(__file__).resolve().parents[2])
if _REPOSITORY not in sys.path:
    sys.path.insert(0, _REPOSITORY)
# No __pycache__ beside the models: the servers would take it for a model.
_WRITE_BYTECODE, sys.dont_write_bytecode = sys.dont_write_bytecode, True
try:
    from batching_recorder import RecordingModel
finally:
    sys.dont_write_bytecode = _WRITE_BYTECODE


class TritonPythonModel(RecordingModel):
    pass
