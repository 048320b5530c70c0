"""The private import namespaces of Python models (backends/python/model_imports.py)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from types import ModuleType

from pytriton_core.backends.python.model_imports import ModelImporter


def test_releasing_a_namespace_while_other_threads_import(tmp_path: Path) -> None:
    """Models load and unload in parallel: forgetting one model's modules must not trip over
    another thread adding modules to ``sys.modules`` at the same moment (a load once failed
    with "dictionary changed size during iteration")."""
    (tmp_path / "model.py").write_text("VALUE = 1\n")
    stop = threading.Event()

    def import_others() -> None:
        index = 0
        while not stop.is_set():  # sys.modules grows by one at each step, then shrinks
            name = f"_pytriton_test_churn_{index % 64}"
            if name in sys.modules:
                del sys.modules[name]
            else:
                sys.modules[name] = ModuleType(name)
            index += 1

    churn = threading.Thread(target=import_others, daemon=True)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as CPython allows
    churn.start()
    try:
        for _ in range(200):
            importer = ModelImporter([tmp_path])
            module = importer.import_file(tmp_path / "model.py")
            assert module.VALUE == 1
            importer.release()
            assert importer.package not in sys.modules
    finally:
        stop.set()
        churn.join()
        sys.setswitchinterval(switch)
        for index in range(64):
            sys.modules.pop(f"_pytriton_test_churn_{index}", None)
