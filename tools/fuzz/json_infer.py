"""Fuzz the JSON infer request: the JSON limits scan, orjson, and the codec that turns the
document into a core request (tensors from ``data``, parameters, outputs, shared-memory
references), then the model's validation."""

from __future__ import annotations

import sys

import instrumentation

with instrumentation.imports(instrumentation.HTTP_INFER_SUBJECT):
    from common import MODELS, check_http_infer, fuzz, serve

SERVICE = serve()
NAMES = sorted(MODELS)


def test_one_input(data: bytes) -> None:
    if not data:
        return
    check_http_infer(SERVICE, NAMES[data[0] % len(NAMES)], data[1:], None)


if __name__ == "__main__":
    fuzz(test_one_input, instrumentation.HTTP_INFER_SUBJECT)
    sys.exit(0)
