"""Fuzz the shared-memory register and reference parameters: register a system region
over a real object with fuzzed offset and size (and a fuzzed key), then read an input and
aim an output at fuzzed offsets, sizes, datatypes and shapes. Every read or write must stay
inside a live mapping: a fault here kills the fuzzer."""

from __future__ import annotations

import sys

import atheris
import instrumentation

# what this target fuzzes (instrumentation.py)
SUBJECT = ("pytriton_core.memory", "pytriton_core.inference.tensor")

with instrumentation.imports(SUBJECT):
    import numpy as np
    from common import SHM_KEY, SHM_SIZE, completed, fuzz, serve

    from pytriton_core import types
    from pytriton_core.errors import ServerError
    from pytriton_core.inference.tensor import Tensor
    from pytriton_core.memory import ShmReference

SERVICE = serve()
WIRE = sorted(types.BY_WIRE_NAME)
INT64 = (-(2**63), 2**63 - 1)


def _number(provider: atheris.FuzzedDataProvider) -> int:
    """Mostly near the region's edges, sometimes anywhere in int64."""
    choice = provider.ConsumeIntInRange(0, 3)
    if choice == 0:
        return provider.ConsumeIntInRange(*INT64)
    edge = (0, SHM_SIZE, SHM_SIZE // 2)[choice - 1]
    return edge + provider.ConsumeIntInRange(-64, 64)


def test_one_input(data: bytes) -> None:
    provider = atheris.FuzzedDataProvider(data)
    key = SHM_KEY if provider.ConsumeBool() else "/" + provider.ConsumeUnicodeNoSurrogates(16)
    offset, size = _number(provider), _number(provider)
    try:
        completed(SERVICE.register_system_shm("probe", key, offset, size))
    except ServerError:
        region = "fuzzed"  # the region registered over the whole object
    else:
        region = "probe"
    try:
        datatype = types.from_wire_name(provider.PickValueInList(WIRE))
        assert datatype is not None
        shape = [
            provider.ConsumeIntInRange(-2, 300) for _ in range(provider.ConsumeIntInRange(0, 3))
        ]
        ref = ShmReference(region, _number(provider), _number(provider))
        try:
            tensor = SERVICE.shm_input(
                ref, datatype, shape, input_name="INPUT0", model_name="fuzz", request_id=""
            )
            tensor.data.tobytes()
        except ServerError:
            pass
        try:
            target = SERVICE.shm_output(
                "OUTPUT0", ShmReference(region, _number(provider), _number(provider))
            )
            payload = provider.ConsumeBytes(provider.ConsumeIntInRange(0, 2 * SHM_SIZE))
            target.write(
                Tensor("OUTPUT0", types.BY_WIRE_NAME["UINT8"], np.frombuffer(payload, np.uint8))
            )
        except ServerError:
            pass
    finally:
        try:
            completed(SERVICE.unregister_shm("system", "probe"))
        except ServerError:
            pass


if __name__ == "__main__":
    fuzz(test_one_input, SUBJECT)
    sys.exit(0)
