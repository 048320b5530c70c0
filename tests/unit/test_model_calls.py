"""BLS requests made on the server's own event loop are refused, not left to deadlock."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from pytriton_core import types
from pytriton_core.backends.registry import BackendRegistry
from pytriton_core.errors import InternalError, ServerError
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.tensor import Tensor
from pytriton_core.options import ServerOptions
from pytriton_core.repository.manager import ModelManager
from pytriton_core.repository.model_calls import BLS_ON_LOOP, InProcessCalls


def _request() -> InferenceRequest:
    return InferenceRequest(
        model_name="target",
        inputs={"IN": Tensor("IN", types.BY_WIRE_NAME["FP32"], np.zeros(2, np.float32))},
    )


def test_submit_on_the_server_loop_is_refused() -> None:
    async def on_loop() -> None:
        loop = asyncio.get_running_loop()
        options = ServerOptions()
        calls = InProcessCalls(ModelManager(options, BackendRegistry(), loop), loop, options)
        refusals: list[ServerError] = []
        with pytest.raises(InternalError, match="event loop thread") as raised:
            calls.submit(_request(), refusals.append)
        assert str(raised.value.message) == BLS_ON_LOOP
        assert refusals == []

    asyncio.run(on_loop())


def test_submit_from_another_thread_reaches_the_loop() -> None:
    async def on_loop() -> list[ServerError]:
        loop = asyncio.get_running_loop()
        options = ServerOptions()
        calls = InProcessCalls(ModelManager(options, BackendRegistry(), loop), loop, options)
        refusals: list[ServerError] = []
        await asyncio.to_thread(calls.submit, _request(), refusals.append)
        await asyncio.sleep(0)  # the submit runs on the loop's next turn
        return refusals

    refusals = asyncio.run(on_loop())
    # Handed to the loop, which found no such model: refused there, with the manager's error.
    assert len(refusals) == 1 and "target" in refusals[0].message
