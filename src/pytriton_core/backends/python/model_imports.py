"""Each Python model imports its own helper modules.

Triton runs every model in a stub process of its own, whose ``sys.path`` holds the model's
version folder and model folder. In-process, a shared ``sys.path`` and ``sys.modules`` would
make two models with a ``helper.py`` each share the first one loaded, and a reload keep the
old helper. Instead, each loaded model version gets a private package
(``_pytriton_models.m<hex>``) whose ``__path__`` is its version folder then its model folder:

- ``model.py`` and every module found there are modules of that package, registered in
  ``sys.modules`` under it (so pickling, dataclasses and tracebacks work);
- their code runs with ``__builtins__`` whose ``__import__`` sends a top-level import of a
  name the model's folders hold (``import helper``, ``from helper import f``,
  ``import helpers.sub``) to the private package first, as the stub's ``sys.path`` order
  does; every other import is the interpreter's own;
- sources are compiled from the file at each load (no ``__pycache__`` is read or written in
  the repository), so a reload sees a helper changed a moment ago;
- unloading removes the package's modules from ``sys.modules``.

One finder on ``sys.meta_path`` serves the private packages' submodules (relative imports in
a helper package); it answers only for names under ``_pytriton_models``. Known limit:
``importlib.import_module("helper")`` goes past ``__import__`` and so does not see the
model's folders (Triton's stub would find it on ``sys.path``).
"""

from __future__ import annotations

import builtins
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT_PACKAGE = "_pytriton_models"
_IMPORTER_ATTRIBUTE = "__pytriton_importer__"
_install_lock = threading.Lock()


class _SourceLoader(importlib.machinery.SourceFileLoader):
    """Runs a model's source file with the model's ``__builtins__``, compiled afresh."""

    def __init__(self, fullname: str, path: str, model_builtins: Mapping[str, Any]) -> None:
        super().__init__(fullname, path)
        self._builtins = model_builtins

    def get_code(self, fullname: str) -> Any:
        return self.source_to_code(self.get_data(self.path), self.path)

    def exec_module(self, module: ModuleType) -> None:
        module.__dict__["__builtins__"] = self._builtins
        super().exec_module(module)


class _PrivatePackageFinder(importlib.abc.MetaPathFinder):
    """Finds the submodules of the private packages (and only those)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(ROOT_PACKAGE + "."):
            return None
        owner = sys.modules.get(".".join(fullname.split(".", 2)[:2]))
        importer = getattr(owner, _IMPORTER_ATTRIBUTE, None)
        if not isinstance(importer, ModelImporter) or path is None:
            return None
        return importer.find_spec(fullname, list(path))


def _install_finder() -> None:
    with _install_lock:
        if ROOT_PACKAGE not in sys.modules:
            root = ModuleType(ROOT_PACKAGE, "private packages of loaded Python models")
            root.__path__ = []
            sys.modules[ROOT_PACKAGE] = root
        if not any(isinstance(finder, _PrivatePackageFinder) for finder in sys.meta_path):
            sys.meta_path.insert(0, _PrivatePackageFinder())


class ModelImporter:
    """The import namespace of one loaded model version (see the module docstring)."""

    def __init__(self, search_dirs: Sequence[Path]) -> None:
        _install_finder()
        importlib.invalidate_caches()  # files written since the last load are seen
        self.package = f"{ROOT_PACKAGE}.m{uuid.uuid4().hex}"
        self._dirs = [str(d) for d in search_dirs]
        self._owned: dict[str, bool] = {}
        self._lock = threading.Lock()
        self.builtins: dict[str, Any] = dict(builtins.__dict__)
        self.builtins["__import__"] = self._import
        package = ModuleType(self.package)
        package.__path__ = list(self._dirs)
        package.__package__ = self.package
        package.__spec__ = importlib.machinery.ModuleSpec(self.package, None, is_package=True)
        package.__spec__.submodule_search_locations = list(self._dirs)
        setattr(package, _IMPORTER_ATTRIBUTE, self)
        sys.modules[self.package] = package

    def import_file(self, path: Path) -> ModuleType:
        """Execute ``path`` (the model file) as a module of the private package."""
        name = path.stem if path.stem.isidentifier() else "model"
        fullname = f"{self.package}.{name}"
        loader = _SourceLoader(fullname, str(path), self.builtins)
        spec = importlib.util.spec_from_file_location(fullname, path, loader=loader)
        if spec is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[fullname] = module
        try:
            loader.exec_module(module)
        except BaseException:
            sys.modules.pop(fullname, None)
            raise
        return module

    def find_spec(self, fullname: str, path: list[str]) -> importlib.machinery.ModuleSpec | None:
        """The spec of a module under the private package, with the model's builtins."""
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec  # not found, a namespace package, an extension or a .pyc: as is
        assert spec.origin is not None
        return importlib.util.spec_from_file_location(
            fullname,
            spec.origin,
            loader=_SourceLoader(fullname, spec.origin, self.builtins),
            submodule_search_locations=spec.submodule_search_locations,
        )

    def release(self) -> None:
        """Forget every module of the private package (the model is unloaded)."""
        prefix = self.package + "."
        # list() copies the keys in one step under the GIL; a comprehension over the dict
        # itself can be interrupted by another thread's import (models load in parallel).
        for name in [n for n in list(sys.modules) if n == self.package or n.startswith(prefix)]:
            sys.modules.pop(name, None)

    # ------------------------------------------------------------ __import__

    def _owns(self, top: str) -> bool:
        """Whether the model's folders hold a module or regular package named ``top``."""
        with self._lock:
            owned = self._owned.get(top)
            if owned is None:
                spec = importlib.machinery.PathFinder.find_spec(top, self._dirs)
                owned = spec is not None and spec.origin is not None  # not a namespace
                self._owned[top] = owned
            return owned

    def _import(
        self,
        name: str,
        globals: Mapping[str, Any] | None = None,
        locals: Mapping[str, Any] | None = None,
        fromlist: Sequence[str] | None = (),
        level: int = 0,
    ) -> ModuleType:
        real: Callable[..., ModuleType] = builtins.__import__
        if level != 0 or not name:
            return real(name, globals, locals, fromlist, level)  # relative: already private
        top = name.partition(".")[0]
        if not self._owns(top):
            return real(name, globals, locals, fromlist, level)
        module = importlib.import_module(f"{self.package}.{name}")
        if not fromlist:
            return sys.modules[f"{self.package}.{top}"]
        if hasattr(module, "__path__"):
            for item in fromlist:
                if item != "*" and not hasattr(module, item):
                    try:
                        importlib.import_module(f"{module.__name__}.{item}")
                    except ModuleNotFoundError:
                        pass  # an attribute that does not exist: `from x import y` says so
        return module
