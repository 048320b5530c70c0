"""Build: Cython extensions from csrc/ and Python modules generated from the .proto files.

Every ``csrc/<concern>/<name>.pyx`` becomes the extension ``pytriton_core._native.<name>``, and
every module named in ``csrc/compiled_modules.txt`` is compiled from its own ``.py`` source (with
the ``.pxd`` beside it, where there is one, declaring its types).
``PYTRITON_DEBUG_BUILD=1`` builds without optimisation and with Cython's annotate HTML.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy
from Cython.Build import cythonize
import shutil

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent.resolve()
PROTO_DIR = ROOT / "src" / "pytriton_core" / "proto"
DEBUG = os.environ.get("PYTRITON_DEBUG_BUILD") == "1"


def generate_protos() -> None:
    """Compile the .proto files into one descriptor set, loaded at run time into a private pool.

    A private pool (not protoc's *_pb2 modules, which register in the process-wide default
    pool) lets the server share a process with tritonclient, whose generated modules declare
    the same ``inference.*`` symbols.
    """
    import grpc_tools
    from grpc_tools import protoc

    include = str(Path(grpc_tools.__file__).parent / "_proto")
    protos = sorted(str(p.relative_to(PROTO_DIR)) for p in PROTO_DIR.glob("*.proto"))
    if not protos:
        return
    out = PROTO_DIR / "descriptors.binpb"
    args = [
        "protoc",
        f"-I{PROTO_DIR}",
        f"-I{include}",
        "--include_imports",
        f"--descriptor_set_out={out}",
        *protos,
    ]
    if protoc.main(args) != 0:
        sys.exit("protoc failed on " + " ".join(protos))


class BuildPyWithExamples(build_py):
    """Ship the example repositories inside the package: examples/model_repository, the
    server's default repository, and examples/openai_models, served beside it when the
    OpenAI front end is on."""

    def run(self) -> None:
        super().run()
        for name in ("model_repository", "openai_models"):
            target = Path(self.build_lib) / "pytriton_core" / "_bundled" / name
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(
                ROOT / "examples" / name,
                target,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            )


def extensions() -> list[Extension]:
    compile_args = ["-O0", "-g"] if DEBUG else ["-O3"]
    exts = []
    for pyx in sorted((ROOT / "csrc").rglob("*.pyx")):
        exts.append(
            Extension(
                f"pytriton_core._native.{pyx.stem}",
                [str(pyx.relative_to(ROOT))],
                include_dirs=[numpy.get_include(), str(pyx.parent)],
                define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
                extra_compile_args=compile_args,
                language="c++" if (pyx.parent / "cpp").exists() else "c",
            )
        )
    native = cythonize(
        exts,
        language_level=3,
        annotate=DEBUG,
        compiler_directives={
            "boundscheck": DEBUG,
            "wraparound": False,
            "cdivision": True,
            "embedsignature": True,
        },
    )
    return native + compiled_modules(compile_args)


def compiled_modules(compile_args: list[str]) -> list[Extension]:
    """The package's request-path modules (``csrc/compiled_modules.txt``), compiled from their
    own ``.py`` source: Python imports an extension module before the ``.py`` beside it.

    A module's ``.pxd`` (beside its ``.py``) declares what is typed: extension types with typed
    fields, C-level functions and methods, typed locals; another module's ``.pxd`` cimports
    them (the include path is ``src``). Everything else keeps Python's semantics: annotations
    are not C types (a value of another type is not refused where Python takes it), integers
    do not wrap, indexing wraps around. The generated C goes to ``build/cython``.
    """
    names = [
        line.strip()
        for line in (ROOT / "csrc" / "compiled_modules.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    exts = [
        Extension(
            name,
            [str(Path("src", *name.split(".")).with_suffix(".py"))],
            # without debug information they take a fifth of the space installed
            extra_compile_args=compile_args if DEBUG else [*compile_args, "-g0"],
        )
        for name in names
    ]
    return cythonize(
        exts,
        language_level=3,
        annotate=DEBUG,
        build_dir="build/cython",
        include_path=[str(ROOT / "src")],
        compiler_directives={
            "annotation_typing": False,
            "binding": True,
            "embedsignature": True,
        },
    )


# Generated on every setup.py invocation, before setuptools collects package data, so
# wheels, in-place builds and editable installs all carry it.
generate_protos()
setup(ext_modules=extensions(), cmdclass={"build_py": BuildPyWithExamples})
