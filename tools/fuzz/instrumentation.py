"""How much Python code a fuzzer instruments with atheris's coverage counters.

``PYTRITON_FUZZ_INSTRUMENT`` (``run.py --instrument``) chooses:

- ``all`` (the default, for long runs): every module imported by the fuzzer and every
  function loaded before fuzzing starts, the libraries the parsers lean on included
  (protobuf's text format, the standard library, numpy's Python layer), so that their
  branches guide the search too.
- ``subject`` (CI's short runs): only the fuzzers' own modules (the target and its
  oracles) and the project modules the target names as what it fuzzes (``imports(...)``).
  Instrumenting everything costs a minute or more of startup per target on a loaded
  2-core machine, and even all of ``pytriton_core`` half a minute, which a few seconds of
  fuzzing cannot repay; the parsers under test are what the short run exercises.

This module imports nothing heavy (atheris only when asked to instrument), so a target can
choose its scope before it imports the server, and ``run.py`` can read the scopes anywhere.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SCOPES = ("all", "subject")
ENVIRONMENT = "PYTRITON_FUZZ_INSTRUMENT"
# what the HTTP infer body fuzzers (common.check_http_infer) reach
HTTP_INFER_SUBJECT = (
    "pytriton_core.frontends.http",
    "pytriton_core.inference",
    "pytriton_core.runtime.validation",
    "pytriton_core.memory",
)
_FUZZ_DIR = Path(__file__).resolve().parent


def scope() -> str:
    chosen = os.environ.get(ENVIRONMENT, "all")
    if chosen not in SCOPES:
        raise SystemExit(f"{ENVIRONMENT}={chosen!r}: expected one of {', '.join(SCOPES)}")
    return chosen


def _fuzzer_modules() -> list[str]:
    return [path.stem for path in _FUZZ_DIR.glob("*.py")]


def imports(subject: Sequence[str]) -> Any:
    """A context manager instrumenting, in the ``all`` scope, the modules imported inside
    it. In the ``subject`` scope it does nothing: atheris's import hook chooses whole
    top-level packages only, so ``loaded_functions`` picks the subject's functions after
    the imports instead."""
    if scope() == "subject":
        return contextlib.nullcontext()
    import atheris

    return atheris.instrument_imports()


def _in_subject(function: types.FunctionType, subject: Sequence[str]) -> bool:
    module = getattr(function, "__module__", None) or ""
    if module == "__main__" or module in _fuzzer_modules():
        return True
    return any(module == name or module.startswith(name + ".") for name in subject)


def loaded_functions(subject: Sequence[str]) -> None:
    """Instrument the functions already loaded within the scope: in ``subject``, those of
    the target, the fuzzers' modules and the subject's modules (``subject`` names packages
    with their submodules); in ``all``, every one. Instrumenting twice is a no-op."""
    import atheris

    if scope() == "all":
        atheris.instrument_all()
        return
    for candidate in gc.get_objects():
        if (
            isinstance(candidate, types.FunctionType)
            and candidate.__module__ in sys.modules
            and _in_subject(candidate, subject)
        ):
            atheris.instrument_func(candidate)
