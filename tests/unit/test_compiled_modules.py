"""The request-path modules named in csrc/compiled_modules.txt are imported compiled, and
compiled they still offer every name other code imports from them.

A ``.pxd`` that cimports a name (an extension type of another module, say) takes the place
of the ``.py``'s import of that name: the compiled module no longer offers it as a Python
attribute. That is fine for a name the module only uses, and breaks whoever imports it from
there: the last test finds such an import at once.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.machinery
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIST = ROOT / "csrc" / "compiled_modules.txt"
NAMES = [
    line.strip()
    for line in LIST.read_text().splitlines()
    if line.strip() and not line.startswith("#")
]


def _source(name: str) -> Path:
    return (ROOT / "src" / Path(*name.split("."))).with_suffix(".py")


@functools.cache
def _imports() -> dict[str, set[str]]:
    """Module -> the names the package, its tests, bench and tools import from it."""
    found: dict[str, set[str]] = {}
    for folder in ("src", "tests", "bench", "tools"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module in NAMES:
                    found.setdefault(node.module, set()).update(a.name for a in node.names)
    return found


def test_the_list_names_modules_of_the_package() -> None:
    assert NAMES
    for name in NAMES:
        assert _source(name).is_file(), name


@pytest.mark.parametrize("name", NAMES)
def test_module_is_imported_from_its_extension(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__file__ is not None
    assert module.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)), (
        f"{name} was imported from {module.__file__}: build and install the package "
        "(pip install .) so that setup.py compiles it"
    )


@pytest.mark.parametrize("name", NAMES)
def test_compiled_module_offers_every_name_imported_from_it(name: str) -> None:
    module = importlib.import_module(name)
    missing = sorted(n for n in _imports().get(name, ()) if not hasattr(module, n))
    assert not missing, (
        f"{name} compiled lacks {missing}, which other code imports from it: a cimport in "
        "its .pxd takes the place of the import of the same name (cimport it under another "
        "name: `cimport X as CX`)"
    )


def _declared_fields(pxd: str) -> dict[str, set[str]]:
    """Extension type -> the fields its ``.pxd`` declares."""
    fields: dict[str, set[str]] = {}
    current: set[str] | None = None
    for line in pxd.splitlines():
        if line.startswith("cdef class "):
            current = fields.setdefault(line.split()[2].split("(")[0].rstrip(":"), set())
        elif line and not line[0].isspace():
            current = None
        elif current is not None and line.strip().startswith("cdef "):
            words = line.split("#")[0].replace("(", " ( ").split()
            if "(" not in words:  # a field, not a method
                current.update(name.strip(",") for name in words[2:] if name.isidentifier())
    return fields


@pytest.mark.parametrize("name", NAMES)
def test_every_field_an_extension_type_sets_is_declared(name: str) -> None:
    """An extension type has no ``__dict__``: a field its ``.py`` sets that its ``.pxd``
    does not declare fails only when that line runs (an AttributeError at load, say, after a
    merge adds a field to the ``.py`` alone)."""
    pxd = _source(name).with_suffix(".pxd")
    if not pxd.is_file():
        return
    declared = _declared_fields(pxd.read_text())
    tree = ast.parse(_source(name).read_text())
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or node.name not in declared:
            continue
        setters = {
            item.name
            for item in node.body
            if isinstance(item, ast.FunctionDef)
            and any(
                isinstance(d, ast.Attribute) and d.attr == "setter" for d in item.decorator_list
            )
        }
        assigned = {
            target.attr
            for sub in ast.walk(node)
            if isinstance(sub, (ast.Assign, ast.AnnAssign, ast.AugAssign))
            for target in (sub.targets if isinstance(sub, ast.Assign) else [sub.target])
            if isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "self"
        }
        undeclared = sorted(assigned - declared[node.name] - setters)
        assert not undeclared, f"{name}.{node.name} sets {undeclared}, not declared in {pxd.name}"
