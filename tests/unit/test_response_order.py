"""preserve_ordering for decoupled responses: a later request's responses wait for every
earlier request's final one, then leave in the order they were sent."""

from __future__ import annotations

from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.scheduling.response_order import ResponseOrder


def test_responses_leave_in_the_requests_order() -> None:
    delivered: list[tuple[str, str, bool]] = []

    def request(name: str) -> InferenceRequest:
        def on_response(response: InferenceResponse | None, final: bool) -> None:
            tag = "" if response is None else str(response.parameters["tag"])
            delivered.append((name, tag, final))

        return InferenceRequest(model_name="m", id=name, on_response=on_response)

    def response(tag: str) -> InferenceResponse:
        return InferenceResponse(parameters={"tag": tag})

    order = ResponseOrder()
    a, b, c = request("a"), request("b"), request("c")
    order.place([a, b])
    order.place([c, a])  # a request placed again keeps its place
    c.deliver(response("c1"), True)
    b.deliver(response("b1"), False)
    a.deliver(response("a1"), False)  # the head's responses go at once
    assert delivered == [("a", "a1", False)]
    a.deliver(None, True)  # its final lets b's go, and b is the head now; c still waits
    assert delivered[1:] == [("a", "", True), ("b", "b1", False)]
    b.deliver(response("b2"), False)
    b.deliver(response("b3"), True)
    assert delivered[3:] == [("b", "b2", False), ("b", "b3", True), ("c", "c1", True)]
    assert order.pending() == 0
