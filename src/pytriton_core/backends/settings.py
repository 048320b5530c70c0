"""``--backend-config`` keys: which the backends here read, which mean nothing here (and
why), and which no backend here knows. The server says so once at startup, for every key
it is given, so that no setting is silently ignored.
"""

from __future__ import annotations

from collections.abc import Mapping

from pytriton_core.backends.registry import BACKENDS

GLOBAL = ""  # the backend name of keys given without one (--backend-config=<key>=<value>)
_BATCH = "default-max-batch-size"  # the auto-completed max_batch_size of batchable models

# The keys each backend reads (global keys reach every backend); a backend not listed reads
# none of its own.
READ: dict[str, frozenset[str]] = {
    GLOBAL: frozenset({_BATCH}),
    "onnxruntime": frozenset(
        {_BATCH, "intra_op_thread_count", "inter_op_thread_count", "enable-global-threadpool"}
    ),
    "openvino": frozenset({_BATCH}),
    "tensorrt": frozenset({_BATCH}),
    "pytorch": frozenset(),
    "python": frozenset(),
    "fil": frozenset({_BATCH, "compile-cache-dir"}),
}

_IN_PROCESS = (
    "the Python backend runs models in this process, without Triton's stub process and "
    "its shared-memory pools"
)
# Keys of Triton's backends that size or locate parts this server does not have.
MEANINGLESS: dict[str, dict[str, str]] = {
    "python": {
        "shm-default-byte-size": _IN_PROCESS,
        "shm-growth-byte-size": _IN_PROCESS,
        "shm-region-prefix-name": _IN_PROCESS,
        "shm_message_queue_size": _IN_PROCESS,
        "stub-timeout-seconds": _IN_PROCESS,
        "thread-pool-size": (
            "each model instance runs on its own thread; an async execute runs on that "
            "thread's own event loop"
        ),
        "backend-directory": "Python-based backends are not loaded from a folder here",
    },
    GLOBAL: {
        "backend-directory": "backends are Python modules of this package",
    },
}


def backend_config_notes(config: Mapping[str, Mapping[str, str]]) -> list[str]:
    """One line per given key that no backend here reads: why, or that it is unknown."""
    notes = []
    for backend, settings in config.items():
        shown = f"{backend}," if backend else ""
        read = READ.get(backend, frozenset()) | READ[GLOBAL]
        for key, value in settings.items():
            if key in read:
                continue
            meaning = MEANINGLESS.get(backend, {}).get(key)
            flag = f"--backend-config={shown}{key}={value}"
            if meaning is not None:
                notes.append(f"{flag}: {meaning}; the setting is not used")
            elif backend and backend not in BACKENDS:
                notes.append(f"{flag}: this server has no backend '{backend}'; not used")
            else:
                where = f"the {backend} backend" if backend else "any backend"
                notes.append(f"{flag}: not a setting {where} here reads; not used")
    return notes
