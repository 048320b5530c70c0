"""Flow control from a slow consumer back to a model that sends responses from its own
thread (a decoupled model's response sender).

A front end that streams gives the request a ``ResponseWindow``; ``send_threadsafe``
acquires each response's bytes from it before handing the response to the event loop, and
the front end releases them once the response has left for the client. A producer that
would take the window past its limit waits on its own thread, so a client that reads slowly
holds about the window's limit in the server however many responses the model has left. A
single response larger than the limit still goes (alone), so nothing deadlocks.
"""

from __future__ import annotations

import threading

from pytriton_core.inference.response import InferenceResponse

DEFAULT_WINDOW_BYTES = 1 << 20


def response_bytes(response: InferenceResponse) -> int:
    """About how many bytes a response's outputs hold (BYTES counted by their contents)."""
    total = 0
    for tensor in response.outputs:
        data = tensor.data
        if data.dtype.hasobject:
            total += sum(len(element) + 4 for element in data.flat)
        else:
            total += data.nbytes
    return total


class ResponseWindow:
    def __init__(self, limit_bytes: int = DEFAULT_WINDOW_BYTES) -> None:
        self._limit = limit_bytes
        self._in_flight = 0
        self._open = True
        self._cond = threading.Condition(threading.Lock())

    def acquire(self, nbytes: int) -> None:
        """Take ``nbytes`` of the window, waiting while others fill it (producer thread)."""
        with self._cond:
            while self._open and self._in_flight and self._in_flight + nbytes > self._limit:
                self._cond.wait()
            self._in_flight += nbytes

    def release(self, nbytes: int) -> None:
        """Give back what a response took, once it has left (event loop)."""
        if nbytes:
            with self._cond:
                self._in_flight -= nbytes
                self._cond.notify_all()

    def close(self) -> None:
        """Stop pacing (the request is cancelled or its consumer gone): waiters go on."""
        with self._cond:
            self._open = False
            self._cond.notify_all()

    @property
    def in_flight(self) -> int:
        return self._in_flight
